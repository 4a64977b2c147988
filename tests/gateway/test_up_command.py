"""`tokenwire up` (the README's run command) serves REST on localhost and
stops server and gateway together (fake engine, so it is quick)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import grpc
import httpx
import openai
import pytest

from tests.gateway.envoy_fixture import wait_rest
from tests.servers import free_port
from tokenwire.gateway.process import port_open
from tokenwire.v1 import control_pb2, control_pb2_grpc


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
            "model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "He"
        # GET /metrics on the REST port without --metrics-port, as vLLM's
        metrics = httpx.get(f"{url}/metrics", timeout=10)
        assert metrics.status_code == 200
        assert 'tokenwire_requests_total{code="OK",method="CreateChatCompletionJson"} 1.0' in (
            metrics.text)
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


def test_up_with_tls_and_an_api_key(tmp_path) -> None:
    from tests.cases import self_signed

    cert, key, _ = self_signed(tmp_path)
    grpc_port, rest_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "tokenwire.cli", "up", "--engine", "fake",
           "--served-model-name", "fake-model", "--port", str(grpc_port),
           "--gateway-listen-port", str(rest_port), "--tls-cert", cert, "--tls-key", key,
           "--no-open-probes"]
    env = {**os.environ, "TOKENWIRE_API_KEY": "k3y"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{rest_port}"
    try:
        wait_rest(url, proc, headers={"authorization": "Bearer k3y"})
        assert httpx.get(f"{url}/health", timeout=5).status_code == 401
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k3y", max_retries=0)
        r = client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert r.choices[0].message.content == "He"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert "k3y" not in out


@pytest.mark.parametrize("admin_key", ["adm1n-key", ""], ids=["admin-key", "no-key"])
def test_up_with_control(admin_key) -> None:
    """With an admin key, control goes through the gateway with that key
    (and only with it); without one, the gateway has no control routes and
    control is the server's own port, from this host."""
    grpc_port, rest_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "tokenwire.cli", "up", "--engine", "fake",
           "--served-model-name", "fake-model", "--port", str(grpc_port),
           "--gateway-listen-port", str(rest_port), "--enable-control"]
    env = {k: v for k, v in os.environ.items() if k != "TOKENWIRE_ADMIN_API_KEY"}
    if admin_key:
        env["TOKENWIRE_ADMIN_API_KEY"] = admin_key
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    url = f"http://127.0.0.1:{rest_port}"
    try:
        wait_rest(url, proc)
        if admin_key:
            assert httpx.post(f"{url}/pause", timeout=10).status_code == 401
            admin = {"authorization": f"Bearer {admin_key}"}
            r = httpx.post(f"{url}/pause", params={"mode": "keep"}, headers=admin, timeout=10)
            assert r.status_code == 200 and r.json()["status"] == "paused"
            assert httpx.post(f"{url}/resume", headers=admin, timeout=10).status_code == 200
        else:
            assert httpx.post(f"{url}/pause", timeout=10).status_code == 404
            with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
                stub = control_pb2_grpc.ControlServiceStub(channel)
                assert not stub.IsPaused(control_pb2.IsPausedRequest(), timeout=10).is_paused
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert ("call the server at" in out) is not bool(admin_key)
    assert not admin_key or admin_key not in out


def test_up_with_replicas_serves_from_both_and_survives_one(tmp_path) -> None:
    grpc_port, rest_port = free_port(), free_port()
    while port_open("127.0.0.1", grpc_port + 1):
        grpc_port = free_port()
    cmd = [sys.executable, "-m", "tokenwire.cli", "up", "--engine", "fake", "--replicas", "2",
           "--served-model-name", "fake-model", "--port", str(grpc_port),
           "--gateway-listen-port", str(rest_port), "--gateway-health-check-interval-s", "0.5"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{rest_port}"
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            "nvext": {"extra_fields": ["worker_id"]}}
    try:
        wait_rest(url, proc)
        workers = {
            httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10).json()["nvext"][
                "worker_id"
            ]
            for _ in range(16)
        }
        assert len(workers) == 2, workers
        # One replica stops: the fleet goes on with the other.
        pids = subprocess.run(["pgrep", "-f", f"serve.*--port {grpc_port + 1}"],
                              capture_output=True, text=True).stdout.split()
        assert pids, "replica 2 runs"
        for pid in pids:
            os.kill(int(pid), signal.SIGTERM)
        deadline = time.monotonic() + 30
        while port_open("127.0.0.1", grpc_port + 1) and time.monotonic() < deadline:
            time.sleep(0.2)
        codes = [httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10).status_code
                 for _ in range(8)]
        assert codes == [200] * 8 and proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not port_open("127.0.0.1", grpc_port) and not port_open("127.0.0.1", rest_port)


def test_up_with_several_serving_processes_uses_them_all() -> None:
    import concurrent.futures

    grpc_port, rest_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "tokenwire.cli", "up", "--engine", "fake", "--api-server-count",
           "2", "--fake-token-delay", "0.01", "--served-model-name", "fake-model", "--port",
           str(grpc_port), "--gateway-listen-port", str(rest_port),
           # 2 calls per upstream connection: ~16 connections for 32 callers, so the
           # kernel's spread leaves no process without one (up alone sets 8).
           "--gateway-upstream-streams-per-connection", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{rest_port}"
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 20, "ignore_eos": True, "nvext": {"extra_fields": ["worker_id"]}}
    try:
        wait_rest(url, proc)

        def call(_: int) -> str:
            r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
            assert r.status_code == 200, r.text
            return r.json()["nvext"]["worker_id"]

        with concurrent.futures.ThreadPoolExecutor(32) as pool:
            workers = set(pool.map(call, range(64)))
        assert len(workers) == 2, workers  # Envoy opened several connections; both processes serve
        # One /metrics for both processes: each one's tokenwire_* under its `process` label
        from prometheus_client.parser import text_string_to_metric_families

        scrape = httpx.get(f"{url}/metrics", timeout=30).text
        (requests,) = [f for f in text_string_to_metric_families(scrape)
                       if f.name == "tokenwire_requests"]
        chats = {s.labels["process"]: s.value for s in requests.samples
                 if s.name.endswith("_total") and s.labels["method"] == "CreateChatCompletionJson"}
        assert set(chats) == {"0", "1"} and sum(chats.values()) == 64, chats
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
