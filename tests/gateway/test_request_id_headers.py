"""vLLM's X-Request-Id through the real Envoy: a caller's header names the
request (`chatcmpl-<it>`, vLLM's `_base_request_id`) unless the body sets
request_id; with --enable-request-id-headers every response carries
X-Request-Id (the caller's, else the one Envoy made, which then names the
request too); without the flag no response header is added."""

from __future__ import annotations

import collections.abc
import json

import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import chat_body


@pytest.fixture(scope="module")
def echoing(flaky_server) -> collections.abc.Iterator[httpx.Client]:
    envoy = start_gateway(flaky_server.address, enable_request_id_headers=True)
    try:
        with httpx.Client(base_url=envoy.url, timeout=60) as client:
            yield client
    finally:
        stop_gateway(envoy)


def test_callers_id_names_the_request_and_is_echoed(echoing) -> None:
    r = echoing.post("/v1/chat/completions", json=chat_body(max_tokens=2),
                     headers={"x-request-id": "my-req-7"})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "chatcmpl-my-req-7"
    assert r.headers["x-request-id"] == "my-req-7"


def test_without_a_callers_id_the_gateways_is_echoed_and_names_it(echoing) -> None:
    r = echoing.post("/v1/chat/completions", json=chat_body(max_tokens=2))
    assert r.status_code == 200, r.text
    made = r.headers["x-request-id"]
    assert made and r.json()["id"] == f"chatcmpl-{made}"


def test_body_request_id_wins_and_streams_carry_the_id(echoing) -> None:
    r = echoing.post("/v1/chat/completions", json=chat_body(max_tokens=2, request_id="mine"),
                     headers={"x-request-id": "hdr-1"})
    assert r.json()["id"] == "mine" and r.headers["x-request-id"] == "hdr-1"
    with echoing.stream("POST", "/v1/chat/completions",
                        json=chat_body(max_tokens=2, stream=True),
                        headers={"x-request-id": "hdr-2"}) as s:
        assert s.headers["x-request-id"] == "hdr-2"
        data = [line[6:] for line in s.iter_lines() if line.startswith("data: {")]
    assert data and {json.loads(d)["id"] for d in data} == {"chatcmpl-hdr-2"}


def test_without_the_flag_no_header_is_added(rest) -> None:
    r = rest.post("/v1/chat/completions", json=chat_body(max_tokens=2),
                  headers={"x-request-id": "plain-1"})
    assert r.status_code == 200, r.text
    assert r.json()["id"] == "chatcmpl-plain-1"  # the id still names the request
    assert "x-request-id" not in r.headers
