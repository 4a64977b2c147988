"""OpenTelemetry traces in the gateway's Envoy config (--otlp-traces-endpoint,
vLLM's flag): Envoy's own tracer (envoy.tracers.opentelemetry) on the
listener's HTTP connection manager, so every REST or gRPC call gets a
SERVER span, in the caller's trace when it sent a `traceparent`, and the
server is called with Envoy's span as the parent (the server's span, and
vLLM's under it, join the same trace). Spans go to the endpoint over OTLP
as vLLM's exporter sends them: gRPC in plaintext, or OTLP/HTTP when
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is http/protobuf (the endpoint is then
the full URL, e.g. http://collector:4318/v1/traces), through a cluster of
their own. Envoy's span tags name the method, path, status and sizes, not
the headers: no key reaches a span. GET /metrics (scrapes) is not traced."""

from __future__ import annotations

import os
import urllib.parse
from typing import Any

from tokenwire.gateway.settings import GatewaySettings, is_ip

OTLP_CLUSTER = "tokenwire_otlp"
SERVICE_NAME = "tokenwire-gateway"  # the server's spans are "tokenwire", vLLM's its own
PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"  # as vLLM reads it
DEFAULT_PORTS = {"grpc": 4317, "http/protobuf": 4318}  # OTLP's
_TYPE = "@type"


def protocol() -> str:
    """The OTLP protocol (vLLM's rule: grpc unless the environment says
    http/protobuf); ValueError for another."""
    value = os.environ.get(PROTOCOL_ENV, "grpc")
    if value not in DEFAULT_PORTS:
        raise ValueError(f"{PROTOCOL_ENV}={value!r}: the OTLP protocols are grpc and "
                         "http/protobuf")
    return value


def collector(settings: GatewaySettings) -> tuple[str, int]:
    """The endpoint's host and port (OTLP's port when it names none);
    ValueError for what the gateway cannot reach: TLS (https), which vLLM's
    gRPC exporter does not speak either."""
    endpoint = settings.otlp_traces_endpoint
    url = urllib.parse.urlsplit(endpoint if "://" in endpoint else f"http://{endpoint}")
    if url.scheme != "http" or not url.hostname:
        raise ValueError(f"--otlp-traces-endpoint {endpoint!r}: the gateway sends spans in "
                         "plaintext, as vLLM's exporter: give http://HOST:PORT (a collector or "
                         "agent beside it)")
    return url.hostname, url.port or DEFAULT_PORTS[protocol()]


def check(settings: GatewaySettings) -> None:
    """ValueError when the endpoint or the protocol cannot be honoured."""
    if settings.otlp_traces_endpoint:
        collector(settings)


def connection_manager_fields(settings: GatewaySettings) -> dict[str, Any]:
    """What the HTTP connection manager adds to trace: the tracer, and
    request ids left as they are (Envoy otherwise packs its trace decision
    into a UUID X-Request-Id, which names the request: the caller's would
    change on its way to the server). Empty without the flag."""
    if not settings.otlp_traces_endpoint:
        return {}
    tracer: dict[str, Any] = {
        _TYPE: "type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig",
        "service_name": SERVICE_NAME,
    }
    if protocol() == "grpc":
        tracer["grpc_service"] = {"envoy_grpc": {"cluster_name": OTLP_CLUSTER}, "timeout": "5s"}
    else:
        tracer["http_service"] = {"http_uri": {
            "uri": settings.otlp_traces_endpoint, "cluster": OTLP_CLUSTER, "timeout": "5s"}}
    return {
        "tracing": {"provider": {"name": "envoy.tracers.opentelemetry", "typed_config": tracer}},
        "request_id_extension": {"typed_config": {
            _TYPE: "type.googleapis.com/envoy.extensions.request_id.uuid.v3.UuidRequestIdConfig",
            "pack_trace_reason": False,
        }},
    }


def untraced(route: dict[str, Any], settings: GatewaySettings) -> dict[str, Any]:
    """`route` never sampled (scrapes, not requests) when tracing is on."""
    if settings.otlp_traces_endpoint:
        route["tracing"] = {"overall_sampling": {"numerator": 0}}
    return route


def cluster(settings: GatewaySettings) -> dict[str, Any]:
    """The collector: HTTP/2 for OTLP/gRPC, HTTP/1.1 for OTLP/HTTP."""
    host, port = collector(settings)
    made: dict[str, Any] = {
        "name": OTLP_CLUSTER, "type": "STATIC" if is_ip(host) else "STRICT_DNS",
        "connect_timeout": "5s",
        "load_assignment": {"cluster_name": OTLP_CLUSTER, "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": {"socket_address": {"address": host,
                                                          "port_value": port}}}}]}]},
    }
    if protocol() == "grpc":
        made["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                _TYPE: "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }}
    return made
