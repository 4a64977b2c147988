"""The ControlService over REST through the real Envoy, with the route names
and JSON shapes of vLLM's RL server and SGLang's update_weights_from_disk."""

from __future__ import annotations

import collections.abc
from pathlib import Path

import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import fake_serving

ADMIN_KEY = "admin-key-for-rest"


@pytest.fixture(scope="module")
def control_gateway() -> collections.abc.Iterator[str]:
    """A gateway with --control in front of a server with an admin key: the
    server refuses control that came through a proxy without one."""
    with fake_serving(
        served_model_name="fake-model", enable_control=True, admin_api_key=ADMIN_KEY
    ) as server:
        envoy = start_gateway(server.address, control=True)
        try:
            yield envoy.url
        finally:
            stop_gateway(envoy)


@pytest.fixture(scope="module")
def control_rest(control_gateway: str) -> collections.abc.Iterator[httpx.Client]:
    headers = {"authorization": f"Bearer {ADMIN_KEY}"}
    with httpx.Client(base_url=control_gateway, timeout=30, headers=headers) as client:
        yield client
        client.post("/resume")


def test_control_through_the_gateway_needs_the_admin_key(control_gateway: str) -> None:
    with httpx.Client(base_url=control_gateway, timeout=30) as client:
        r = client.post("/pause", params={"mode": "keep"})
        assert r.status_code == 401 and r.json()["error"]["param"] == "authorization"
        r = client.get("/is_paused", headers={"authorization": "Bearer not-the-key"})
        assert r.status_code == 401
    with httpx.Client(base_url=control_gateway, timeout=30,
                      headers={"authorization": f"Bearer {ADMIN_KEY}"}) as client:
        assert client.get("/is_paused").json() == {"is_paused": False}


def test_pause_resume_with_vllm_routes(control_rest: httpx.Client) -> None:
    r = control_rest.post("/pause", params={"mode": "keep"})
    assert r.status_code == 200 and r.json()["status"] == "paused"
    assert control_rest.get("/is_paused").json() == {"is_paused": True}
    r = control_rest.post("/resume")
    assert r.status_code == 200 and r.json()["status"] == "resumed"
    assert control_rest.get("/is_paused").json() == {"is_paused": False}


def test_announce_and_weight_bounds_over_rest(control_rest: httpx.Client) -> None:
    """Bounded staleness (issue #26) over REST: POST /announce_weight_version
    fences max_weight_lag 0 (503 weight_lag_behind) until withdrawn; a chat
    pinned by the X-Exact-Weight-Version header to another version is 503
    weight_version_mismatch; the returned state shows the announce."""
    version = control_rest.get("/weight_info").json()["weight_version"]
    r = control_rest.post("/announce_weight_version", json={"weight_version": "next"})
    assert r.status_code == 200 and r.json()["state"]["announced_version"] == "next"
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    r = control_rest.post("/v1/chat/completions", json={**body, "nvext": {"max_weight_lag": 0}})
    assert r.status_code == 503 and r.json()["error"]["code"] == "weight_lag_behind"
    r = control_rest.post("/announce_weight_version", json={"weight_version": ""})
    assert r.status_code == 200 and r.json()["state"].get("announced_version", "") == ""
    r = control_rest.post("/v1/chat/completions", json={**body, "nvext": {"max_weight_lag": 0}})
    assert r.status_code == 200, r.text
    r = control_rest.post(
        "/v1/chat/completions", json=body, headers={"X-Exact-Weight-Version": version + "x"}
    )
    assert r.status_code == 503 and r.json()["error"]["param"] == "x-exact-weight-version"
    r = control_rest.post(
        "/v1/chat/completions", json=body, headers={"X-Exact-Weight-Version": version}
    )
    assert r.status_code == 200, r.text


def test_versions_and_sglang_update_from_disk(control_rest: httpx.Client, tmp_path: Path) -> None:
    r = control_rest.post("/update_weight_version", json={"new_version": "v7"})
    assert r.json() == {"success": True, "new_version": "v7"}
    assert control_rest.get("/weight_info").json() == {"weight_version": "v7"}
    r = control_rest.post("/update_weights_from_disk", json={
        "model_path": str(tmp_path), "weight_version": "v8", "flush_cache": True,
        "abort_all_requests": False,
    })
    body = r.json()
    assert (
        r.status_code == 200 and body["success"] is True and body["state"]["weight_version"] == "v8"
    )
    chat = control_rest.post("/v1/chat/completions", json={
        "model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3,
        "ignore_eos": True,
    }).json()
    assert chat["system_fingerprint"] == "v8"
    assert chat["choices"][0]["weight_versions"] == [{"version": "v8", "start": 0, "end": 3}]
    assert control_rest.post("/reset_prefix_cache").json() == {"success": True}


def test_bad_control_input_is_an_openai_400(control_rest: httpx.Client) -> None:
    r = control_rest.post("/pause", params={"mode": "sometime"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "mode" and "abort, wait, keep" in err["message"]
    r = control_rest.post("/update_weights_from_disk", json={"model_path": "/no/such/folder"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "model_path"
    assert control_rest.get("/is_paused").json() == {"is_paused": False}


def test_control_routes_are_absent_unless_enabled(rest: httpx.Client) -> None:
    assert rest.post("/pause").status_code == 404
    assert rest.get("/weight_info").status_code == 404
