"""Responses larger than the message limit (issue #11 item 11): refused up
front by estimate (n x max_tokens x logprobs), before the engine works; in
a Session an oversized result fails that request alone."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, error_info
from tests.servers import fake_serving
from tests.session_rpc import RawSession, start_chat
from tokenwire.server.core import validation
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import generate_pb2, service_pb2_grpc

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture(scope="module")
def small(transport):
    engine = FakeEngine(max_model_len=512)
    with (
        fake_serving(engine, max_message_bytes=64 * 1024, grpc_transport=transport) as srv,
        grpc.insecure_channel(srv.address) as ch,
    ):
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


def test_a_response_that_cannot_fit_is_refused_before_generating(small) -> None:
    stub, engine = small
    before = len(engine.requests)
    big = dict(n=16, temperature=1.0, max_tokens=400, logprobs=True, top_logprobs=20)
    with pytest.raises(grpc.RpcError) as info:
        stub.CreateChatCompletion(chat_request(**big), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error_info(info.value).reason, error_info(info.value).metadata["param"]) == (
        "RESPONSE_TOO_LARGE", "max_tokens")
    gen = json_format.ParseDict(
        {
            "token_ids": [5, 6],
            "sampling_params": {"n": 16, "temperature": 1.0, "max_tokens": 400, "logprobs": 20},
        },
        generate_pb2.GenerateRequest(),
    )
    with pytest.raises(grpc.RpcError) as info:
        stub.Generate(gen, timeout=10)
    assert error_info(info.value).reason == "RESPONSE_TOO_LARGE"
    assert len(engine.requests) == before, "the engine never saw them"
    # Streamed, the same request is fine (each chunk is small).
    chunks = list(stub.StreamChatCompletion(chat_request(**{**big, "max_tokens": 40}), timeout=30))
    assert chunks


def test_an_oversized_session_result_fails_alone(small, monkeypatch) -> None:
    stub, _ = small
    # An estimate can be wrong: without it, the result really is > 64 KiB.
    monkeypatch.setattr(validation, "response_fits", lambda *args, **kwargs: None)
    s = RawSession(stub)
    s.send(start_chat("big", n=8, temperature=1.0, max_tokens=300, ignore_eos=True,
                      logprobs=True, top_logprobs=3, return_token_ids=True))
    events = s.until_terminal("big")
    kinds = [e.WhichOneof("event") for e in events]
    assert kinds[-1] == "error" and events[-1].error.reason == "RESPONSE_TOO_LARGE", kinds
    s.send(start_chat("after", max_tokens=2))
    assert s.until_terminal("after")[-1].WhichOneof("event") == "done"
    s.close()



@pytest.fixture(scope="module")
def tiny(transport):
    engine = FakeEngine(max_model_len=512)
    with (
        fake_serving(engine, max_message_bytes=16 * 1024, grpc_transport=transport) as srv,
        grpc.insecure_channel(srv.address) as ch,
    ):
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


WHOLE = dict(n=16, temperature=1.0, max_tokens=400, ignore_eos=True, logprobs=True, top_logprobs=20)
PROMPT_LOGPROBS = dict(max_tokens=4, prompt_logprobs=20,
                       messages=[{"role": "user", "content": "p" * 400}])


@pytest.mark.parametrize("fields", [
    {**WHOLE, "nvext": {"extra_fields": ["engine_data", "completion_token_ids"]}},  # the last chunk
    PROMPT_LOGPROBS,  # the first chunk
], ids=["last-chunk", "first-chunk"])
def test_a_stream_whose_first_or_last_chunk_cannot_fit_is_refused_before_generating(
    tiny, fields
) -> None:
    """Stream chunks are deltas, but the last carries every choice's whole
    completion with nvext engine_data / completion_token_ids, and the first
    the prompt's logprobs (issue #23): both estimated up front, as a unary
    response is (without it, the stream failed mid-way once the engine had
    done the work: "Sent message larger than max")."""
    stub, engine = tiny
    before = len(engine.requests)
    with pytest.raises(grpc.RpcError) as info:
        list(stub.StreamChatCompletion(chat_request(**fields), timeout=30))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    assert error_info(info.value).reason == "RESPONSE_TOO_LARGE"
    assert "streamed message" in info.value.details()
    assert len(engine.requests) == before, "the engine never saw it"


def test_a_stream_of_deltas_is_not_limited_by_its_total_size(tiny) -> None:
    stub, _ = tiny
    chunks = list(stub.StreamChatCompletion(chat_request(**WHOLE), timeout=30))
    assert sum(c.ByteSize() for c in chunks) > 16 * 1024 > max(c.ByteSize() for c in chunks)
