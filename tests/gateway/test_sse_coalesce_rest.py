"""Through Envoy, the REST SSE bytes are the same whether the server sends
an event a message or joins the events ready together into one HttpBody
(api/coalesce.py, issue #46 item 4): chat with usage, Responses, Anthropic."""

from __future__ import annotations

import re

import httpx
import pytest

from tests.gateway.sse import chat_body
from tests.gateway.transports import gateway_on
from tokenwire.server.api import coalesce

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)

CALLS = {
    "chat": ("/v1/chat/completions", chat_body(
        max_tokens=6, stream=True, stream_options={"include_usage": True})),
    "responses": ("/v1/responses", {"model": "fake-model", "input": "Hello there",
                                    "max_output_tokens": 6, "stream": True}),
    "anthropic": ("/v1/messages", {"model": "fake-model", "max_tokens": 6, "stream": True,
                                   "messages": [{"role": "user", "content": "Hello there"}]}),
}


@pytest.fixture(scope="module")
def rest(gateway, transport):
    with gateway_on(transport, gateway) as envoy, \
            httpx.Client(base_url=envoy.url, timeout=60) as client:
        yield client


def _plain(data: bytes) -> bytes:
    """`data` without what differs between two runs (times, random ids,
    prefix-cache hits)."""
    data = re.sub(rb'"(created|created_at|\w*cache\w*_tokens)":\d+(\.\d+)?', b'"\\1":0', data)
    data = re.sub(rb'"id":"[^"]*"', b'"id":""', data)
    return re.sub(rb"[0-9a-f]{16,32}", b"<id>", data)


def _raw(rest: httpx.Client, path: str, body: dict) -> bytes:
    with rest.stream("POST", path, json=body) as r:
        assert r.status_code == 200 and r.headers["content-type"] == "text/event-stream"
        return b"".join(r.iter_raw())


@pytest.mark.parametrize("front", list(CALLS))
def test_rest_sse_bytes_unchanged(rest, front, monkeypatch) -> None:
    path, body = CALLS[front]
    joined = _raw(rest, path, body)
    monkeypatch.setattr(coalesce, "JOIN", False)
    apart = _raw(rest, path, body)
    assert joined.count(b"\n\n") >= 8  # every event of 6 tokens and more
    assert _plain(joined) == _plain(apart)
