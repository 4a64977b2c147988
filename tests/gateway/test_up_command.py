"""`tokenwire up` (the README's run command) serves REST on localhost and
stops server and gateway together (fake engine, so it is quick)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import grpc
import httpx
import openai
import pytest

from tests.gateway.envoy_fixture import tokenwire_up
from tests.servers import free_ports, wait_workers
from tokenwire.gateway.process import port_open
from tokenwire.v1 import control_pb2, control_pb2_grpc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_up_serves_rest_and_stops_both(sig) -> None:
    with tokenwire_up(stop=sig) as up:
        url = up.url
        r = httpx.post(f"{url}/v1/chat/completions", timeout=10, json={
            "model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2})
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"] == "He"
        # GET /metrics on the REST port without --metrics-port, as vLLM's
        metrics = httpx.get(f"{url}/metrics", timeout=10)
        assert metrics.status_code == 200
        assert 'tokenwire_requests_total{code="OK",method="CreateChatCompletionJson"} 1.0' in (
            metrics.text)
    assert "REST on " in up.output
    assert not port_open("127.0.0.1", up.rest_port), "envoy is gone"
    assert not port_open("127.0.0.1", up.grpc_port), "the server is gone"


def test_up_with_tls_and_an_api_key(tmp_path) -> None:
    from tests.cases import self_signed

    cert, key, _ = self_signed(tmp_path)
    env = {**os.environ, "TOKENWIRE_API_KEY": "k3y"}
    with tokenwire_up("--tls-cert", cert, "--tls-key", key, "--no-open-probes", env=env,
                      headers={"authorization": "Bearer k3y"}) as up:
        url = up.url
        assert httpx.get(f"{url}/health", timeout=5).status_code == 401
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k3y", max_retries=0)
        r = client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2)
        assert r.choices[0].message.content == "He"
    assert "k3y" not in up.output


@pytest.mark.parametrize("admin_key", ["adm1n-key", ""], ids=["admin-key", "no-key"])
def test_up_with_control(admin_key) -> None:
    """With an admin key, control goes through the gateway with that key
    (and only with it); without one, the gateway has no control routes and
    control is the server's own port, from this host."""
    env = {k: v for k, v in os.environ.items() if k != "TOKENWIRE_ADMIN_API_KEY"}
    if admin_key:
        env["TOKENWIRE_ADMIN_API_KEY"] = admin_key
    with tokenwire_up("--enable-control", env=env) as up:
        url = up.url
        if admin_key:
            assert httpx.post(f"{url}/pause", timeout=10).status_code == 401
            admin = {"authorization": f"Bearer {admin_key}"}
            r = httpx.post(f"{url}/pause", params={"mode": "keep"}, headers=admin, timeout=10)
            assert r.status_code == 200 and r.json()["status"] == "paused"
            assert httpx.post(f"{url}/resume", headers=admin, timeout=10).status_code == 200
        else:
            assert httpx.post(f"{url}/pause", timeout=10).status_code == 404
            with grpc.insecure_channel(f"127.0.0.1:{up.grpc_port}") as channel:
                stub = control_pb2_grpc.ControlServiceStub(channel)
                assert not stub.IsPaused(control_pb2.IsPausedRequest(), timeout=10).is_paused
    assert ("call the server at" in up.output) is not bool(admin_key)
    assert not admin_key or admin_key not in up.output


def test_up_with_replicas_serves_from_both_and_survives_one(tmp_path) -> None:
    grpc_port = free_ports(2)
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2,
            "nvext": {"extra_fields": ["worker_id"]}}
    with tokenwire_up("--replicas", "2", "--gateway-health-check-interval-s", "0.5",
                      grpc_port=grpc_port) as up:
        url = up.url
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
        assert codes == [200] * 8 and up.proc.poll() is None
    assert not port_open("127.0.0.1", grpc_port) and not port_open("127.0.0.1", up.rest_port)


@pytest.mark.parametrize("transport", ["aio", "native"])
def test_up_with_several_serving_processes_uses_them_all(transport) -> None:
    """`up --api-server-count 2` on either gRPC transport (issue #46): each
    serving process builds its own server, and both serve through Envoy."""
    import concurrent.futures

    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 20, "ignore_eos": True, "nvext": {"extra_fields": ["worker_id"]}}
    with tokenwire_up("--api-server-count", "2", "--fake-token-delay", "0.01",
                      "--grpc-transport", transport,
                      # 2 calls per upstream connection: ~16 connections for 32 callers, so
                      # the kernel's spread leaves no process without one (up alone sets 8).
                      "--gateway-upstream-streams-per-connection", "2") as up:
        url = up.url
        # both processes listen before Envoy opens its connections (process 1
        # may start seconds after process 0 answers /health)
        wait_workers(f"127.0.0.1:{up.grpc_port}", 2, 60, up.proc)

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
    # on native, each serving process says so; none fell back to grpc.aio
    assert up.output.count("gRPC transport: native") == (2 if transport == "native" else 0)
    assert "serving on grpc.aio instead" not in up.output
