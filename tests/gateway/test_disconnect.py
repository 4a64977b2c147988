"""A client that goes away cancels the gRPC call and frees the engine
request (fake engine; the real-engine variant is in test_real_engine.py)."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.gateway.sse import chat_body


def wait_idle(engine, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while engine.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not engine.running, f"engine requests still running: {engine.running}"


def test_stream_disconnect_aborts_the_engine_request(gateway, flaky_engine) -> None:
    before = len(flaky_engine.aborted)
    body = chat_body("SLOW", max_tokens=100, ignore_eos=True, stream=True)
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        with client.stream("POST", "/v1/chat/completions", json=body) as r:
            events = 0
            for line in r.iter_lines():
                events += line.startswith("data: ")
                if events == 3:
                    # (leaving the loop closes the connection: look before)
                    assert flaky_engine.running, "still generating when the client leaves"
                    break
    wait_idle(flaky_engine)
    assert len(flaky_engine.aborted) == before + 1


def test_unary_disconnect_aborts_the_engine_request(gateway, flaky_engine) -> None:
    before = len(flaky_engine.aborted)
    body = chat_body("SLOW", max_tokens=30, ignore_eos=True)
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=0.5)
    wait_idle(flaky_engine)
    assert len(flaky_engine.aborted) == before + 1
