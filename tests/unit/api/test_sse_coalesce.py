"""EventStreamService joins the SSE events ready together into one HttpBody
(api/coalesce.py, issue #46 item 4): the bytes a client reads are those of
one message an event (`coalesce.JOIN = False`), in fewer messages (a chat
stream's role and first token, its last token, usage and `[DONE]`; the
several events a Responses or Anthropic output opens and closes with), on
both transports; a reader that lags gets every id once, in order, the same
bytes, and as many messages as a fast one (the engine is pulled: nothing
piles up behind a blocked write, vLLM merges such deltas itself)."""

from __future__ import annotations

import json
import re
import time
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request
from tests.servers import fake_serving
from tokenwire.server.api import coalesce
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import anthropic_pb2, events_pb2_grpc, responses_pb2

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)

TOKENS = 8
LONG = 2000  # tokens of the lagging stream: its events fill a 64 KiB window many times
# The client's HTTP/2 window kept at its 64 KiB start (no BDP growth), so a
# pause of the reader blocks the server's writes.
SMALL_WINDOW = [("grpc.http2.bdp_probe", 0), ("grpc.http2.lookahead_bytes", 1024)]


@pytest.fixture(scope="module")
def served(transport):
    engine = FakeEngine(max_model_len=4096)
    with fake_serving(engine, max_model_len=4096, grpc_transport=transport) as srv:
        yield engine, srv.address


def _stub(address: str, options: list[tuple[str, Any]] | None = None):
    ch = grpc.insecure_channel(address, options=options or [])
    return ch, events_pb2_grpc.EventStreamServiceStub(ch)


def _plain(data: bytes) -> bytes:
    """`data` without what differs between two runs of one request (times,
    random ids, the prefix cache's hits)."""
    data = re.sub(rb'"(created|created_at|\w*cache\w*_tokens)":\d+(\.\d+)?', b'"\\1":0', data)
    return re.sub(rb"[0-9a-f]{16,32}", b"<id>", data)


def _requests() -> dict[str, tuple[str, Any]]:
    return {
        "chat": ("StreamChatCompletionEvents", chat_request(
            max_tokens=TOKENS, ignore_eos=True, return_token_ids=True, request_id="coalesce",
            stream_options={"include_usage": True})),
        "responses": ("StreamResponseEvents", json_format.ParseDict(
            {"input": "Hi", "max_output_tokens": TOKENS}, responses_pb2.CreateResponseRequest())),
        "anthropic": ("StreamMessageEvents", json_format.ParseDict(
            {"max_tokens": TOKENS, "messages": [{"role": "user", "content": "Hi"}]},
            anthropic_pb2.CreateMessageRequest())),
    }


@pytest.mark.parametrize("front", ["chat", "responses", "anthropic"])
def test_same_bytes_in_fewer_messages(served, front, monkeypatch) -> None:
    _, address = served
    method, req = _requests()[front]
    ch, stub = _stub(address)
    with ch:
        joined = list(getattr(stub, method)(req, timeout=10))
        monkeypatch.setattr(coalesce, "JOIN", False)
        apart = list(getattr(stub, method)(req, timeout=10))
    events = b"".join(b.data for b in apart).count(b"\n\n")
    assert [b.data.count(b"\n\n") for b in apart] == [1] * events, "one event a message"
    assert _plain(b"".join(b.data for b in joined)) == _plain(b"".join(b.data for b in apart))
    # one message a token: the events of the first and of the last output go together
    assert len(joined) == TOKENS < events
    assert joined[0].content_type == "text/event-stream"
    assert all(not b.content_type for b in joined[1:])
    if front == "chat":  # role + first token; last token + usage + [DONE]
        assert [b.data.count(b"\n\n") for b in joined] == [2] + [1] * (TOKENS - 2) + [3]
        assert joined[-1].data.endswith(b"data: [DONE]\n\n")


def _ids(data: bytes) -> list[int]:
    frames = [f.removeprefix(b"data: ") for f in data.split(b"\n\n") if f]
    assert frames[-1] == b"[DONE]"
    return [t for f in frames[:-1] for c in json.loads(f)["choices"]
            for t in c.get("token_ids", [])]


def test_a_lagging_reader_gets_every_id_once_and_the_same_bytes(served) -> None:
    engine, address = served
    fields = dict(max_tokens=LONG, ignore_eos=True, return_token_ids=True, logprobs=True,
                  top_logprobs=5)
    ch, stub = _stub(address)
    with ch:
        fast = list(stub.StreamChatCompletionEvents(
            chat_request(**fields, request_id="fast"), timeout=60))
    ch, stub = _stub(address, SMALL_WINDOW)
    with ch:
        call = stub.StreamChatCompletionEvents(chat_request(**fields, request_id="lag"),
                                               timeout=60)
        slow = [next(call)]
        time.sleep(1.0)  # the reader lags: the server's writes block, generation stalls
        stalled = engine.progress["lag"]
        time.sleep(0.5)
        assert engine.progress["lag"] == stalled < LONG, "the writes did not block"
        for body in call:
            slow.append(body)
            if len(slow) % 200 == 0:
                time.sleep(0.05)  # and keeps lagging
    data = b"".join(b.data for b in slow)
    ids = _ids(data)
    assert len(ids) == LONG and ids == _ids(b"".join(b.data for b in fast))
    assert _plain(data.replace(b"lag", b"fast")) == _plain(b"".join(b.data for b in fast))
    assert len(slow) == len(fast) == LONG, "a message a token either way: nothing piled up"


def test_joined_events_stay_under_half_the_message_limit(transport) -> None:
    """An output cut into pieces under the limit (inference/chunk_bounds.py):
    the pieces, ready together, are joined only while the body stays under
    half of --max-message-bytes; every id still arrives once, in order."""
    limit = 64 * 1024
    merged = dict(max_tokens=300, ignore_eos=True, stream_options={"stream_interval": 1024},
                  return_token_ids=True)
    with fake_serving(FakeEngine(max_model_len=512), max_message_bytes=limit,
                      max_top_logprobs=1 << 20, grpc_transport=transport) as srv:
        ch, stub = _stub(srv.address)
        with ch:
            bodies = list(stub.StreamChatCompletionEvents(
                chat_request(**merged, logprobs=True, top_logprobs=20), timeout=30))
            plain = list(stub.StreamChatCompletionEvents(chat_request(**merged), timeout=30))
    counts = [b.data.count(b"\n\n") for b in bodies]
    assert all(len(b.data) <= limit // 2 or n == 1 for b, n in zip(bodies, counts, strict=True))
    assert max(counts) > 1 and len(bodies) > 2, "pieces joined, in several messages"
    ids = _ids(b"".join(b.data for b in bodies))
    assert len(ids) == 300 and ids == _ids(b"".join(b.data for b in plain))
