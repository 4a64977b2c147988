"""Slow clients through the gateway (issue #11 item 7): a client trickling
its headers or its body is cut off by Envoy's own timeouts, while a long
Session through the gateway is not; the overload manager is configured."""

from __future__ import annotations

import json
import socket
import time

import grpc
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.session_rpc import RawSession, start_chat
from tokenwire.gateway import config
from tokenwire.gateway.settings import GatewaySettings
from tokenwire.v1 import service_pb2_grpc


@pytest.fixture(scope="module")
def strict_gateway(flaky_server):
    envoy = start_gateway(flaky_server.address, request_headers_timeout_s=1, request_timeout_s=2)
    yield envoy
    stop_gateway(envoy)


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    return sock


def _read_all(sock: socket.socket) -> bytes:
    out = b""
    while True:
        try:
            data = sock.recv(65536)
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        out += data
    return out


def test_trickled_headers_are_cut_off(strict_gateway) -> None:
    sock = _connect(strict_gateway.url)
    start = time.monotonic()
    sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # never finished
    reply = _read_all(sock)
    assert time.monotonic() - start < 8, "Envoy closed the connection on its headers timeout"
    assert reply == b"" or b" 408 " in reply.split(b"\r\n")[0]


def test_trickled_body_gets_408(strict_gateway) -> None:
    body = json.dumps(
        {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    ).encode()
    sock = _connect(strict_gateway.url)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\n"
        + f"content-length: {len(body)}\r\n\r\n".encode()
        + body[:10]
    )
    start = time.monotonic()
    reply = _read_all(sock)
    assert time.monotonic() - start < 8
    assert b" 408 " in reply.split(b"\r\n")[0], reply[:200]


def test_a_quiet_session_outlives_the_request_timeout(strict_gateway) -> None:
    host = strict_gateway.url.removeprefix("http://")
    with grpc.insecure_channel(host) as ch:
        s = RawSession(service_pb2_grpc.TokenwireServiceStub(ch), timeout=30)
        time.sleep(3)  # longer than request_timeout_s: the response has started
        s.send(start_chat("late", max_tokens=2))
        events = s.until_terminal("late")
        assert events[-1].WhichOneof("event") == "done"
        s.close()


def test_overload_manager_and_stream_caps_are_configured() -> None:
    doc = config.build(GatewaySettings(max_heap_bytes=123456789, max_streams_per_connection=64))
    monitors = {m["name"]: m for m in doc["overload_manager"]["resource_monitors"]}
    assert (
        monitors["envoy.resource_monitors.fixed_heap"]["typed_config"]["max_heap_size_bytes"]
        == 123456789
    )
    actions = {a["name"] for a in doc["overload_manager"]["actions"]}
    assert actions == {"envoy.overload_actions.reset_high_memory_stream",
                       "envoy.overload_actions.shrink_heap",
                       "envoy.overload_actions.stop_accepting_requests"}
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    assert hcm["http2_protocol_options"]["max_concurrent_streams"] == 64
    assert hcm["request_headers_timeout"] == "10s" and hcm["request_timeout"] == "60s"
