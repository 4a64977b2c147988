"""`GET /metrics` on the gateway's REST port (vLLM serves it on its own),
proxied through the real Envoy to the server's --metrics-port (fake engine:
tokenwire's metrics; the real engine adds vLLM's vllm:*, see
tests/engine/test_engine_flags_engine.py); under `tokenwire up --replicas N`
every replica's, merged and labelled `replica` (gateway/metrics_merge.py)."""

from __future__ import annotations

import argparse
import dataclasses

import httpx
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.gateway.envoy_fixture import start_gateway, stop_gateway, tokenwire_up
from tests.servers import fake_serving, free_port, free_ports
from tokenwire.gateway import config, metrics_merge, metrics_route
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


def test_a_fleet_needs_one_metrics_endpoint() -> None:
    fleet = GatewaySettings(upstreams=("127.0.0.1:1", "127.0.0.1:2"), upstream_metrics_port=9)
    with pytest.raises(ValueError, match=r"scrape them one by one.*--upstream-metrics-host"):
        config.build(fleet)
    merged = dataclasses.replace(fleet, upstream_metrics_host="127.0.0.1")
    (cluster,) = [c for c in config.build(merged)["static_resources"]["clusters"]
                  if c["name"] == metrics_route.METRICS_CLUSTER]
    address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"] == {"address": "127.0.0.1", "port_value": 9}


def _families(text: str) -> dict[str, list]:
    return {f.name: f.samples for f in text_string_to_metric_families(text)}


def test_merge_labels_each_replica_and_reports_a_failed_one() -> None:
    with fake_serving(metrics_port=free_port()) as server:
        one = httpx.get(f"http://127.0.0.1:{server.settings.metrics_port}/metrics").text
    scraped = [({"replica": str(i)}, text) for i, text in enumerate((one, None, one))]
    merged = generate_latest(metrics_merge._Families(metrics_merge.merge(scraped)))
    text = merged.decode()
    types = [line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE")]
    assert len(types) == len(set(types)), "one TYPE line per family"
    families = _families(text)
    assert {s.labels["replica"]: s.value for s in families[metrics_merge.UP_METRIC]} == {
        "0": 1.0, "1": 0.0, "2": 1.0}
    for name, samples in _families(one).items():
        assert {s.labels.get("replica") for s in families[name]} == ({"0", "2"} if samples
                                                                    else set()), name
        assert len(families[name]) == 2 * len(samples)


def test_up_with_replicas_serves_every_replicas_metrics() -> None:
    """`tokenwire up --replicas 2 --metrics-port P`: one scrape of the
    gateway's /metrics has both replicas' tokenwire_* (vLLM's vllm:* the same
    way on the real engine), told apart by `replica`; the calls each replica
    served add up. --enable-request-id-headers (vLLM's bare name) configures
    the gateway: every response echoes X-Request-Id."""
    grpc_port, metrics_port = free_ports(2), free_ports(2)
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 2}
    with tokenwire_up("--replicas", "2", "--metrics-port", str(metrics_port),
                      "--enable-request-id-headers", grpc_port=grpc_port) as up:
        url = up.url
        for i in range(6):
            r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10,
                           headers={"x-session-id": f"s{i}"})
            assert r.status_code == 200 and r.headers["x-request-id"]
        r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=10,
                       headers={"x-request-id": "mine-1"})
        assert r.headers["x-request-id"] == "mine-1" and r.json()["id"] == "chatcmpl-mine-1"
        scrape = httpx.get(f"{url}/metrics", timeout=30)
        assert scrape.status_code == 200 and scrape.headers["content-type"].startswith(
            "text/plain")
        families = _families(scrape.text)
        assert {s.labels["replica"]: s.value
                for s in families[metrics_merge.UP_METRIC]} == {"0": 1.0, "1": 1.0}
        for n in range(2):  # each replica's own exposition, under its label
            own = _families(httpx.get(f"http://127.0.0.1:{metrics_port + n}/metrics").text)
            assert {name for name in own if name.startswith("tokenwire_")} <= set(families)
        chats = [s for s in families["tokenwire_requests"]
                 if s.name == "tokenwire_requests_total"
                 and s.labels["method"] == "CreateChatCompletionJson"]
        assert {s.labels["replica"] for s in chats} <= {"0", "1"}
        assert sum(s.value for s in chats) == 7


def test_up_sets_the_metrics_port_itself() -> None:
    """`tokenwire up` passes its server's --metrics-port to the gateway
    (run_up); the gateway flag is not offered there."""
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    add_gateway_parsers(sub)
    up_help = sub.choices["up"].format_help()
    assert "--metrics-port" in up_help and "--gateway-upstream-metrics-port" not in up_help
    assert "--upstream-metrics-port" in sub.choices["gateway"].format_help()
