"""--grpc-transport aio|native (runtime/transport.py, issue #46 item 1): the
flag, pygrpc-native serving when chosen, and every setting it cannot serve
as grpc.aio does making the server start on grpc.aio with one log line
naming the reason. The transport-sensitive behaviour itself runs on both
transports in the modules marked `pytest.mark.transports` (tests/conftest.py)."""

from __future__ import annotations

import dataclasses
import importlib.util
import logging
import signal
import subprocess
import sys
import time

import grpc
import pytest

from tests.servers import fake_serving, free_port
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.runtime import transport as transport_module
from tokenwire.server.runtime.cli import parse_settings
from tokenwire.server.runtime.transport import is_native, make_server, native_refusal
from tokenwire.v1 import models_pb2, service_pb2_grpc

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)

NATIVE = ServerSettings(engine="fake", grpc_transport="native")
OPTIONS = [("grpc.max_receive_message_length", 1 << 20), ("grpc.so_reuseport", 0)]
needs_native = pytest.mark.skipif(importlib.util.find_spec("pygrpc_native") is None,
                                  reason="pip install 'tokenwire[native]'")


def test_the_flag_defaults_to_aio_and_takes_native() -> None:
    assert parse_settings(["--engine", "fake"]).grpc_transport == "aio"
    assert parse_settings(["--engine", "fake", "--grpc-transport", "native"]).grpc_transport \
        == "native"
    with pytest.raises(SystemExit):
        parse_settings(["--engine", "fake", "--grpc-transport", "tonic"])


def test_up_passes_the_flag_to_each_server() -> None:
    from tokenwire.cli import build_parser
    from tokenwire.gateway.cli import serve_argv

    ns = build_parser().parse_args(["up", "--engine", "fake", "--grpc-transport", "native",
                                    "--api-server-count", "2"])
    argv = serve_argv(ns)
    assert argv[argv.index("--grpc-transport") + 1] == "native"
    assert "--grpc-transport" not in serve_argv(build_parser().parse_args(["up"]))


def test_the_fake_server_serves_on_the_transport_asked(fake_server, fake_stub, transport) -> None:
    assert fake_server.transport == transport
    stats = fake_stub.GetStats(models_pb2.GetStatsRequest(), timeout=5)
    assert stats.model == "fake-model"


@pytest.mark.parametrize("change, reason", [
    (dict(tls_cert="c.pem", tls_key="k.pem"), "TLS (--tls-cert"),
    (dict(trust_tenant_header=True), "--trust-tenant-header"),
])
def test_what_native_cannot_serve_is_named(change, reason) -> None:
    assert (native_refusal(dataclasses.replace(NATIVE, **change)) or "").startswith(reason)


@needs_native
def test_nothing_else_keeps_native_from_serving() -> None:
    assert native_refusal(NATIVE) is None
    assert native_refusal(dataclasses.replace(NATIVE, api_server_count=4, api_key="k",
                                              max_message_bytes=1 << 10)) is None
    # the control relay: its methods are registered ones, its socket a grpc.aio server's
    assert native_refusal(dataclasses.replace(NATIVE, api_server_count=2, enable_control=True,
                                              control_sockets=("/tmp/a", "/tmp/b"))) is None


@needs_native
async def test_native_streams_per_connection_are_not_capped() -> None:
    """grpc-core's server announces no stream limit; pygrpc-native's own
    default is 1024 (measured: 1100 streams on one connection reached the
    engine on aio, 1024 on native without the option)."""
    server = make_server(NATIVE, OPTIONS, [])
    assert is_native(server)
    assert server._front_args["max_concurrent_streams"] == 2**31 - 1  # type: ignore[attr-defined]
    mine = make_server(NATIVE, [*OPTIONS, ("grpc.max_concurrent_streams", 8)], [])
    assert mine._front_args["max_concurrent_streams"] == 8  # type: ignore[attr-defined]


async def test_native_falls_back_to_aio_with_one_line(caplog, monkeypatch) -> None:
    monkeypatch.setattr(transport_module, "NATIVE_PACKAGE", "no_such_package_here")
    with caplog.at_level(logging.INFO, logger="tokenwire.server"):
        server = make_server(NATIVE, OPTIONS, [])
    assert not is_native(server) and isinstance(server, grpc.aio.Server)
    (line,) = [r.getMessage() for r in caplog.records]
    assert line == ("--grpc-transport native: serving on grpc.aio instead: pygrpc-native is not "
                    "installed (pip install 'tokenwire[native]')")
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="tokenwire.server"):
        make_server(dataclasses.replace(NATIVE, trust_tenant_header=True), OPTIONS, [])
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("--grpc-transport native: serving on grpc.aio instead: "
                           "--trust-tenant-header")


@needs_native
async def test_an_option_native_refuses_falls_back_naming_it(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="tokenwire.server"):
        server = make_server(NATIVE, [*OPTIONS, ("grpc.max_connection_age_ms", 1000)], [])
    assert not is_native(server)
    (line,) = [r.getMessage() for r in caplog.records]
    assert "refused the server's options" in line and "grpc.max_connection_age_ms" in line


async def test_aio_is_aio_and_says_nothing(caplog) -> None:
    with caplog.at_level(logging.INFO, logger="tokenwire.server"):
        server = make_server(ServerSettings(engine="fake"), OPTIONS, [])
    assert not is_native(server) and not caplog.records


@needs_native
def test_a_fallback_server_still_serves() -> None:
    with fake_serving(grpc_transport="native", trust_tenant_header=True) as server:
        assert server.transport == "aio"
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            assert stub.GetStats(models_pb2.GetStatsRequest(), timeout=5).model


def test_serving_processes_each_build_their_own_server(transport) -> None:
    """--api-server-count 2: both processes serve the port on the transport
    (the relay between them: tests/unit/control/test_control_relay*.py, on
    both; with the fake engine there is no shared engine core to control)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenwire.cli", "serve", "--engine", "fake", "--port", str(port),
         "--api-server-count", "2", "--grpc-transport", transport],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        workers: set[str] = set()
        deadline = time.monotonic() + 60
        while len(workers) < 2 and time.monotonic() < deadline:
            options = [("grpc.use_local_subchannel_pool", 1)]
            try:
                with grpc.insecure_channel(f"127.0.0.1:{port}", options=options) as ch:
                    workers.add(service_pb2_grpc.TokenwireServiceStub(ch).GetStats(
                        models_pb2.GetStatsRequest(), timeout=5).worker_id)
            except grpc.RpcError:
                time.sleep(0.2)
        assert len(workers) == 2, workers
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert out.count("serving on") == 2
    assert out.count("gRPC transport: native") == (2 if transport == "native" else 0), out
    assert "serving on grpc.aio instead" not in out
