"""SkyRL unchanged against tokenwire (issue #28). SkyRL's client does not
import here (skyrl 0.3.0 needs Python >= 3.12 and transformers <= 5.8), so
this replays the exact requests and response handling of
skyrl/backends/skyrl_train/inference_servers/remote_inference_client.py
@ a9564572e (2026-08-21): data plane /inference/v1/generate with
X-Session-ID (reads choices[0].token_ids, finish_reason,
logprobs.content[].logprob), /v1/chat/completions, /v1/completions,
/tokenize (tokens), /detokenize (prompt), POST /finish_session?session_id=;
control fan-out (_call_server: method, json and params; status and body)
/pause?mode=keep&clear_cache=false, /resume, /reset_prefix_cache
{"reset_running_requests"}, GET /get_world_size with a {} body,
/collective_rpc {"method", "kwargs": {...}} with non-string kwargs,
/skyrl/v1/load_lora_adapter."""

from __future__ import annotations

import collections.abc
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.gateway.trainers import ADMIN, MODEL, trainer_gateway
from tokenwire.server.engine.fake.engine import FakeEngine


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[str, FakeEngine]]:
    allow = ("skyrl_sleep_for_weight_sync", "skyrl_wake_for_weight_sync")
    with trainer_gateway(collective_rpc_allow=allow) as pair:
        yield pair


@pytest.fixture(scope="module")
def proxy(served: tuple[str, FakeEngine]) -> collections.abc.Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0], timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def server(served: tuple[str, FakeEngine]) -> collections.abc.Iterator[httpx.Client]:
    with httpx.Client(base_url=served[0], timeout=60, headers=ADMIN) as c:
        yield c


def _call_server(client: httpx.Client, endpoint: str, json: Any = None, method: str = "POST",
                 params: dict[str, Any] | None = None) -> dict[str, Any]:
    """SkyRL's _call_server: {"status", "body"} (the body parsed as JSON)."""
    resp = client.request(method, endpoint, json=json, params=params)
    return {"status": resp.status_code, "body": resp.json() if resp.content else None}


def test_skyrl_generate_with_session(proxy: httpx.Client) -> None:
    payload = {"sampling_params": {"max_tokens": 5, "temperature": 1.0, "logprobs": 0},
               "model": MODEL, "token_ids": [70, 71, 72]}
    resp = proxy.post("/inference/v1/generate", json=payload,
                      headers={"Content-Type": "application/json", "X-Session-ID": "traj-1"})
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    token_ids, stop_reason = choice["token_ids"], choice["finish_reason"]
    logprobs = choice.get("logprobs")
    response_logprobs = [info["logprob"] for info in logprobs.get("content", [])]
    assert len(token_ids) == len(response_logprobs) == 5 and stop_reason == "length"


def test_skyrl_openai_routes_and_tokenizer(proxy: httpx.Client) -> None:
    headers = {"Content-Type": "application/json", "X-Session-ID": "traj-2"}
    chat = proxy.post("/v1/chat/completions", headers=headers, json={
        "model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})
    assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["role"] == "assistant"
    completion = proxy.post("/v1/completions", headers=headers,
                            json={"model": MODEL, "prompt": "hi", "max_tokens": 3})
    assert completion.status_code == 200 and completion.json()["choices"][0]["text"]
    tokens = proxy.post("/tokenize", json={"model": MODEL, "prompt": "hello",
                                           "add_special_tokens": False}).json().get("tokens", [])
    assert tokens
    text = (
        proxy.post("/detokenize", json={"model": MODEL, "tokens": tokens}).json().get("prompt", "")
    )
    assert text == "hello"
    # best effort, params only; unknown ids are ignored server-side
    assert proxy.post("/finish_session", params={"session_id": "traj-2"}).status_code == 200
    assert proxy.post("/finish_session", params={"session_id": "never-seen"}).status_code == 200
    assert proxy.post("/finish_session").status_code == 400


def test_skyrl_control_fan_out(server: httpx.Client, proxy: httpx.Client, tmp_path: Path) -> None:
    r = _call_server(server, "/pause", params={"mode": "keep", "clear_cache": "false"})
    assert r["status"] == 200 and r["body"]["status"] == "paused"
    r = _call_server(server, "/collective_rpc", {"method": "skyrl_sleep_for_weight_sync",
                                                 "kwargs": {"offload_kv": True}})
    assert r["status"] == 200, r
    r = _call_server(server, "/collective_rpc", {"method": "skyrl_wake_for_weight_sync",
                                                 "kwargs": {"tags": ["weights"]}})
    assert r["status"] == 200 and r["body"]["results"][0]["kwargs"] == {"tags": ["weights"]}
    r = _call_server(server, "/reset_prefix_cache", {"reset_running_requests": False})
    assert r == {"status": 200, "body": {"success": True}}
    r = _call_server(server, "/resume")
    assert r["status"] == 200 and r["body"]["status"] == "resumed"
    r = _call_server(server, "/get_world_size", {}, method="GET")
    assert r["body"]["world_size"] == 1
    r = _call_server(server, "/skyrl/v1/load_lora_adapter", {"lora_name": "skyrl-lora",
                                                            "lora_path": str(tmp_path)})
    assert r["status"] == 200
    assert _call_server(proxy, "/pause", params={"mode": "keep"})["status"] == 401
