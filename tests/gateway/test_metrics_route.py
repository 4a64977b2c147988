"""`GET /metrics` on the gateway's REST port (vLLM serves it on its own),
proxied through the real Envoy to the server's --metrics-port (fake engine:
tokenwire's metrics; the real engine adds vLLM's vllm:*, see
tests/engine/test_engine_flags_engine.py)."""

from __future__ import annotations

import argparse

import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import fake_serving, free_port
from tokenwire.gateway import config
from tokenwire.gateway.cli import add_gateway_parsers
from tokenwire.gateway.settings import GatewaySettings


def test_metrics_on_the_rest_port() -> None:
    port = free_port()
    with fake_serving(metrics_port=port) as server:
        envoy = start_gateway(server.address, upstream_metrics_port=port)
        try:
            with httpx.Client(base_url=envoy.url, timeout=30) as client:
                r = client.get("/metrics")
                assert r.status_code == 200, r.text
                assert r.headers["content-type"].startswith("text/plain")
                direct = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
                names = {line.split(" ")[2] for line in direct.splitlines()
                         if line.startswith("# TYPE")}
                assert names and names == {line.split(" ")[2] for line in r.text.splitlines()
                                           if line.startswith("# TYPE")}
                assert any(n.startswith("tokenwire_") for n in names)
                assert client.post("/metrics").status_code == 404  # GET only
        finally:
            stop_gateway(envoy)


def test_no_metrics_route_without_the_port(rest) -> None:
    r = rest.get("/metrics")
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "unknown_url"


def test_a_fleet_gets_no_metrics_route() -> None:
    fleet = GatewaySettings(upstreams=("127.0.0.1:1", "127.0.0.1:2"), upstream_metrics_port=9)
    with pytest.raises(ValueError, match="scrape them one by one"):
        config.build(fleet)


def test_up_sets_the_metrics_port_itself() -> None:
    """`tokenwire up` passes its server's --metrics-port to the gateway
    (run_up); the gateway flag is not offered there."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    add_gateway_parsers(sub)
    up_help = sub.choices["up"].format_help()
    assert "--metrics-port" in up_help and "--gateway-upstream-metrics-port" not in up_help
    assert "--upstream-metrics-port" in sub.choices["gateway"].format_help()
