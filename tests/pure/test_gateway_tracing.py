"""The gateway's tracing config (gateway/tracing.py, --otlp-traces-endpoint)
as built, without Envoy (tests/gateway/test_tracing_gateway.py runs it):
off by default; on, Envoy's OpenTelemetry tracer on the connection manager
with a collector cluster (OTLP/gRPC over HTTP/2, or OTLP/HTTP with vLLM's
protocol variable), request ids left unpacked, /metrics unsampled; TLS
endpoints and unknown protocols refused; `tokenwire gateway` takes the flag,
and `tokenwire up` gives its one flag to the gateway and every server."""

from __future__ import annotations

from typing import Any

import pytest

from tokenwire.gateway import config
from tokenwire.gateway.settings import GatewaySettings
from tokenwire.gateway.tracing import OTLP_CLUSTER


def _manager(bootstrap: dict[str, Any]) -> dict[str, Any]:
    (listener,) = bootstrap["static_resources"]["listeners"]
    return listener["filter_chains"][0]["filters"][0]["typed_config"]


def _otlp_cluster(bootstrap: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in bootstrap["static_resources"]["clusters"]
                 if c["name"] == OTLP_CLUSTER), None)


def test_off_by_default() -> None:
    built = config.build(GatewaySettings())
    assert "tracing" not in _manager(built) and "request_id_extension" not in _manager(built)
    assert _otlp_cluster(built) is None


def test_envoys_tracer_over_otlp_grpc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", raising=False)
    built = config.build(GatewaySettings(otlp_traces_endpoint="http://10.0.0.7:4317",
                                         upstream_metrics_port=9100))
    manager = _manager(built)
    provider = manager["tracing"]["provider"]
    assert provider["name"] == "envoy.tracers.opentelemetry"
    assert provider["typed_config"]["grpc_service"]["envoy_grpc"]["cluster_name"] == OTLP_CLUSTER
    assert provider["typed_config"]["service_name"] == "tokenwire-gateway"
    assert manager["request_id_extension"]["typed_config"]["pack_trace_reason"] is False
    cluster = _otlp_cluster(built)
    assert cluster is not None and cluster["type"] == "STATIC"
    address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"] == {"address": "10.0.0.7", "port_value": 4317}
    assert "http2_protocol_options" in str(cluster["typed_extension_protocol_options"])
    routes = manager["route_config"]["virtual_hosts"][0]["routes"]
    untraced = [r for r in routes if "tracing" in r]
    assert [r["match"].get("path") for r in untraced] == ["/metrics"]
    assert untraced[0]["tracing"] == {"overall_sampling": {"numerator": 0}}


def test_otlp_http_as_vllms_protocol_variable_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    url = "http://otel-collector.observability:4318/v1/traces"
    built = config.build(GatewaySettings(otlp_traces_endpoint=url))
    http = _manager(built)["tracing"]["provider"]["typed_config"]["http_service"]["http_uri"]
    assert (http["uri"], http["cluster"]) == (url, OTLP_CLUSTER)
    cluster = _otlp_cluster(built)
    assert cluster is not None and cluster["type"] == "STRICT_DNS"  # a name: resolved
    assert "typed_extension_protocol_options" not in cluster  # HTTP/1.1
    built = config.build(GatewaySettings(otlp_traces_endpoint="collector"))
    cluster = _otlp_cluster(built)
    assert cluster is not None
    address = cluster["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]
    assert address["socket_address"]["port_value"] == 4318  # OTLP/HTTP's port


def test_what_the_gateway_cannot_send_to_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="plaintext"):
        config.build(GatewaySettings(otlp_traces_endpoint="https://collector:4317"))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json")
    with pytest.raises(ValueError, match="grpc and http/protobuf"):
        config.build(GatewaySettings(otlp_traces_endpoint="http://127.0.0.1:4317"))


def test_the_flag_on_gateway_and_up(monkeypatch: pytest.MonkeyPatch) -> None:
    from tokenwire.cli import build_parser as top_parser
    from tokenwire.gateway import settings as gw_settings
    from tokenwire.gateway.cli import plan_replicas

    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    ns = top_parser().parse_args(["gateway", "--otlp-traces-endpoint", "http://127.0.0.1:4317"])
    assert gw_settings.from_namespace(ns).otlp_traces_endpoint == "http://127.0.0.1:4317"
    ns, extra = top_parser().parse_known_args(
        ["up", "Qwen/X", "--replicas", "2", "--otlp-traces-endpoint", "http://127.0.0.1:4317"])
    ns.extra = extra
    assert gw_settings.from_namespace(ns).otlp_traces_endpoint == "http://127.0.0.1:4317"
    for replica in plan_replicas(ns):  # every server traces into the same traces
        argv = list(replica.argv)
        assert argv[argv.index("--otlp-traces-endpoint") + 1] == "http://127.0.0.1:4317"
    with pytest.raises(SystemExit):  # one flag under `up`, not a gateway-only one
        top_parser().parse_args(["up", "--gateway-otlp-traces-endpoint", "http://x:1"])
