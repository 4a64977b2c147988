"""The chat form of the pooling routes (vLLM's ClassificationChatRequest,
EmbeddingChatRequest, PoolingChatRequest: `messages` instead of `input`)
on the fake pooling engine: the conversation rendered by the chat template
without a generation prompt (unless asked), pooled as one input — a reward
model scoring a rollout gets the numbers of the rendered ids; bad bodies
are INVALID_ARGUMENT naming the field."""

from __future__ import annotations

import collections.abc
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tests.servers import fake_serving
from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.pooling import LABELS, fake_embedding, fake_scores
from tokenwire.v1 import embeddings_pb2, service_pb2_grpc

ROLLOUT = [{"role": "user", "content": "What is 2+2?"},
           {"role": "assistant", "content": "4"}]


@pytest.fixture(scope="module")
def pooled() -> collections.abc.Iterator[tuple[Any, FakeEngine]]:
    engine = FakeEngine(max_model_len=128)
    engine.pooling = True
    with fake_serving(engine, served_model_name="fake-rm") as server, \
            grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


def call(stub: Any, rpc: str, **body: Any) -> Any:
    kind = {"Classify": embeddings_pb2.ClassifyRequest, "Pool": embeddings_pb2.PoolRequest,
            "CreateEmbedding": embeddings_pb2.CreateEmbeddingRequest}[rpc]
    return getattr(stub, rpc)(json_format.ParseDict(body, kind()), timeout=10)


def rendered(engine: FakeEngine, messages: list[dict[str, Any]], **options: Any) -> list[int]:
    return engine.render_chat(messages, RenderOptions(**{"add_generation_prompt": False,
                                                         **options}))


def test_a_rollout_is_classified_as_its_rendered_ids(pooled) -> None:
    stub, engine = pooled
    engine.pool_tasks = ("classify",)
    try:
        resp = call(stub, "Classify", messages=ROLLOUT)
        ids = rendered(engine, ROLLOUT)
        scores = fake_scores(ids)
        assert [(d.index, list(d.probs), d.label) for d in resp.data] == [
            (0, pytest.approx(scores), LABELS[scores.index(max(scores))])]
        assert resp.usage.prompt_tokens == len(ids)
        assert engine.pooled[-1].prompt_token_ids == ids
        opened = call(stub, "Classify", messages=ROLLOUT, add_generation_prompt=True)
        assert opened.usage.prompt_tokens == len(
            rendered(engine, ROLLOUT, add_generation_prompt=True)) > len(ids)
        special = call(stub, "Classify", messages=ROLLOUT, add_special_tokens=True)
        assert engine.pooled[-1].prompt_token_ids == engine.encode(
            "", add_special_tokens=True) + ids
        assert special.usage.prompt_tokens == len(ids) + 1
        cont = call(stub, "Pool", messages=ROLLOUT, continue_final_message=True)
        assert engine.pooled[-1].prompt_token_ids == rendered(
            engine, ROLLOUT, continue_final_message=True)
        assert cont.data[0].index == 0
    finally:
        del engine.pool_tasks


def test_a_conversation_is_embedded_and_truncated(pooled) -> None:
    stub, engine = pooled
    resp = call(stub, "CreateEmbedding", messages=ROLLOUT, encoding_format="float")
    ids = rendered(engine, ROLLOUT)
    vector = json_format.MessageToDict(resp.data[0])["embedding"]
    assert vector == pytest.approx(fake_embedding(ids))
    call(stub, "CreateEmbedding", messages=ROLLOUT, truncate_prompt_tokens=5,
         truncation_side="left")
    assert engine.pooled[-1].prompt_token_ids == ids[-5:]


def refused(stub: Any, **body: Any) -> tuple[str, str, str]:
    with pytest.raises(grpc.RpcError) as exc:
        call(stub, "CreateEmbedding", **body)
    info = error_info(exc.value)
    return exc.value.code().name, info.metadata.get("param", ""), info.reason


def test_bad_conversations_name_the_field(pooled) -> None:
    stub, _ = pooled
    assert refused(stub, messages=ROLLOUT, input="x") == (
        "INVALID_ARGUMENT", "messages", "FIELDS_CONFLICT")
    assert refused(stub, messages=ROLLOUT, chat_template="{{ messages }}")[2] == (
        "REQUEST_TEMPLATE_NOT_ALLOWED")
    assert refused(stub, messages=ROLLOUT, continue_final_message=True,
                   add_generation_prompt=True)[0] == "INVALID_ARGUMENT"
    image = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]}]
    assert refused(stub, messages=image)[0] == "INVALID_ARGUMENT"
    assert refused(stub, messages=[{"role": "user", "content": "x" * 20000}]) == (
        "INVALID_ARGUMENT", "messages", "PROMPT_TOO_LONG")
    assert call(stub, "CreateEmbedding", messages=ROLLOUT).data  # serves on
