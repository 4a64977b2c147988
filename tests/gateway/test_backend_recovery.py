"""Envoy answers 503 in the OpenAI shape while the backend is down, and
serves again once it is back."""

from __future__ import annotations

import time

import httpx

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import chat_body
from tests.servers import ProcessServer


def test_503_while_down_then_recovers() -> None:
    backend = ProcessServer(["--engine", "fake"])
    envoy = start_gateway(backend.address)
    try:
        down = httpx.post(f"{envoy.url}/v1/chat/completions", json=chat_body(), timeout=30)
        assert down.status_code == 503
        assert down.json()["error"]["type"] == "server_error"
        backend.start(timeout=60)
        deadline = time.monotonic() + 30
        while True:
            up = httpx.post(f"{envoy.url}/v1/chat/completions",
                            json={**chat_body(), "model": ""}, timeout=30)
            if up.status_code == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert up.status_code == 200, up.text
        assert up.json()["choices"][0]["message"]["content"]
        backend.stop()
        again = httpx.post(f"{envoy.url}/v1/chat/completions", json=chat_body(), timeout=30)
        assert again.status_code == 503
    finally:
        backend.stop()
        stop_gateway(envoy)
