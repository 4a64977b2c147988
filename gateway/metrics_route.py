"""`GET /metrics` on the gateway's REST port, as vLLM serves it on its own:
proxied to the server's Prometheus port (its --metrics-port: vLLM's
``vllm:*`` metrics beside tokenwire's ``tokenwire_*``), plain HTTP/1.1, a
cluster of its own. Only when that port is known to the gateway
(--upstream-metrics-port; ``tokenwire up`` passes its server's). In front of
a fleet only with --upstream-metrics-host, one endpoint for the whole fleet
(``tokenwire up --replicas N`` runs metrics_merge.py there: every replica's
metrics, labelled ``replica``)."""

from __future__ import annotations

from typing import Any

from tokenwire.gateway.settings import GatewaySettings, endpoints, is_ip

METRICS_CLUSTER = "tokenwire_metrics"
METRICS_PATH = "/metrics"


def check(settings: GatewaySettings) -> None:
    """ValueError when /metrics cannot be proxied (several upstreams, and
    no one endpoint for their metrics)."""
    if (settings.upstream_metrics_port and not settings.upstream_metrics_host
            and len(endpoints(settings)) > 1):
        raise ValueError(
            "--upstream-metrics-port proxies GET /metrics to one server; a fleet's replicas each "
            "have their own metrics port: scrape them one by one, or give "
            "--upstream-metrics-host, one endpoint serving the whole fleet's metrics (`tokenwire "
            "up --replicas N --metrics-port P` runs one)")


def route(settings: GatewaySettings) -> dict[str, Any]:
    """GET /metrics (any query) to METRICS_CLUSTER."""
    method = {"name": ":method", "string_match": {"exact": "GET"}}
    return {"match": {"path": METRICS_PATH, "headers": [method]},
            "route": {"cluster": METRICS_CLUSTER, "timeout": "30s"}}


def cluster(settings: GatewaySettings) -> dict[str, Any]:
    """The server's metrics port, on --upstream-metrics-host or the (one)
    upstream's host."""
    host = settings.upstream_metrics_host or endpoints(settings)[0][0]
    address = {"socket_address": {"address": host, "port_value": settings.upstream_metrics_port}}
    made: dict[str, Any] = {
        "name": METRICS_CLUSTER, "type": "STATIC" if is_ip(host) else "STRICT_DNS",
        "connect_timeout": "5s",
        "load_assignment": {"cluster_name": METRICS_CLUSTER, "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": address}}]}]},
    }
    return made
