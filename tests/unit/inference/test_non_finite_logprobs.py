"""Non-finite logprobs (issue #11 item 14): JSON has no NaN or infinity, so
the value is clamped, and the entry is flagged so a trainer can tell a clamp
from a real logprob: chat logprobs, Generate logprobs and engine_data."""

from __future__ import annotations

import math

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request
from tests.servers import fake_serving
from tokenwire.server.core.domain import LOGPROB_FLOOR, finite_logprob
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import generate_pb2, service_pb2_grpc

AT = 2  # the output position whose logprob the engine reports as NaN


@pytest.fixture(scope="module")
def stub():
    with fake_serving(FakeEngine(max_model_len=512, nan_logprob_at=AT)) as server, \
            grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


@pytest.mark.parametrize(("raw", "clamped", "flag"), [
    (math.nan, LOGPROB_FLOOR, True), (-math.inf, LOGPROB_FLOOR, True), (math.inf, 0.0, True),
    (-1e6, LOGPROB_FLOOR, False), (-0.5, -0.5, False), (0.0, 0.0, False),
])
def test_finite_logprob(raw, clamped, flag) -> None:
    assert finite_logprob(raw) == (clamped, flag)


def test_chat_flags_the_clamped_entry(stub) -> None:
    resp = stub.CreateChatCompletion(
        chat_request(max_tokens=5, ignore_eos=True, logprobs=True,
                     nvext={"extra_fields": ["engine_data"]}), timeout=10)
    content = resp.choices[0].logprobs.content
    assert [e.non_finite for e in content] == [i == AT for i in range(5)]
    assert content[AT].logprob == LOGPROB_FLOOR and not content[AT - 1].HasField("non_finite")
    engine_data = resp.choices[0].nvext.engine_data
    assert list(engine_data.non_finite_logprobs) == [AT]
    assert engine_data.completion_logprobs[AT] == LOGPROB_FLOOR
    as_json = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    entries = as_json["choices"][0]["logprobs"]["content"]
    assert entries[AT]["non_finite"] is True and "non_finite" not in entries[0]


def test_stream_flags_it_too(stub) -> None:
    chunks = list(stub.StreamChatCompletion(
        chat_request(max_tokens=5, ignore_eos=True, logprobs=True), timeout=10))
    entries = [e for c in chunks for ch in c.choices for e in ch.logprobs.content]
    assert [e.non_finite for e in entries] == [i == AT for i in range(5)]


def test_generate_flags_the_clamped_entry(stub) -> None:
    resp = stub.Generate(generate_pb2.GenerateRequest(
        token_ids=[5, 6, 7], sampling_params={"max_tokens": 4, "ignore_eos": True, "logprobs": 0}),
        timeout=10)
    content = resp.choices[0].logprobs.content
    assert [e.non_finite for e in content] == [i == AT for i in range(4)]
    assert content[AT].logprob == LOGPROB_FLOOR
