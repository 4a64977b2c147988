"""Session ids (issue #14 item 4): vLLM 0.32's root `session_id`, else the
x-session-id metadata (X-Session-ID header), on chat, Generate and Session
requests; too long is INVALID_ARGUMENT naming session_id; counted in metrics."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, error_info
from tests.session_rpc import RawSession, start_chat
from tokenwire.v1 import generate_pb2


def test_body_wins_then_header(fake_stub, fake_engine) -> None:
    fake_stub.CreateChatCompletion(chat_request(max_tokens=1, session_id="conv-1"),
                                   metadata=(("x-session-id", "hdr"),), timeout=10)
    assert fake_engine.requests[-1].session_id == "conv-1"
    fake_stub.CreateChatCompletion(chat_request(max_tokens=1), metadata=(("x-session-id", "hdr"),),
                                   timeout=10)
    assert fake_engine.requests[-1].session_id == "hdr"
    fake_stub.CreateChatCompletion(chat_request(max_tokens=1), timeout=10)
    assert fake_engine.requests[-1].session_id is None
    gen = json_format.ParseDict(
        {"token_ids": [5, 6], "session_id": "g"}, generate_pb2.GenerateRequest()
    )
    fake_stub.Generate(gen, timeout=10)
    assert fake_engine.requests[-1].session_id == "g"


def test_a_session_stream_carries_its_header(fake_stub, fake_engine) -> None:
    s = RawSession(fake_stub, metadata=(("x-session-id", "agent-7"),))
    s.send(start_chat("a", max_tokens=1))
    s.until_terminal("a")
    assert fake_engine.requests[-1].session_id == "agent-7"
    s.close()


def test_too_long_is_refused(fake_stub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        fake_stub.CreateChatCompletion(chat_request(max_tokens=1, session_id="s" * 257), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert (error_info(info.value).metadata["param"], error_info(info.value).reason) == (
        "session_id", "VALUE_TOO_LONG")
