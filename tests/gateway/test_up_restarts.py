"""`tokenwire up` restarts a replica whose engine died (issue #42, item 7;
gateway/supervisor.py, gateway/restarts.py): the replica's `tokenwire
serve` exits (1 after an engine death, or killed) and is started again on
the same port while Envoy routes around it; calls in flight fail with
UNAVAILABLE (HTTP 503), a fleet keeps answering on the other replica, and
the log says why. Fake engine (tests/gateway/dying_engine.py plants the
death); the real engine's: test_up_restart_engine.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import httpx

from tests.gateway.dying_engine import TRIGGER, planted_env
from tests.gateway.envoy_fixture import tokenwire_up
from tests.servers import free_ports, wait_serving
from tokenwire.gateway.process import port_open

BODY = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
        "nvext": {"extra_fields": ["worker_id"]}}


def _server_pids(grpc_port: int) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"tokenwire.cli serve.*--port {grpc_port}( |$)"],
                           capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found]


def _wait_restarted(grpc_port: int, before: list[int], timeout: float = 90) -> list[int]:
    """The replica's new `tokenwire serve` (another pid), SERVING on the same port."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = _server_pids(grpc_port)
        if now and not set(now) & set(before):
            wait_serving(f"127.0.0.1:{grpc_port}", max(1.0, deadline - time.monotonic()))
            return now
        time.sleep(0.1)
    raise TimeoutError(f"the replica on {grpc_port} was not started again")


def test_up_restarts_a_replica_whose_engine_died(tmp_path) -> None:
    grpc_port = free_ports(1)
    with tokenwire_up("--health-check-seconds", "0.5", "--fake-token-delay", "0.02",
                      "--gateway-health-check-interval-s", "0.5", grpc_port=grpc_port,
                      env=planted_env(tmp_path)) as up:
        url = up.url
        first = httpx.post(f"{url}/v1/chat/completions", json=BODY, timeout=10)
        assert first.status_code == 200, first.text
        before = _server_pids(grpc_port)
        assert len(before) == 1
        long = {**BODY, "stream": True, "max_tokens": 400, "ignore_eos": True}
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=long, timeout=30) as stream:
            lines = stream.iter_lines()
            assert next(line for line in lines if line.startswith("data: "))  # in flight
            killer = {**BODY, "messages": [{"role": "user", "content": TRIGGER}]}
            r = httpx.post(f"{url}/v1/chat/completions", json=killer, timeout=10)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "engine_dead"
            events = [json.loads(line[6:]) for line in lines
                      if line.startswith("data: {")]
        # the stream in flight ends with the engine's error, not silently
        assert events and events[-1]["error"]["code"] == "engine_dead", events[-1:]
        after = _wait_restarted(grpc_port, before)
        assert len(after) == 1
        deadline = time.monotonic() + 30  # Envoy's health check takes it back
        while (r := httpx.post(f"{url}/v1/chat/completions", json=BODY, timeout=10)
               ).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        assert r.json()["nvext"]["worker_id"] != first.json()["nvext"]["worker_id"]
        assert up.proc.poll() is None
        time.sleep(1.5)  # up's own health probe (every 0.5 s) to see it SERVING and say so
    assert f"replica 0 (127.0.0.1:{grpc_port}) exited (exit status 1) after" in up.output
    assert "starting it again in 1 s (restart 1" in up.output
    assert "is SERVING again (restart 1)" in up.output
    assert "the engine is dead" in up.output  # the server's own word on why
    assert not port_open("127.0.0.1", grpc_port)


def test_a_fleet_keeps_serving_while_a_killed_replica_restarts() -> None:
    grpc_port = free_ports(2)
    # (no access log: up's output is read when it stops, through a pipe that holds 64 KiB)
    with tokenwire_up("--replicas", "2", "--gateway-health-check-interval-s", "0.5",
                      "--log-level", "WARNING", grpc_port=grpc_port) as up:
        url = up.url

        def worker() -> str:
            r = httpx.post(f"{url}/v1/chat/completions", json=BODY, timeout=10)
            assert r.status_code == 200, r.text
            return r.json()["nvext"]["worker_id"]

        first = {worker() for _ in range(16)}
        assert len(first) == 2
        before = _server_pids(grpc_port + 1)
        assert len(before) == 1
        os.kill(before[0], signal.SIGKILL)
        # Every call succeeds while replica 1 is down and starting again,
        # until one lands on its new process.
        calls, deadline = 0, time.monotonic() + 90
        while (new := worker()) in first and time.monotonic() < deadline:
            calls += 1
            time.sleep(0.1)
        assert new not in first, f"replica 1 took no call again after {calls} calls"
        assert new.endswith(f":{_server_pids(grpc_port + 1)[0]}")
        assert calls > 0
        assert port_open("127.0.0.1", grpc_port + 1)  # the same port
        time.sleep(1.5)  # up's own health probe (every 0.5 s) to see it SERVING and say so
    assert f"replica 1 (127.0.0.1:{grpc_port + 1}) exited (killed by SIGKILL)" in up.output
    assert "is SERVING again (restart 1)" in up.output


def test_a_stop_during_the_backoff_restarts_nothing() -> None:
    grpc_port = free_ports(1)
    with tokenwire_up(grpc_port=grpc_port) as up:
        (pid,) = _server_pids(grpc_port)
        os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        up.proc.send_signal(signal.SIGTERM)  # before the 1 s backoff ends
        assert up.proc.wait(20) == 0
        assert time.monotonic() - started < 10
    assert "starting it again" not in up.output and "starting replica" not in up.output
    assert not _server_pids(grpc_port) and not port_open("127.0.0.1", grpc_port)


def test_a_replica_of_several_serving_processes_comes_back_whole() -> None:
    """--api-server-count 2 is one replica: its `tokenwire serve` killed,
    the serving processes it left behind (which would keep the port) are
    stopped before it starts again with both."""
    import psutil

    from tests.servers import wait_workers

    grpc_port = free_ports(1)
    address = f"127.0.0.1:{grpc_port}"
    with tokenwire_up("--api-server-count", "2", "--log-level", "WARNING",
                      grpc_port=grpc_port) as up:
        wait_workers(address, 2, 60, up.proc)
        (pid,) = _server_pids(grpc_port)
        children = psutil.Process(pid).children(recursive=True)
        assert len(children) >= 2
        os.kill(pid, signal.SIGKILL)
        _wait_restarted(grpc_port, [pid])
        wait_workers(address, 2, 60, up.proc)
        assert not any(c.is_running() and c.status() != psutil.STATUS_ZOMBIE for c in children)
        r = httpx.post(f"{up.url}/v1/chat/completions", json=BODY, timeout=30)
        assert r.status_code == 200, r.text
        assert up.proc.poll() is None
    assert f"replica 0 ({address}) exited (killed by SIGKILL)" in up.output
