"""Control through the gateway (issue #23, item 1), through the real Envoy
in front of `tokenwire serve --engine fake --enable-control` with no admin
key: the reproduced finding (grpcurl with the gateway's descriptor, to the
gateway's port) is refused at the gateway without --control, and by the
server (the call came through a proxy) with it; nothing gets paused."""

from __future__ import annotations

import collections.abc
import json
import pathlib
import subprocess
import sys

import grpc
import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.rpc import error_info
from tests.servers import ProcessServer
from tokenwire.gateway.process import EnvoyProcess
from tokenwire.gateway.settings import PACKAGE_DIR
from tokenwire.v1 import control_pb2, control_pb2_grpc

GRPCURL = pathlib.Path(sys.executable).parent / "grpcurl"
PROTOSET = PACKAGE_DIR / "tokenwire.pb"
METHODS = ("Pause", "IsPaused", "Resume")


@pytest.fixture(scope="module")
def keyless_server() -> collections.abc.Iterator[ProcessServer]:
    server = ProcessServer(["--engine", "fake", "--served-model-name", "fake-model",
                            "--max-model-len", "512", "--enable-control"]).start(timeout=120)
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plain_gateway(keyless_server: ProcessServer) -> collections.abc.Iterator[EnvoyProcess]:
    envoy = start_gateway(keyless_server.address)  # no --control
    yield envoy
    stop_gateway(envoy)


@pytest.fixture(scope="module")
def control_gateway(keyless_server: ProcessServer) -> collections.abc.Iterator[EnvoyProcess]:
    envoy = start_gateway(keyless_server.address, control=True)
    yield envoy
    stop_gateway(envoy)


def _paused(server: ProcessServer) -> bool:
    """Asked directly, from this host, with no proxy in between (allowed)."""
    with grpc.insecure_channel(server.address) as channel:
        stub = control_pb2_grpc.ControlServiceStub(channel)
        return stub.IsPaused(control_pb2.IsPausedRequest(), timeout=10).is_paused


def _grpcurl(address: str, method: str) -> subprocess.CompletedProcess[str]:
    if not GRPCURL.exists():
        pytest.skip("grpcurl is not installed in .venv/bin")
    body = json.dumps({"mode": "keep"} if method == "Pause" else {})
    return subprocess.run(
        [str(GRPCURL), "-plaintext", "-protoset", str(PROTOSET), "-d", body, address,
         f"tokenwire.v1.ControlService/{method}"],
        capture_output=True, text=True, timeout=30)


def test_the_reproduction_is_refused_by_the_gateway(keyless_server, plain_gateway) -> None:
    for method in METHODS:
        done = _grpcurl(plain_gateway.address, method)
        assert done.returncode != 0, done.stdout
        assert "Code: PermissionDenied" in done.stderr, done.stderr
        assert "--control" in done.stderr  # Envoy's own reply, not the server's
    assert _paused(keyless_server) is False


def test_native_grpc_control_gets_permission_denied_from_the_gateway(keyless_server,
                                                                     plain_gateway) -> None:
    with grpc.insecure_channel(plain_gateway.address) as channel:
        stub = control_pb2_grpc.ControlServiceStub(channel)
        with pytest.raises(grpc.RpcError) as info:
            stub.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    # Any spelling of the path: gRPC servers match method names exactly,
    # and the gateway's refusal ignores case.
    with grpc.insecure_channel(plain_gateway.address) as channel:
        call = channel.unary_unary("/tokenwire.v1.controlservice/Pause")
        with pytest.raises(grpc.RpcError) as info:
            call(b"", timeout=10)
    assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert _paused(keyless_server) is False


def test_the_rest_twin_is_not_routed(keyless_server, plain_gateway) -> None:
    with httpx.Client(base_url=plain_gateway.url, timeout=30) as rest:
        for method, path in (("POST", "/pause"), ("GET", "/is_paused"), ("POST", "/resume"),
                             ("POST", "/tokenwire.v1.ControlService/Pause")):
            r = rest.request(method, path)
            assert r.status_code == 404, (path, r.text)
            assert r.json()["error"]["code"] == "unknown_url"
    assert _paused(keyless_server) is False


def test_with_control_the_server_refuses_a_proxied_caller_without_the_key(
        keyless_server, control_gateway) -> None:
    done = _grpcurl(control_gateway.address, "Pause")
    assert done.returncode != 0 and "Code: PermissionDenied" in done.stderr, done.stderr
    with grpc.insecure_channel(control_gateway.address) as channel:
        stub = control_pb2_grpc.ControlServiceStub(channel)
        for method in METHODS:
            request = getattr(control_pb2, f"{method}Request")()
            with pytest.raises(grpc.RpcError) as info:
                getattr(stub, method)(request, timeout=10)
            assert info.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert error_info(info.value).reason == "CONTROL_VIA_PROXY"
    with httpx.Client(base_url=control_gateway.url, timeout=30) as rest:
        r = rest.post("/pause", params={"mode": "keep"})
        assert r.status_code == 403 and r.json()["error"]["param"] == "authorization", r.text
        assert rest.get("/is_paused").status_code == 403
    assert _paused(keyless_server) is False
