"""Several serving processes on one port (--api-server-count, issue #16
lever 3), with the fake engine: connections spread over both processes,
each serves, SIGTERM stops them all, and control over fake engines is
refused with N > 1."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import grpc
import pytest

from tests.servers import free_port
from tokenwire.v1 import chat_pb2, models_pb2, service_pb2_grpc


def serve(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tokenwire.cli", "serve", "--engine", "fake",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def worker_of(address: str) -> str:
    """The process a new connection lands on (each channel its own connection)."""
    with grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        req = chat_pb2.CreateChatCompletionRequest(max_tokens=2)
        req.messages.add(role="user").content.string_value = "hi"
        assert stub.CreateChatCompletion(req, timeout=10).choices[0].finish_reason == "length"
        return stub.GetStats(models_pb2.GetStatsRequest(), timeout=10).worker_id


def test_two_processes_share_the_port_and_stop_together() -> None:
    port = free_port()
    proc = serve("--api-server-count", "2", "--port", str(port))
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        workers: set[str] = set()
        while len(workers) < 2 and time.monotonic() < deadline:
            try:
                workers.add(worker_of(address))
            except grpc.RpcError:
                time.sleep(0.2)
        assert len(workers) == 2, workers  # the kernel spread the connections
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert out.count("serving on") == 2


def test_control_with_fake_engines_needs_one_process() -> None:
    # Fake engines share no engine core (control over several processes is
    # tested with vLLM's: tests/engine/test_frontends_engine.py).
    proc = serve("--api-server-count", "2", "--port", str(free_port()), "--enable-control")
    assert proc.wait(60) != 0
    assert b"needs the vLLM engine" in (proc.stdout.read() if proc.stdout else b"")


@pytest.mark.parametrize("count", ["0"])
def test_count_below_one_is_one(count) -> None:
    port = free_port()
    proc = serve("--api-server-count", count, "--port", str(port))
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                worker_of(f"127.0.0.1:{port}")
                break
            except grpc.RpcError:
                time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_every_process_gives_a_tenant_the_same_cache_domain(tmp_path) -> None:
    """One tenant salt secret for all serving processes (issue #23): drawn
    once by the parent (without $TOKENWIRE_TENANT_SALT_SECRET) and inherited,
    so a tenant's salt prefix, and its prefix-cache hits on the one engine,
    do not depend on the process a connection lands on. Each process prints
    its secret's fingerprint (never the secret or a prefix)."""
    import os
    import re

    from tokenwire.server.security.tenancy import SECRET_ENV

    keys = tmp_path / "keys.toml"
    keys.write_text('[[keys]]\nkey = "sk-alpha-one"\ntenant = "alpha"\n')
    log = tmp_path / "serve.log"
    env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tokenwire.cli", "serve", "--engine", "fake",
             "--api-server-count", "2", "--port", str(free_port()), "--api-keys-file", str(keys)],
            stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count("serving on") < 2 and time.monotonic() < deadline:
            assert proc.poll() is None, log.read_text()
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    found = re.findall(r"salt secret ([0-9a-f]{12}) \((.*?)\)", log.read_text())
    assert len(found) == 2, log.read_text()
    assert found[0] == found[1] and found[0][1] == f"${SECRET_ENV}", found
