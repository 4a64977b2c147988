"""Routed experts (issue #14 item 5): what vLLM returns with
--enable-return-routed-experts reaches chat, completion and generate
choices as .npy bytes (base64 in JSON, as vLLM sends it), unary and on the
finishing chunk; the adapter's conversion keeps the array exactly."""

from __future__ import annotations

import base64
import io
from types import SimpleNamespace

import grpc
import numpy as np
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import completion_pb2, generate_pb2, service_pb2_grpc


@pytest.fixture(scope="module")
def moe_stub():
    engine = FakeEngine(max_model_len=512)
    engine.routed_experts = (3, 2)  # 3 MoE layers, top-2 routing
    with fake_serving(engine, served_model_name="fake-moe") as server, \
            grpc.insecure_channel(server.address) as channel:
        yield service_pb2_grpc.TokenwireServiceStub(channel)


def array(data: bytes) -> np.ndarray:
    return np.load(io.BytesIO(data), allow_pickle=False)


def check(data: bytes, prompt_len: int, completion_len: int) -> None:
    experts = array(data)
    assert experts.shape == (prompt_len + completion_len - 1, 3, 2)
    assert experts.dtype == np.uint8  # as vLLM returns them for up to 256 experts


def test_chat_unary_and_stream(moe_stub) -> None:
    req = chat_request(max_tokens=4, return_token_ids=True)
    resp = moe_stub.CreateChatCompletion(req, timeout=10)
    check(resp.choices[0].routed_experts, len(resp.prompt_token_ids), 4)
    as_json = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    assert (
        base64.b64decode(as_json["choices"][0]["routed_experts"]) == resp.choices[0].routed_experts
    )
    chunks = list(moe_stub.StreamChatCompletion(req, timeout=10))
    carrying = [ch for c in chunks for ch in c.choices if ch.routed_experts]
    assert len(carrying) == 1 and carrying[0].finish_reason
    assert carrying[0].routed_experts == resp.choices[0].routed_experts


def test_completion_and_generate(moe_stub) -> None:
    comp = moe_stub.CreateCompletion(
        json_format.ParseDict(
            {"prompt": [70, 71, 72], "max_tokens": 3}, completion_pb2.CreateCompletionRequest()
        ),
        timeout=10,
    )
    check(comp.choices[0].routed_experts, 3, 3)
    gen = moe_stub.Generate(generate_pb2.GenerateRequest(
        token_ids=[70, 71, 72], sampling_params={"max_tokens": 3}), timeout=10)
    assert gen.choices[0].routed_experts == comp.choices[0].routed_experts


def test_dense_model_has_none(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
    assert resp.choices[0].routed_experts == b""


def test_adapter_conversion_keeps_the_array() -> None:
    from tokenwire.server.engine.vllm.convert import convert_output as _convert_output

    experts = np.arange(5 * 2 * 2, dtype=np.int16).reshape(5, 2, 2)
    choice = SimpleNamespace(index=0, token_ids=[5, 6], text="ab", logprobs=None,
                             finish_reason="length", stop_reason=None, weight_versions=None,
                             routed_experts=experts)
    out = SimpleNamespace(outputs=[choice], num_cached_tokens=0, finished=True,
                          prompt_token_ids=[1, 2, 3, 4], prompt_logprobs=None, metrics=None)
    converted = _convert_output(out, 0.0, True).choices[0].routed_experts
    assert converted is not None
    got = array(converted)
    assert got.dtype == experts.dtype and (got == experts).all()

