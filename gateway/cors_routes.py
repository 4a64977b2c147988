"""CORS on the gateway, as vLLM's flags spell it (--allowed-origins,
--allowed-methods, --allowed-headers, --allow-credentials), in Envoy's own
CORS filter (config.py puts it after the transcoder, so a REST call's policy
is the one of the gRPC route it became). The policy goes on the inference
routes only: the ControlService's calls take a route without it and its
preflights have no route, so a browser never reaches control (Trust III;
control_routes.py keeps --inject-admin-key's browser refusal)."""

from __future__ import annotations

from typing import Any

from tokenwire import wire
from tokenwire.gateway.control_routes import CONTROL_PREFIX
from tokenwire.gateway.settings import GatewaySettings

_TYPE = "@type"
# The operator's (admin key) method on the inference service: no preflight.
OPERATOR_METHODS = ("GetStats",)
# The gRPC paths whose calls take a route without the CORS policy.
NO_CORS_PREFIXES = (CONTROL_PREFIX,
                    *(f"/tokenwire.v1.TokenwireService/{m}" for m in OPERATOR_METHODS))
CORS_FILTER = "envoy.filters.http.cors"
INFERENCE_SERVICES = ("tokenwire.v1.TokenwireService", "tokenwire.v1.EventStreamService")


def cors_policy(settings: GatewaySettings) -> dict[str, Any]:
    """The CORS policy of the inference routes (vLLM's --allowed-origins,
    --allowed-methods, --allowed-headers, --allow-credentials), in Envoy's
    CORS filter. A wildcard does not cover Authorization (Fetch), which
    Starlette's echo of the requested headers does: it is listed beside it."""
    origins = [{"safe_regex": {"regex": ".*"}} if o == "*" else {"exact": o}
               for o in settings.allowed_origins]
    headers = list(settings.allowed_headers)
    if "*" in headers and wire.AUTHORIZATION_HEADER not in (h.lower() for h in headers):
        headers.append(wire.AUTHORIZATION_HEADER)
    return {
        _TYPE: "type.googleapis.com/envoy.extensions.filters.http.cors.v3.CorsPolicy",
        "allow_origin_string_match": origins,
        "allow_methods": ",".join(settings.allowed_methods),
        "allow_headers": ",".join(headers),
        "allow_credentials": settings.allow_credentials,
    }


def inference_paths() -> list[str]:
    """Every REST path of the inference services (their google.api.http
    bindings) and SageMaker's /invocations: the paths a CORS preflight may
    be granted on. The ControlService's and the operator's GetStats are not
    among them."""
    from google.api import annotations_pb2

    from tokenwire.v1 import events_pb2, service_pb2

    paths = ["/invocations"]
    for module in (service_pb2, events_pb2):
        for service in module.DESCRIPTOR.services_by_name.values():
            if service.full_name not in INFERENCE_SERVICES:
                continue
            for method in service.methods:
                options = method.GetOptions()
                if method.name in OPERATOR_METHODS or not options.HasExtension(
                        annotations_pb2.http):
                    continue
                http = options.Extensions[annotations_pb2.http]
                for rule in (http, *http.additional_bindings):
                    kind = rule.WhichOneof("pattern")
                    if kind and kind != "custom":
                        paths.append(getattr(rule, kind))
    return list(dict.fromkeys(paths))


def preflight_routes(settings: GatewaySettings, cluster: str) -> list[dict[str, Any]]:
    """--allowed-origins: a route for a CORS preflight (OPTIONS) of each
    inference path, which Envoy's CORS filter answers from the policy (an
    origin it does not allow gets 204 without CORS headers: refused). A
    preflight for any other path (control) has no route: 404, refused."""
    options = {"name": ":method", "string_match": {"exact": "OPTIONS"}}
    policy = {**cors_policy(settings), "forward_not_matching_preflights": False}
    return [{"match": {"path": path, "headers": [options]},
             "route": {"cluster": cluster},  # never reached: the filter answers
             "typed_per_filter_config": {CORS_FILTER: policy}}
            for path in inference_paths()]


def cors_filter() -> dict[str, Any]:
    """Envoy's CORS filter (its policy comes per route)."""
    return {"name": CORS_FILTER, "typed_config": {
        _TYPE: "type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors"}}


def per_route(settings: GatewaySettings) -> dict[str, Any]:
    """An inference route's typed_per_filter_config: the CORS policy."""
    return {CORS_FILTER: cors_policy(settings)}
