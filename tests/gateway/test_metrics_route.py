"""`GET /metrics` on the gateway's REST port (vLLM serves it on its own),
proxied through the real Envoy to the server's --metrics-port (fake engine:
tokenwire's metrics; the real engine adds vLLM's vllm:*, see
tests/engine/test_engine_flags_engine.py); under `tokenwire up --replicas N`
every replica's, merged and labelled `replica` (gateway/metrics_merge.py)."""

from __future__ import annotations

import argparse
import dataclasses
import time

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


class _CountingReplica:
    """A replica's /metrics that counts its scrapes (each takes `delay`)."""

    def __init__(self, index: int, delay: float = 0.2) -> None:
        import http.server
        import threading

        self.hits = 0
        replica = self
        text = (b"# HELP tokenwire_demo A demo gauge.\n# TYPE tokenwire_demo gauge\n"
                b"tokenwire_demo " + str(index + 1).encode() + b".0\n")

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                replica.hits += 1
                time.sleep(delay)
                self.send_response(200)
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, format: str, *args: object) -> None:
                pass

        # one scrape at a time: its threads are not counted as the merger's
        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_merged_metrics_render_once_per_period_for_many_scrapes() -> None:
    """The gateway's /metrics takes no key: 48 scrapes at once (issue #42,
    L-7) share one fan-out to the replicas while the page is fresh, every
    page correct; no more than max_clients are served at once; after the
    cache period the next scrape fetches again."""
    import concurrent.futures
    import threading

    replicas = [_CountingReplica(i) for i in range(3)]
    merger = metrics_merge.MetricsMerger(
        [({"replica": str(i)}, r.url) for i, r in enumerate(replicas)],
        cache_seconds=2.0, max_clients=4).start()
    url = f"http://127.0.0.1:{merger.port}/metrics"
    peak, done = [0], threading.Event()

    def watch() -> None:  # the merger's connection threads, sampled
        while not done.is_set():
            peak[0] = max(peak[0], sum("process_request_thread" in t.name
                                       for t in threading.enumerate()))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        with concurrent.futures.ThreadPoolExecutor(48) as pool:
            started = time.monotonic()
            pages = list(pool.map(lambda _: httpx.get(url, timeout=60), range(48)))
            elapsed = time.monotonic() - started
        done.set()
        assert all(p.status_code == 200 for p in pages)
        assert len({p.text for p in pages}) <= 1 + int(elapsed / merger.cache_seconds)
        for page in pages:
            totals = {s.labels["replica"]: s.value
                      for s in _families(page.text)["tokenwire_demo"]}
            assert totals == {"0": 1.0, "1": 2.0, "2": 3.0}, page.text
        fan_outs = replicas[0].hits
        assert [r.hits for r in replicas] == [fan_outs] * 3
        assert 1 <= fan_outs <= 1 + int(elapsed / merger.cache_seconds), (fan_outs, elapsed)
        assert 1 <= peak[0] <= 4, peak[0]
        time.sleep(merger.cache_seconds + 0.1)  # stale: the next scrape renders again
        assert httpx.get(url, timeout=60).status_code == 200
        assert [r.hits for r in replicas] == [fan_outs + 1] * 3
    finally:
        done.set()
        merger.close()
        for r in replicas:
            r.close()
