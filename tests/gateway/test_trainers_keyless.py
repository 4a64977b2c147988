"""The trainers' own keyless control calls through `--inject-admin-key`
(issue #32, item 1: the key only where a browser cannot have sent the call;
test_control_browser.py has the refusals). Sent with the HTTP clients the
trainers use, in their shapes (tests/gateway/test_trainers_*.py name the
sources): TRL's VLLMClient (requests: JSON bodies, a body-less POST
/reset_prefix_cache, GET /server_info and /get_world_size); SkyRL's
_call_server (aiohttp: /pause with params and no body, a GET with a {}
body); slime (requests: GET /flush_cache plain and with its
`Content-Type: application/json; charset=utf-8` and `Authorization: Bearer
None`, POSTs with `json={}`); AReaL (aiohttp JSON). Each reaches the
server with the key: the state it changes is read back from the server."""

from __future__ import annotations

import asyncio
import collections.abc
import warnings
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
import requests

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import fake_serving
from tokenwire.gateway.settings import ADMIN_KEY_ENV
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc

pytestmark = pytest.mark.gateway

ADMIN_KEY = "keyless-trainers-admin-key"
ALLOW = ("skyrl_sleep_for_weight_sync", "skyrl_wake_for_weight_sync")


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    engine = FakeEngine(max_model_len=512)
    engine.transfer_backend = True  # TRL's weight-transfer calls (vLLM's needs GPUs)
    return engine


@pytest.fixture(scope="module")
def served(engine: FakeEngine) -> collections.abc.Iterator[tuple[str, str]]:
    """(the server's own address, the injecting gateway's URL)."""
    with fake_serving(engine, served_model_name="fake-model", enable_control=True,
                      admin_api_key=ADMIN_KEY, collective_rpc_allow=ALLOW) as server:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ADMIN_KEY_ENV, ADMIN_KEY)
            envoy = start_gateway(server.address, control=True, inject_admin_key=True)
        try:
            yield server.address, envoy.url
        finally:
            stop_gateway(envoy)


def _state(address: str) -> control_pb2.ControlState:
    with grpc.insecure_channel(address) as channel:
        return control_pb2_grpc.ControlServiceStub(channel).GetControlState(
            control_pb2.GetControlStateRequest(), timeout=10,
            metadata=(("authorization", f"Bearer {ADMIN_KEY}"),)).state


def test_trl_vllm_client(served: tuple[str, str], engine: FakeEngine) -> None:
    pytest.importorskip("trl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from trl.generation.vllm_client import VLLMClient
    client = VLLMClient(base_url=served[1], connection_timeout=30)  # no authorization header
    assert client.get_world_size() == 1
    assert client.get_server_info()["weight_transfer_config"] == {"backend": "fake"}
    resets = engine.resets
    client.reset_prefix_cache()  # POST with no body and no content type
    assert engine.resets == resets + 1
    base = served[1]
    client._post(f"{base}/init_weight_transfer_engine", json={"init_info": {"backend": "x"}})
    client._start_weight_update()
    assert _state(served[0]).paused
    client._post(f"{base}/update_weights", json={"update_info": {"names": ["w"]}})
    client._finish_weight_update()
    assert not _state(served[0]).paused and engine.transfers[-1] == "finish"


async def _skyrl(base: str, tmp_path: Path) -> list[tuple[int, Any]]:
    """SkyRL's _call_server: session.request(method, url, json=..., params=...)."""
    out = []
    calls: list[tuple[str, str, Any, dict[str, str] | None]] = [
        ("POST", "/pause", None, {"mode": "keep", "clear_cache": "false"}),
        ("POST", "/collective_rpc", {"method": "skyrl_sleep_for_weight_sync",
                                     "kwargs": {"offload_kv": True}}, None),
        ("POST", "/reset_prefix_cache", {"reset_running_requests": False}, None),
        ("POST", "/resume", None, None),
        ("GET", "/get_world_size", {}, None),
        ("POST", "/skyrl/v1/load_lora_adapter", {"lora_name": "skyrl-lora",
                                                 "lora_path": str(tmp_path)}, None),
    ]
    async with aiohttp.ClientSession() as session:
        for method, path, body, params in calls:
            async with session.request(method, base + path, json=body, params=params) as resp:
                out.append((resp.status, await resp.json(content_type=None)))
    return out


def test_skyrl_control_fan_out(served: tuple[str, str], tmp_path: Path) -> None:
    answers = asyncio.run(_skyrl(served[1], tmp_path))
    assert [status for status, _ in answers] == [200] * 6, answers
    assert answers[0][1]["status"] == "paused" and answers[3][1]["status"] == "resumed"
    assert answers[4][1] == {"world_size": 1}
    assert "skyrl-lora" in _state(served[0]).lora_adapters


def test_slime_engine_calls(served: tuple[str, str], engine: FakeEngine, tmp_path: Path) -> None:
    base = served[1]
    resets = engine.resets
    # _wait_server_healthy (an external engine, api_key None): until 200
    headers = {"Content-Type": "application/json; charset=utf-8", "Authorization": "Bearer None"}
    with requests.Session() as session:
        assert session.get(f"{base}/flush_cache", headers=headers).status_code == 200
    requests.post(f"{base}/pause_generation", json={}).raise_for_status()  # _make_request
    assert _state(served[0]).paused
    assert requests.get(f"{base}/flush_cache").status_code == 200  # SGLangEngine.flush_cache
    assert engine.resets == resets + 2
    r = requests.post(f"{base}/update_weights_from_disk",
                      json={"model_path": str(tmp_path), "weight_version": "slime-2"})
    assert r.status_code == 200 and r.json()["success"] is True, r.text
    requests.post(f"{base}/continue_generation", json={}).raise_for_status()
    assert requests.get(f"{base}/get_weight_version").json()["weight_version"] == "slime-2"
    state = _state(served[0])
    assert not state.paused and state.weight_version == "slime-2"


async def _areal(base: str, tmp_path: Path) -> list[int]:
    statuses = []
    async with aiohttp.ClientSession() as session:
        for path, body in (("/areal_pause_generation", {}),
                           ("/areal_update_weights", {"model_path": str(tmp_path)}),
                           ("/areal_continue_generation", {}),
                           ("/pause_generation", {}),
                           ("/update_weights_from_disk", {"model_path": str(tmp_path),
                                                          "abort_all_requests": True}),
                           ("/continue_generation", {})):
            async with session.post(base + path, json=body) as resp:
                statuses.append(resp.status)
    return statuses


def test_areal_control(served: tuple[str, str], tmp_path: Path) -> None:
    generation = _state(served[0]).generation
    assert asyncio.run(_areal(served[1], tmp_path)) == [200] * 6
    state = _state(served[0])
    assert not state.paused and state.generation == generation + 2
