"""CORS as vLLM's flags spell it (--allowed-origins, --allowed-methods,
--allowed-headers, --allow-credentials), in Envoy's own CORS filter, through
the real Envoy: the inference routes answer an allowed origin's preflight
and calls; another origin gets no CORS headers; the control routes never get
any (a browser never reaches control)."""

from __future__ import annotations

import collections.abc

import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import chat_body
from tokenwire.gateway.settings import GatewaySettings, add_arguments, from_namespace

ORIGIN = "https://app.example"
OTHER = "https://evil.example"
ALLOW = "access-control-allow-origin"


@pytest.fixture(scope="module")
def cors_rest(flaky_server) -> collections.abc.Iterator[httpx.Client]:
    envoy = start_gateway(flaky_server.address, allowed_origins=(ORIGIN,), control=True)
    try:
        with httpx.Client(base_url=envoy.url, timeout=60) as client:
            yield client
    finally:
        stop_gateway(envoy)


def preflight(client: httpx.Client, path: str, origin: str) -> httpx.Response:
    return client.options(path, headers={
        "origin": origin, "access-control-request-method": "POST",
        "access-control-request-headers": "authorization,content-type"})


def test_preflight_from_an_allowed_origin_is_granted(cors_rest) -> None:
    r = preflight(cors_rest, "/v1/chat/completions", ORIGIN)
    assert r.status_code == 200, r.text
    assert r.headers[ALLOW] == ORIGIN
    assert r.headers["access-control-allow-methods"] == "POST"  # "*": the requested one
    assert r.headers["access-control-allow-headers"] == "*,authorization"
    assert "access-control-allow-credentials" not in r.headers


def test_preflight_from_another_origin_gets_no_cors_headers(cors_rest) -> None:
    r = preflight(cors_rest, "/v1/chat/completions", OTHER)
    # Envoy answers it (never forwarded) without Access-Control-Allow-Origin:
    # the browser refuses the call (it may list methods and headers).
    assert r.status_code == 200 and ALLOW not in r.headers, r.headers
    assert "access-control-allow-credentials" not in r.headers


def test_calls_from_an_allowed_origin_carry_the_allow_header(cors_rest) -> None:
    r = cors_rest.post("/v1/chat/completions", json=chat_body(max_tokens=2),
                       headers={"origin": ORIGIN})
    assert r.status_code == 200, r.text
    assert r.headers[ALLOW] == ORIGIN
    assert cors_rest.get("/v1/models", headers={"origin": ORIGIN}).headers[ALLOW] == ORIGIN
    r = cors_rest.post("/v1/chat/completions", json=chat_body(max_tokens=2),
                       headers={"origin": OTHER})
    assert r.status_code == 200 and ALLOW not in r.headers


@pytest.mark.parametrize("path", ["/pause", "/is_paused", "/update_weights", "/flush_cache",
                                  "/tokenwire/v1/stats"])
def test_control_routes_never_get_cors(cors_rest, path) -> None:
    r = preflight(cors_rest, path, ORIGIN)
    assert r.status_code == 404, r.text  # no preflight route: refused
    assert not [h for h in r.headers if h.startswith("access-control-")], r.headers
    r = cors_rest.post(path, json={}, headers={"origin": ORIGIN})
    assert ALLOW not in r.headers, (r.status_code, r.headers)
    r = cors_rest.get(path, headers={"origin": ORIGIN})
    assert ALLOW not in r.headers, (r.status_code, r.headers)


def test_off_by_default_and_vllms_flag_spelling() -> None:
    import argparse

    from tokenwire.gateway import config, cors_routes

    assert "envoy.filters.http.cors" not in config.render(GatewaySettings())
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    ns = parser.parse_args(["--allowed-origins", '["https://a.example", "https://b.example"]',
                            "--allowed-methods", '["GET", "POST"]', "--allow-credentials"])
    settings = from_namespace(ns)
    assert settings.allowed_origins == ("https://a.example", "https://b.example")
    policy = cors_routes.cors_policy(settings)
    assert policy["allow_methods"] == "GET,POST" and policy["allow_credentials"] is True
    assert from_namespace(parser.parse_args([])).allowed_origins == ()


def test_inject_admin_key_still_refuses_browsers(flaky_server, monkeypatch) -> None:
    """--inject-admin-key with CORS on: a control call from a page (Origin)
    is still 403 control_refused, with no CORS header; its preflight 404."""
    monkeypatch.setenv("TOKENWIRE_ADMIN_API_KEY", "k3-admin-key")
    envoy = start_gateway(flaky_server.address, allowed_origins=("*",), control=True,
                          inject_admin_key=True)
    try:
        with httpx.Client(base_url=envoy.url, timeout=60) as client:
            r = client.post("/pause", json={}, headers={"origin": ORIGIN})
            assert r.status_code == 403, r.text
            assert r.json()["error"]["code"] == "control_refused"
            assert ALLOW not in r.headers
            assert preflight(client, "/pause", ORIGIN).status_code == 404
            assert preflight(client, "/v1/completions", ORIGIN).headers[ALLOW] == ORIGIN
    finally:
        stop_gateway(envoy)
