"""CohereEmbed (/v2/embed) on the fake pooling engine: each text embedded
as its own input; input_type's prompt prefix (a system message rendered by
the chat template); truncate END / START / NONE with max_tokens; the
embedding types (float; binary / ubinary sign bits as vLLM packs them;
base64 float32); meta's billed units; bad bodies INVALID_ARGUMENT naming
the field."""

from __future__ import annotations

import base64
import collections.abc
import struct
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tests.servers import fake_serving
from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.pooling import fake_embedding
from tokenwire.v1 import embeddings_pb2, service_pb2_grpc

PREFIXES = {"search_query": "query: ", "search_document": "passage: "}


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[Any, FakeEngine]]:
    engine = FakeEngine(max_model_len=64)
    engine.pooling = True
    engine.instructions = PREFIXES
    with fake_serving(engine, served_model_name="fake-embed") as server, \
            grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


def embed(stub: Any, **body: Any) -> dict[str, Any]:
    resp = stub.CohereEmbed(json_format.ParseDict(body, embeddings_pb2.CohereEmbedRequest()),
                            timeout=10)
    return json_format.MessageToDict(resp, preserving_proto_field_name=True)


def test_texts_are_embedded_in_every_type(served) -> None:
    stub, engine = served
    texts = ["hello there", "another"]
    body = embed(stub, texts=texts, embedding_types=["float", "binary", "ubinary", "base64"])
    ids = [engine.encode(t, add_special_tokens=True) for t in texts]
    want = [fake_embedding(i) for i in ids]
    assert body["id"].startswith("embd-") and body["response_type"] == "embeddings_by_type"
    assert body["texts"] == texts
    assert body["meta"] == {"api_version": {"version": "2"},
                            "billed_units": {"input_tokens": sum(map(len, ids)),
                                             "image_tokens": 0}}
    floats = body["embeddings"]["float"]
    assert len(floats) == 2 and all(a == pytest.approx(b) for a, b in zip(floats, want,
                                                                          strict=True))
    bits = [[int("".join("1" if x >= 0 else "0" for x in v[k:k + 8]), 2)
             for k in range(0, len(v), 8)] for v in want]
    assert body["embeddings"]["ubinary"] == bits
    assert body["embeddings"]["binary"] == [[b - 128 for b in row] for row in bits]
    decoded = [list(struct.unpack(f"<{len(v)}f", base64.b64decode(s)))
               for v, s in zip(want, body["embeddings"]["base64"], strict=True)]
    assert all(a == pytest.approx(b, abs=1e-6) for a, b in zip(decoded, want, strict=True))
    assert set(embed(stub, texts=texts)["embeddings"]) == {"float"}  # the default type


def test_input_type_is_the_models_prompt_prefix(served) -> None:
    stub, engine = served
    body = embed(stub, texts=["what is tokenwire"], input_type="search_query")
    ids = engine.render_chat([{"role": "system", "content": "query: "},
                              {"role": "user", "content": "what is tokenwire"}],
                             RenderOptions(add_generation_prompt=False))
    assert engine.pooled[-1].prompt_token_ids == ids
    assert body["embeddings"]["float"][0] == pytest.approx(fake_embedding(ids))


def test_truncation(served) -> None:
    stub, engine = served
    text = "a long text about nothing in particular"
    ids = engine.encode(text, add_special_tokens=True)
    embed(stub, texts=[text], max_tokens=5)  # END (the default)
    assert engine.pooled[-1].prompt_token_ids == ids[:5]
    embed(stub, texts=[text], max_tokens=5, truncate="START")
    assert engine.pooled[-1].prompt_token_ids == ids[-5:]
    embed(stub, texts=[text], truncate="NONE", max_tokens=len(ids))
    assert engine.pooled[-1].prompt_token_ids == ids


def refused(stub: Any, **body: Any) -> tuple[str, str, str]:
    with pytest.raises(grpc.RpcError) as exc:
        embed(stub, **body)
    info = error_info(exc.value)
    return exc.value.code().name, info.metadata.get("param", ""), info.reason


def test_bad_bodies_name_the_field(served) -> None:
    stub, _ = served
    assert refused(stub, texts=["x" * 40], truncate="NONE", max_tokens=5) == (
        "INVALID_ARGUMENT", "max_tokens", "PROMPT_TOO_LONG")
    assert refused(stub, texts=["x"], input_type="classification") == (
        "INVALID_ARGUMENT", "input_type", "VALUE_NOT_ALLOWED")
    assert refused(stub, texts=["x"], embedding_types=["int8"]) == (
        "INVALID_ARGUMENT", "embedding_types", "VALUE_NOT_ALLOWED")
    assert refused(stub, texts=["x"], truncate="MIDDLE") == (
        "INVALID_ARGUMENT", "truncate", "VALUE_NOT_ALLOWED")
    assert refused(stub, images=["data:image/png;base64,AAAA"]) == (
        "INVALID_ARGUMENT", "images", "FEATURE_DISABLED")
    assert refused(stub) == ("INVALID_ARGUMENT", "texts", "FIELD_REQUIRED")
    assert refused(stub, texts=["x"], max_tokens=0) == (
        "INVALID_ARGUMENT", "max_tokens", "VALUE_OUT_OF_RANGE")
    assert refused(stub, texts=["x"] * 65) == ("INVALID_ARGUMENT", "texts", "TOO_MANY_ITEMS")
    assert refused(stub, texts=["x"], output_dimension=9)[1] == "dimensions"
    assert embed(stub, texts=["still serving"])["embeddings"]["float"]


def test_a_model_without_task_instructions_refuses_input_type() -> None:
    engine = FakeEngine(max_model_len=64)
    engine.pooling = True
    with fake_serving(engine) as server, grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        code, param, _ = refused(stub, texts=["x"], input_type="search_query")
        assert (code, param) == ("INVALID_ARGUMENT", "input_type")
        assert embed(stub, texts=["x"])["embeddings"]["float"]
