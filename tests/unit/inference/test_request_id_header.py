"""vLLM's X-Request-Id as the request id, on the fake engine: the call's
x-request-id metadata names the request (`chatcmpl-<it>`, as vLLM's
`_base_request_id`) when the body sets no request_id; the body's own wins."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, error_info
from tokenwire.v1 import completion_pb2, generate_pb2

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)

META = (("x-request-id", "abc-123"),)


def test_chat_id_from_x_request_id(fake_stub, fake_engine) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(), metadata=META, timeout=10)
    assert resp.id == "chatcmpl-abc-123"
    assert fake_engine.requests[-1].request_id == "chatcmpl-abc-123"
    chunks = list(fake_stub.StreamChatCompletion(chat_request(), metadata=META, timeout=10))
    assert {c.id for c in chunks} == {"chatcmpl-abc-123"}


def test_body_request_id_wins(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(request_id="mine"), metadata=META,
                                          timeout=10)
    assert resp.id == "mine"


def test_without_the_header_a_fresh_id(fake_stub) -> None:
    a = fake_stub.CreateChatCompletion(chat_request(), timeout=10).id
    b = fake_stub.CreateChatCompletion(chat_request(), timeout=10).id
    assert a.startswith("chatcmpl-") and a != b and "abc-123" not in a


def test_completions_and_generate(fake_stub) -> None:
    req = json_format.ParseDict({"prompt": "Hi", "max_tokens": 2},
                                completion_pb2.CreateCompletionRequest())
    assert fake_stub.CreateCompletion(req, metadata=META, timeout=10).id == "cmpl-abc-123"
    gen = generate_pb2.GenerateRequest(token_ids=[70, 71, 72])
    gen.sampling_params.max_tokens = 2
    assert fake_stub.Generate(gen, metadata=META, timeout=10).request_id == "gen-abc-123"


def test_too_long_header_names_it(fake_stub) -> None:
    with pytest.raises(grpc.RpcError) as exc_info:
        fake_stub.CreateChatCompletion(chat_request(), metadata=(("x-request-id", "x" * 300),),
                                       timeout=10)
    assert exc_info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(exc_info.value)
    assert info is not None and info.metadata["param"] == "x-request-id"
    assert info.reason == "VALUE_TOO_LONG"
