"""Long generations are not cut by proxy timeouts: Envoy's default route
timeout is 15 s; the gateway sets none (fake engine, about 16 s)."""

from __future__ import annotations

import concurrent.futures

import httpx

from tests.gateway.flaky_engine import SLOW_SECONDS_PER_TOKEN
from tests.gateway.sse import chat_body, sse_json

TOKENS = int(16 / SLOW_SECONDS_PER_TOKEN)  # longer than Envoy's default 15 s route timeout


def test_long_unary_and_stream_are_not_cut(gateway) -> None:
    body = chat_body("SLOW", max_tokens=TOKENS, ignore_eos=True)
    url = f"{gateway.url}/v1/chat/completions"
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        unary = pool.submit(httpx.post, url, json=body, timeout=60)
        stream = pool.submit(httpx.post, url, json={**body, "stream": True}, timeout=60)
        unary_r, stream_r = unary.result(), stream.result()
    assert unary_r.status_code == 200, unary_r.text
    assert unary_r.json()["usage"]["completion_tokens"] == TOKENS
    chunks = sse_json(stream_r.content)
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
