"""The Envoy configuration for the gateway, built as data from the settings
and dumped as JSON (``envoy.json``; Envoy reads it like its YAML), next to
the Lua bundles its filters name (``lua/``, see lua_bundle). The rendering
for the default settings is committed as gateway/golden/envoy.yaml.

One listener carries both OpenAI REST JSON (with SSE), transcoded to the
tokenwire.v1 gRPC contract, and native gRPC passed through. The HTTP
filters, in order: ``openai_rest`` (Lua: stream selection, SSE framing,
OpenAI error bodies), the gRPC-JSON transcoder, ``grpc_status`` (Lua:
records a REST call's gRPC status for ``openai_rest``), the router. See
docs/gateway.md for the design.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

from tokenwire import wire
from tokenwire.gateway import control_routes, cors_routes, lua_bundle, metrics_route
from tokenwire.gateway import tls as gateway_tls
from tokenwire.gateway import tracing as gateway_tracing
from tokenwire.gateway.control_routes import CONTROL_PREFIX  # noqa: F401 (config.CONTROL_PREFIX)
from tokenwire.gateway.local_replies import local_reply_mappers
from tokenwire.gateway.settings import (
    GatewaySettings,
    check_control,
    check_tls,
    endpoints,
    injected_admin_key,
    is_ip,
    services,
)
from tokenwire.wire import AFFINITY_HEADER, SESSION_HEADER

CLUSTER = "tokenwire_grpc"  # the replicas, least-loaded first (calls without an affinity key)
AFFINITY_CLUSTER = "tokenwire_affinity"  # the same replicas, by consistent hash of the key
# What an outside caller may not send: the gateway's own routing key, the
# tenant (the server takes it from the credential, or from a trusted hop),
# and Envoy's internal headers (prefix), which the server reads as "came
# through a proxy". Removed as a request arrives, before any filter or route.
STRIPPED_HEADERS = (AFFINITY_HEADER, wire.TENANT_HEADER)
STRIPPED_PREFIX = wire.PROXY_HEADER_PREFIX
_TYPE = "@type"
_LUA = "type.googleapis.com/envoy.extensions.filters.http.lua.v3.Lua"


def _lua_filter(name: str, entry: str, settings: GatewaySettings,
                lua_dir: pathlib.PurePath | None) -> dict[str, Any]:
    """A Lua filter running bundle ``entry`` (lua_bundle): the file
    ``lua_dir/<entry>.lua`` that lua_bundle.write puts there, or, without a
    ``lua_dir``, the bundle's text inline (a self-contained document)."""
    source = ({"filename": str(lua_dir / f"{entry}.lua")} if lua_dir is not None
              else {"inline_string": lua_bundle.bundles(settings)[entry]})
    return {"name": name, "typed_config": {_TYPE: _LUA, "default_source_code": source}}


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _http_filters(
    settings: GatewaySettings, lua_dir: pathlib.PurePath | None
) -> list[dict[str, Any]]:
    transcoder = {
        _TYPE: "type.googleapis.com/envoy.extensions.filters.http.grpc_json_transcoder.v3"
               ".GrpcJsonTranscoder",
        "proto_descriptor": str(pathlib.Path(settings.descriptor).resolve()),
        "services": services(settings),
        "convert_grpc_status": True,
        "max_request_body_size": settings.max_request_bytes,
        # REST streams go to EventStreamService, whose HttpBody bytes (SSE
        # rendered by the server) pass through; a typed stream called over
        # REST directly prints as one JSON array.
        "print_options": {"preserve_proto_field_names": True, "always_print_enums_as_ints": False},
    }
    # --inject-admin-key: the caller's content type, recorded before the
    # transcoder replaces it (control_routes.py reads it).
    facts = [control_routes.request_facts_filter()] if settings.inject_admin_key else []
    cors = [cors_routes.cors_filter()] if settings.allowed_origins else []
    return [
        *facts,
        _lua_filter("tokenwire.openai_rest", "openai_rest", settings, lua_dir),
        {"name": "envoy.filters.http.grpc_json_transcoder", "typed_config": transcoder},
        # After the transcoder: a REST call's route (and so its CORS policy)
        # is the one of the gRPC method it became (control: none).
        *cors,
        _lua_filter("tokenwire.grpc_status", "grpc_status", settings, lua_dir),
        {"name": "envoy.filters.http.router", "typed_config": {
            _TYPE: "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}},
    ]


def _strip_inbound() -> dict[str, Any]:
    """Envoy's early header mutation: STRIPPED_HEADERS and every header
    starting with STRIPPED_PREFIX, removed before anything reads them."""
    mutations: list[dict[str, Any]] = [{"remove": name} for name in STRIPPED_HEADERS]
    mutations.append({"remove_on_match": {"key_matcher": {"prefix": STRIPPED_PREFIX}}})
    return {"name": "tokenwire.strip_inbound", "typed_config": {
        _TYPE: "type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3"
               ".HeaderMutation",
        "mutations": mutations,
    }}


def _route(settings: GatewaySettings, cluster: str, *present: str, prefix: str = "/",
           cors: bool = False) -> dict[str, Any]:
    """A gRPC route to `cluster` (AFFINITY_CLUSTER: hashed by the caller's
    credential and the `present` headers)."""
    # gRPC: native calls and transcoded REST calls (the transcoder has
    # rewritten those to POST /tokenwire.v1.<Service>/<Method>). Anything
    # else is an unknown REST path: no route, 404.
    headers = [control_routes.GRPC, *({"name": h, "present_match": True} for h in present)]
    action: dict[str, Any] = {
        "cluster": cluster, "timeout": "0s",  # never cut a generation
        "idle_timeout": f"{settings.stream_idle_timeout_s}s",
        "retry_policy": _retry_policy(settings),
    }
    if cluster == AFFINITY_CLUSTER:  # the caller's credential and its key, hashed together
        action["hash_policy"] = [{"header": {"header_name": h}}
                                 for h in (wire.AUTHORIZATION_HEADER, *present)]
    made = {"match": {"prefix": prefix, "headers": headers}, "route": action}
    if cors:  # --allowed-origins: the inference routes only, never control
        made["typed_per_filter_config"] = cors_routes.per_route(settings)
    return made


def _routes(settings: GatewaySettings, admin_key: str) -> list[dict[str, Any]]:
    """The virtual host's routes, first match wins."""
    # A call with an affinity key (X-Session-ID, else the body's key) goes by
    # consistent hash (a conversation's turns land where its prefix is
    # cached); one without, to the least-loaded replica. A Session stream is
    # one call: one replica.
    cors = bool(settings.allowed_origins)
    routes = ([_route(settings, AFFINITY_CLUSTER, SESSION_HEADER, cors=cors),
               _route(settings, AFFINITY_CLUSTER, AFFINITY_HEADER, cors=cors),
               _route(settings, CLUSTER, cors=cors)] if settings.affinity
              else [_route(settings, CLUSTER, cors=cors)])
    if cors:  # preflights of the inference paths; control calls on a route without CORS
        passing = [_route(settings, CLUSTER, prefix=prefix)
                   for prefix in cors_routes.NO_CORS_PREFIXES]
        for item in passing:
            item["match"]["case_sensitive"] = False
        routes = [*cors_routes.preflight_routes(settings, CLUSTER), *passing, *routes]
    if admin_key:  # --inject-admin-key: the key only where a browser cannot have sent the call
        routes = [*control_routes.injecting_routes(settings, admin_key,
                                                   lambda: _route(settings, CLUSTER)),
                  *routes]
    if settings.upstream_metrics_port:  # GET /metrics: the server's Prometheus port
        routes = [gateway_tracing.untraced(metrics_route.route(settings), settings), *routes]
    if not settings.control:
        routes = control_routes.refused_routes() + routes
    return routes


def _connection_manager(settings: GatewaySettings, lua_dir: pathlib.PurePath | None,
                        admin_key: str) -> dict[str, Any]:
    return {
        _TYPE: "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3"
               ".HttpConnectionManager",
        "stat_prefix": "tokenwire",
        "codec_type": "AUTO",  # HTTP/1.1 for REST clients, h2c for gRPC clients
        # Slow clients: headers and body must arrive in time (the request
        # timer stops when the response starts, so long generations are not
        # cut); then only a long idle timeout (a unary completion sends
        # nothing until it is done).
        "request_timeout": f"{settings.request_timeout_s}s",  # receiving the request only
        "request_headers_timeout": f"{settings.request_headers_timeout_s}s",
        "stream_idle_timeout": f"{settings.stream_idle_timeout_s}s",
        "http2_protocol_options": {"max_concurrent_streams": settings.max_streams_per_connection},
        # The caller's own address goes upstream in x-forwarded-for (so the
        # server knows a call came through a proxy), and what a caller sent
        # in the headers only the gateway may set is dropped on arrival.
        "use_remote_address": True,
        "early_header_mutation_extensions": [_strip_inbound()],
        # X-Request-Id (vLLM's): a caller's reaches the server, which names the
        # request by it (`chatcmpl-<id>`); a call without one gets Envoy's
        # UUID. With enable_request_id_headers every response echoes it.
        "preserve_external_request_id": True,
        "always_set_request_id_in_response": settings.enable_request_id_headers,
        # Envoy's own errors (no route, body too large, malformed JSON or
        # wrong types rejected by the transcoder, upstream down) in the
        # OpenAI error shape. Native gRPC calls keep plain gRPC statuses.
        "local_reply_config": {"mappers": local_reply_mappers(settings)},
        "route_config": {"name": "tokenwire", "virtual_hosts": [
            {"name": "tokenwire", "domains": ["*"], "routes": _routes(settings, admin_key)}]},
        "http_filters": _http_filters(settings, lua_dir),
        **gateway_tracing.connection_manager_fields(settings),  # --otlp-traces-endpoint
    }


def _listener(settings: GatewaySettings, lua_dir: pathlib.PurePath | None,
              admin_key: str) -> dict[str, Any]:
    chain: dict[str, Any] = {"filters": [{
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": _connection_manager(settings, lua_dir, admin_key),
    }]}
    tls = gateway_tls.listener(settings)
    if tls is not None:
        chain["transport_socket"] = tls
    return {
        "name": "tokenwire_rest_grpc",
        "address": _address(settings.listen_host, settings.listen_port),
        # The transcoder (and the Lua filter, for the "stream" flag) buffer a whole body.
        "per_connection_buffer_limit_bytes": settings.max_request_bytes,
        "filter_chains": [chain],
    }


def _retry_policy(settings: GatewaySettings) -> dict[str, Any]:
    """Retry on another replica only what never reached an engine: a failed
    connect, a refused or reset-before-request stream, or a refusal the
    server marked retry-safe (not serving, admission full, weights behind the
    request's minimum version). Nothing that reached an engine is retried."""
    return {
        "retry_on": "connect-failure,refused-stream,reset-before-request,retriable-headers",
        "num_retries": settings.retries,
        "retriable_headers": [{"name": wire.RETRY_SAFE_TRAILER, "string_match": {"exact": "1"}}],
        "retry_host_predicate": [{"name": "envoy.retry_host_predicates.previous_hosts",
                                  "typed_config": {_TYPE: "type.googleapis.com/envoy.extensions"
                                                   ".retry.host.previous_hosts.v3"
                                                   ".PreviousHostsPredicate"}}],
        # A hash-affine call's retry re-draws a host until the predicate
        # passes: with two replicas each draw finds the failed one half of
        # the time, so 5 draws left 1 retry in 32 on it (CI: a dead replica's
        # sessions failed after both retries); 20 leave one in a million.
        "host_selection_retry_max_attempts": 20,
    }


def _cluster(settings: GatewaySettings, name: str = CLUSTER) -> dict[str, Any]:
    limit = settings.max_requests
    hosts = endpoints(settings)
    interval = f"{settings.health_check_interval_s}s"
    cluster: dict[str, Any] = {
        "name": name,
        # IP addresses as given; a DNS name stands for every address it
        # resolves to (a Kubernetes headless Service), re-resolved.
        "type": "STATIC" if all(is_ip(h) for h, _ in hosts) else "STRICT_DNS",
        "lb_policy": ("MAGLEV" if name == AFFINITY_CLUSTER
                      else "LEAST_REQUEST" if settings.affinity else "ROUND_ROBIN"),
        "connect_timeout": "5s",
        # grpc.health.v1 on every replica: warming, draining (and, with
        # --unhealthy-while-paused, paused) replicas report NOT_SERVING and
        # get no new calls; when none is healthy Envoy's panic mode still
        # tries them all (the server's own answer beats a 503 from here).
        "health_checks": [{
            "timeout": "1s", "interval": interval, "no_traffic_interval": interval,
            "unhealthy_threshold": 2, "healthy_threshold": 1, "grpc_health_check": {},
        }],
        # A replica that keeps failing locally (resets, refused connections,
        # timeouts) is ejected for a while. Its own answers never eject it:
        # a retry-safe refusal (UNAVAILABLE, HTTP 503: a request bounded to a
        # weight version it does not serve, admission full) says nothing of
        # its health, and counted as 5xx it would take a healthy replica out
        # for every other call; a dead engine reports NOT_SERVING to the
        # health checks instead.
        "outlier_detection": {
            "split_external_local_origin_errors": True, "consecutive_local_origin_failure": 3,
            "enforcing_consecutive_5xx": 0, "enforcing_consecutive_gateway_failure": 0,
            "interval": "2s", "base_ejection_time": "10s", "max_ejection_percent": 50,
        },
        "per_connection_buffer_limit_bytes": settings.max_request_bytes,
        "circuit_breakers": {"thresholds": [
            {"max_connections": limit, "max_pending_requests": limit, "max_requests": limit}]},
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                _TYPE: "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {
                    "max_concurrent_streams": settings.upstream_streams_per_connection or limit}},
            }
        },
        "load_assignment": {"cluster_name": name, "endpoints": [{"lb_endpoints": [
            {"endpoint": {"address": _address(host, port)}} for host, port in hosts]}]},
    }
    if cluster["type"] == "STRICT_DNS":
        cluster["dns_refresh_rate"] = "5s"
        cluster["respect_dns_ttl"] = True
    tls = gateway_tls.upstream(settings)
    if tls is not None:
        cluster["transport_socket"] = tls
    return cluster


def _overload_manager(settings: GatewaySettings) -> dict[str, Any]:
    """Envoy's own overload manager: a connection cap, and a heap budget
    under which it resets the streams holding the most buffered memory (a
    client that stops reading a long stream, a large body), shrinks its
    heap, then refuses new requests (503) instead of growing until the
    kernel kills it. Resetting needs Envoy's buffer accounting: streams
    holding 2^20 bytes (1 MiB) or more are tracked, in buckets by size; from
    90 % of the heap budget the largest are reset first, and by 98 % every
    tracked one is eligible."""
    heap = "envoy.resource_monitors.fixed_heap"

    def at(threshold: float) -> dict[str, Any]:
        return {"name": heap, "threshold": {"value": threshold}}

    scaled = {"name": heap, "scaled": {"scaling_threshold": 0.90, "saturation_threshold": 0.98}}

    return {
        "refresh_interval": "0.25s",
        "resource_monitors": [
            {"name": "envoy.resource_monitors.global_downstream_max_connections",
             "typed_config": {
                 _TYPE: "type.googleapis.com/envoy.extensions.resource_monitors"
                        ".downstream_connections.v3.DownstreamConnectionsConfig",
                 "max_active_downstream_connections": settings.max_connections}},
            {"name": heap, "typed_config": {
                _TYPE: "type.googleapis.com/envoy.extensions.resource_monitors.fixed_heap.v3"
                       ".FixedHeapConfig",
                "max_heap_size_bytes": settings.max_heap_bytes}},
        ],
        "actions": [
            {"name": "envoy.overload_actions.reset_high_memory_stream", "triggers": [scaled]},
            {"name": "envoy.overload_actions.shrink_heap", "triggers": [at(0.95)]},
            {"name": "envoy.overload_actions.stop_accepting_requests", "triggers": [at(0.98)]},
        ],
        "buffer_factory_config": {"minimum_account_to_track_power_of_two": 20},
    }


def build(settings: GatewaySettings, lua_dir: pathlib.PurePath | None = None,
          admin_key: str | None = None) -> dict[str, Any]:
    """The Envoy bootstrap for these settings, as data. With ``lua_dir`` the
    Lua filters name their bundles there (``lua_dir/<entry>.lua``, written by
    lua_bundle.write); without it they carry them inline. With
    --inject-admin-key the key is ``admin_key``, by default the environment's
    (settings.injected_admin_key; ValueError when missing, and when
    --control or --inject-admin-key cannot be honoured: check_control)."""
    check_control(settings)
    check_tls(settings)
    metrics_route.check(settings)
    gateway_tracing.check(settings)
    if admin_key is None:
        admin_key = injected_admin_key(settings)
    elif not settings.inject_admin_key:
        admin_key = ""
    bootstrap: dict[str, Any] = {
        "overload_manager": _overload_manager(settings),
        "static_resources": {"listeners": [_listener(settings, lua_dir, admin_key)], "clusters": [
            _cluster(settings, CLUSTER), _cluster(settings, AFFINITY_CLUSTER)]},
    }
    if settings.upstream_metrics_port:
        bootstrap["static_resources"]["clusters"].append(metrics_route.cluster(settings))
    if settings.otlp_traces_endpoint:
        bootstrap["static_resources"]["clusters"].append(gateway_tracing.cluster(settings))
    if settings.admin_port >= 0:
        bootstrap["admin"] = {"address": _address(settings.admin_host, settings.admin_port)}
    return bootstrap


def render(settings: GatewaySettings, lua_dir: pathlib.PurePath | None = None,
           admin_key: str | None = None) -> str:
    """The Envoy bootstrap as JSON text (self-contained without ``lua_dir``)."""
    return json.dumps(build(settings, lua_dir, admin_key), indent=2) + "\n"


def write(settings: GatewaySettings, directory: pathlib.Path) -> pathlib.Path:
    """Write the Lua bundles into ``directory/lua/`` and the bootstrap that
    names them into ``directory/envoy.json``; return the latter's path. The
    bootstrap may hold the admin key (--inject-admin-key): it is written
    0600, and then its folder is made 0700."""
    text = render(settings, directory.resolve() / "lua")  # refuses a missing key before writing
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    if settings.inject_admin_key:
        directory.chmod(0o700)
    lua_dir = directory.resolve() / "lua"
    lua_bundle.write(settings, lua_dir)
    path = directory / "envoy.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        os.fchmod(out.fileno(), 0o600)  # an existing file keeps its mode otherwise
        out.write(text)
    return path
