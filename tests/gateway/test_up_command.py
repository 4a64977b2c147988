"""`tokenwire up` (the README's run command) serves REST on localhost and
stops server and gateway together (fake engine, so it is quick)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import pytest

from tests.servers import free_port
from tokenwire.gateway.process import port_open

pytestmark = pytest.mark.gateway


def wait_rest(url: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"tokenwire up exited with {proc.returncode}"
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url}/health not 200 after {timeout}s")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_up_serves_rest_and_stops_both(sig) -> None:
    grpc_port, rest_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "tokenwire.cli", "up", "--engine", "fake",
           "--served-model-name", "fake-model", "--port", str(grpc_port),
           "--gateway-listen-port", str(rest_port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{rest_port}"
    try:
        wait_rest(url, proc)
        r = httpx.post(f"{url}/v1/chat/completions", timeout=10, json={
            "model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "He"
        proc.send_signal(sig)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert "REST on " in out
    assert not port_open("127.0.0.1", rest_port), "envoy is gone"
    assert not port_open("127.0.0.1", grpc_port), "the server is gone"
