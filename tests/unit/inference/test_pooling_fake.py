"""CreateEmbedding (/v1/embeddings) and Classify (/classify) on the fake
pooling engine: each input
(a string, strings, ids, id lists) is embedded as its own engine request,
answered in input order with usage; base64 is the little-endian float32
bytes of the same numbers; dimensions, use_activation and truncation reach
the engine; bad bodies are INVALID_ARGUMENT naming the field; a generative
model refuses embeddings and a pooling model refuses generation
(FAILED_PRECONDITION), and the server serves on."""

from __future__ import annotations

import base64
import collections.abc
import struct
from typing import Any

import grpc
import pytest
from google.protobuf import json_format, struct_pb2

from tests.rpc import chat_request, error_info
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.pooling import DIMENSIONS, LABELS, fake_embedding, fake_scores
from tokenwire.v1 import embeddings_pb2, service_pb2_grpc


@pytest.fixture(scope="module")
def pooled() -> collections.abc.Iterator[tuple[Any, FakeEngine]]:
    engine = FakeEngine(max_model_len=64)
    engine.pooling = True
    with fake_serving(engine, served_model_name="fake-embed") as server, \
            grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


def embed(stub: Any, **body: Any) -> embeddings_pb2.CreateEmbeddingResponse:
    return stub.CreateEmbedding(json_format.ParseDict(
        body, embeddings_pb2.CreateEmbeddingRequest()), timeout=10)


def vectors(resp: embeddings_pb2.CreateEmbeddingResponse) -> list[list[float]]:
    return [list(json_format.MessageToDict(d)["embedding"]) for d in resp.data]


def refused(stub: Any, **body: Any) -> tuple[str, str, str]:
    with pytest.raises(grpc.RpcError) as exc:
        embed(stub, **body)
    info = error_info(exc.value)
    return exc.value.code().name, info.metadata.get("param", ""), info.reason


def test_each_input_is_embedded_in_order(pooled) -> None:
    stub, engine = pooled
    texts = ["hello there", "another text", "x"]
    resp = embed(stub, model="fake-embed", input=texts)
    ids = [engine.encode(t, add_special_tokens=True) for t in texts]
    assert resp.object == "list" and resp.model == "fake-embed"
    assert [(d.index, d.object) for d in resp.data] == [(0, "embedding"), (1, "embedding"),
                                                        (2, "embedding")]
    assert vectors(resp) == [fake_embedding(i) for i in ids]
    assert [r.prompt_token_ids for r in engine.pooled[-3:]] == ids
    assert (resp.usage.prompt_tokens, resp.usage.total_tokens) == (sum(map(len, ids)),) * 2
    # One string, ids, id lists: the same numbers for the same ids.
    one = embed(stub, input=texts[0])
    assert vectors(one) == vectors(embed(stub, input=ids[0])) == [fake_embedding(ids[0])]
    assert vectors(embed(stub, input=ids[:2])) == vectors(resp)[:2]
    assert vectors(embed(stub, input="hello there", add_special_tokens=False)) == [
        fake_embedding(engine.encode("hello there", add_special_tokens=False))]


def test_base64_is_the_float32_bytes_of_the_numbers(pooled) -> None:
    stub, _ = pooled
    floats = vectors(embed(stub, input=["abc", "de"]))
    b64 = embed(stub, input=["abc", "de"], encoding_format="base64")
    decoded = [list(struct.unpack(f"<{DIMENSIONS}f", base64.b64decode(d.embedding.string_value)))
               for d in b64.data]
    assert decoded == [[struct.unpack("<f", struct.pack("<f", x))[0] for x in v] for v in floats]


def test_dimensions_activation_and_truncation_reach_the_engine(pooled) -> None:
    stub, engine = pooled
    ids = list(range(10, 30))
    assert vectors(embed(stub, input=ids, dimensions=3)) == [fake_embedding(ids, 3)]
    assert vectors(embed(stub, input=ids, use_activation=False)) == [
        fake_embedding(ids, normalize=False)]
    embed(stub, input=ids, truncate_prompt_tokens=5)
    assert engine.pooled[-1].prompt_token_ids == ids[:5]  # right: keep the first
    embed(stub, input=ids, truncate_prompt_tokens=5, truncation_side="left")
    assert engine.pooled[-1].prompt_token_ids == ids[-5:]
    long = list(range(3, 100))  # longer than the 64-token window: cut, not refused
    embed(stub, input=long, truncate_prompt_tokens=-1)
    assert engine.pooled[-1].prompt_token_ids == long[:64]


@pytest.mark.parametrize(("body", "param", "reason"), [
    ({"input": "x", "encoding_format": "bytes"}, "encoding_format", "VALUE_NOT_ALLOWED"),
    ({"input": "x", "dimensions": 99}, "dimensions", "VALUE_OUT_OF_RANGE"),
    ({"input": "x", "dimensions": 0}, "dimensions", "VALUE_OUT_OF_RANGE"),
    ({"input": "x", "truncation_side": "middle"}, "truncation_side", "VALUE_NOT_ALLOWED"),
    ({"input": "x", "truncate_prompt_tokens": 0}, "truncate_prompt_tokens",
     "VALUE_OUT_OF_RANGE"),
    ({}, "input", "FIELD_REQUIRED"),
    ({"input": []}, "input", "EMPTY_VALUE"),
    ({"input": ""}, "input", "PROMPT_EMPTY"),
    ({"input": ["a", [1, 2]]}, "input", "INVALID_TYPE"),
    ({"input": [1, 2, 10**9]}, "input", "TOKEN_ID_OUT_OF_VOCAB"),
    ({"input": list(range(3, 100))}, "input", "PROMPT_TOO_LONG"),
    ({"input": ["a"] * 65}, "input", "TOO_MANY_ITEMS"),
    ({"input": "x", "model": "other"}, "model", "MODEL_NOT_FOUND"),
])
def test_bad_bodies_name_the_field(pooled, body, param, reason) -> None:
    stub, _ = pooled
    code, got_param, got_reason = refused(stub, **body)
    assert (got_param, got_reason) == (param, reason)
    assert code in ("INVALID_ARGUMENT", "NOT_FOUND")
    assert vectors(embed(stub, input="still serving"))  # the server serves on


def test_a_pooling_model_does_not_generate_and_a_generative_one_does_not_embed(pooled) -> None:
    stub, _ = pooled
    with pytest.raises(grpc.RpcError) as exc:
        stub.CreateChatCompletion(chat_request(model="fake-embed"), timeout=10)
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert error_info(exc.value).reason == "MODEL_DOES_NOT_GENERATE"
    with fake_serving(FakeEngine(max_model_len=64)) as server, \
            grpc.insecure_channel(server.address) as ch:
        plain = service_pb2_grpc.TokenwireServiceStub(ch)
        assert refused(plain, input="x")[::2] == ("FAILED_PRECONDITION", "MODEL_DOES_NOT_POOL")
        with pytest.raises(grpc.RpcError) as exc:
            plain.Classify(embeddings_pb2.ClassifyRequest(input=json_format.ParseDict(
                "x", struct_pb2.Value())), timeout=10)
        assert error_info(exc.value).reason == "MODEL_DOES_NOT_POOL"


def classify(stub: Any, **body: Any) -> embeddings_pb2.ClassifyResponse:
    return stub.Classify(json_format.ParseDict(body, embeddings_pb2.ClassifyRequest()),
                         timeout=10)


def test_classify_scores_each_input_and_names_the_top_class(pooled) -> None:
    stub, engine = pooled
    engine.pool_tasks = ("classify",)  # a classifier's pooling task
    try:
        texts = ["great product", "terrible", "it is fine"]
        ids = [engine.encode(t, add_special_tokens=True) for t in texts]
        resp = classify(stub, model="fake-embed", input=texts)
        assert resp.object == "list" and resp.id.startswith("classify-")
        for i, (item, prompt) in enumerate(zip(resp.data, ids, strict=True)):
            scores = fake_scores(prompt)
            assert (item.index, list(item.probs), item.num_classes) == (i, scores, len(LABELS))
            assert item.label == LABELS[scores.index(max(scores))]
            assert abs(sum(item.probs) - 1) < 1e-9
        assert resp.usage.prompt_tokens == sum(map(len, ids))
        raw = classify(stub, input=ids[0], use_activation=False)
        assert list(raw.data[0].probs) == fake_scores(ids[0], activation=False)
        assert [r.task for r in engine.pooled[-4:]] == ["classify"] * 4
        classify(stub, input=list(range(3, 40)), truncate_prompt_tokens=4, truncation_side="left")
        assert engine.pooled[-1].prompt_token_ids == [36, 37, 38, 39]
        with pytest.raises(grpc.RpcError) as exc:
            classify(stub, input=[])
        assert error_info(exc.value).metadata["param"] == "input"
    finally:
        del engine.pool_tasks
    # A pooling server serves its model's task only (vLLM's): not /classify here.
    with pytest.raises(grpc.RpcError) as exc:
        classify(stub, input="x")
    assert error_info(exc.value).reason == "TASK_NOT_SUPPORTED"


def pool(stub: Any, **body: Any) -> embeddings_pb2.PoolResponse:
    return stub.Pool(json_format.ParseDict(body, embeddings_pb2.PoolRequest()), timeout=10)


def test_pooling_runs_the_models_pooling_task(pooled) -> None:
    """vLLM's /pooling: the model's pooling task (named or not); another
    task is refused by name, as vLLM does; a token-level task answers a row
    per token (a process reward model's per-token scores), base64 every
    value in order; a task the model does not serve at all is refused."""
    stub, engine = pooled
    ids = engine.encode("step one. step two.", add_special_tokens=True)
    resp = pool(stub, input=ids)  # the fake's pooling task: embed
    assert resp.id.startswith("pool-") and resp.data[0].object == "pooling"
    assert list(json_format.MessageToDict(resp.data[0])["data"]) == fake_embedding(ids)
    assert refused_pool(stub, input=ids, task="classify") == ("task", "VALUE_NOT_ALLOWED")
    assert refused_pool(stub, input=ids, task="reward") == ("task", "VALUE_NOT_ALLOWED")
    engine.pool_tasks = ("token_classify", "classify")  # a process reward model's
    try:
        for body in ({"task": "token_classify"}, {}):
            rows = json_format.MessageToDict(pool(stub, input=ids, **body).data[0])["data"]
            assert rows == [fake_scores(ids[:k + 1]) for k in range(len(ids))]
        b64 = pool(stub, input=ids, encoding_format="base64").data[0]
        flat = struct.unpack(f"<{len(ids) * len(LABELS)}f",
                             base64.b64decode(b64.data.string_value))
        assert list(flat) == [struct.unpack("<f", struct.pack("<f", x))[0]
                              for row in rows for x in row]
        with pytest.raises(grpc.RpcError) as exc:  # /v1/embeddings: not served by it
            embed(stub, input=ids)
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert error_info(exc.value).reason == "TASK_NOT_SUPPORTED"
    finally:
        del engine.pool_tasks


def refused_pool(stub: Any, **body: Any) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as exc:
        pool(stub, **body)
    info = error_info(exc.value)
    return info.metadata.get("param", ""), info.reason
