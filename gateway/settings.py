"""The gateway settings and the CLI flags that fill them."""

from __future__ import annotations

import argparse
import collections.abc
import dataclasses
import ipaddress
import json
import os
import pathlib

PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
ADMIN_KEY_ENV = "TOKENWIRE_ADMIN_API_KEY"  # the server's admin key (also `tokenwire serve`'s)


@dataclasses.dataclass(frozen=True)
class GatewaySettings:
    """Where Envoy listens, where the tokenwire server is, and the limits."""

    listen_host: str = "127.0.0.1"
    listen_port: int = 8080  # REST (HTTP/1.1) and gRPC (h2c) on the same port
    upstream_host: str = "127.0.0.1"
    upstream_port: int = 50051  # the tokenwire gRPC server
    # A fleet: HOST:PORT of every replica (or a DNS name resolving to many,
    # e.g. a Kubernetes headless Service); empty: upstream_host:upstream_port.
    upstreams: tuple[str, ...] = ()
    health_check_interval_s: float = 2.0  # active grpc.health.v1 checks of each replica
    retries: int = 2  # retries on another replica of calls that never reached an engine
    affinity: bool = True  # consistent hash on the affinity key; off: plain round robin
    # Concurrent calls on one upstream connection before Envoy opens another
    # (0: max_requests, i.e. one connection per replica and worker thread).
    # A server with --api-server-count N needs several connections: the
    # kernel spreads connections, not calls, over its processes.
    upstream_streams_per_connection: int = 0
    tls_cert: str = ""  # PEM certificate chain: serve REST/gRPC over TLS; "" : plaintext
    tls_key: str = ""  # PEM private key of tls_cert
    # mTLS on the listener, as vLLM's flags: CA certificates client
    # certificates must chain to, and Python's ssl constant: 0 CERT_NONE (no
    # certificate asked for), 1 CERT_OPTIONAL (asked for, checked if sent),
    # 2 CERT_REQUIRED.
    ssl_ca_certs: str = ""
    ssl_cert_reqs: int = 0
    upstream_tls_ca: str = ""  # PEM CA (or self-signed cert) of a TLS server; "" : plaintext
    upstream_tls_server_name: str = ""  # SNI for a TLS server (default: none)
    descriptor: str = str(PACKAGE_DIR / "tokenwire.pb")  # written by `make proto`
    admin_port: int = -1  # Envoy admin on admin_host; -1: none, 0: any free port
    admin_host: str = "127.0.0.1"  # loopback by default: the admin API needs no key
    max_request_bytes: int = 16 * 1024 * 1024  # larger bodies get 413
    stream_idle_timeout_s: int = 3600  # a unary completion is silent until done
    max_requests: int = 4096  # concurrent upstream requests before 503
    max_connections: int = 10000  # open client connections
    # concurrent HTTP/2 streams one client connection may open
    max_streams_per_connection: int = 128
    request_headers_timeout_s: int = 10  # a client must send its headers within this
    request_timeout_s: int = 60  # ... and its whole body within this (a response disarms it)
    max_heap_bytes: int = 1024 * 1024 * 1024  # Envoy's heap: shed load near it
    concurrency: int = 1  # Envoy worker threads
    log_level: str = "warning"
    config_dir: str = ""  # where the rendered config goes; "" : a temporary folder
    # Also transcode the ControlService (vLLM/SGLang RL route names); one
    # upstream only, by IP address (check_control).
    control: bool = False
    # With control, on a loopback listener: the gateway itself sends the admin
    # key ($TOKENWIRE_ADMIN_API_KEY at start) on ControlService calls a browser
    # cannot have sent (control_routes.py), over whatever the caller sent:
    # every program on this host has control (trainers that send no key).
    inject_admin_key: bool = False
    # CORS, as vLLM's flags spell it (JSON lists), in Envoy's CORS filter: off
    # unless allowed_origins is given; never on the ControlService's routes.
    allowed_origins: tuple[str, ...] = ()
    allowed_methods: tuple[str, ...] = ("*",)
    allowed_headers: tuple[str, ...] = ("*",)
    allow_credentials: bool = False
    # The server's --metrics-port: GET /metrics on the REST port is proxied
    # there (metrics_route.py); 0: no /metrics route.
    upstream_metrics_port: int = 0
    # Its host; "": the upstream's. With several upstreams it must be given:
    # one endpoint serving the whole fleet's metrics (tokenwire up's
    # metrics_merge.py).
    upstream_metrics_host: str = ""
    # vLLM's --enable-request-id-headers: X-Request-Id on every response.
    enable_request_id_headers: bool = False
    # vLLM's --otlp-traces-endpoint: Envoy's OpenTelemetry tracer sends a span
    # per call there (tracing.py); "": no tracing.
    otlp_traces_endpoint: str = ""


HELPS = {
    "listen_port": "REST and gRPC port of the gateway",
    "upstream_port": "port of the running tokenwire gRPC server",
    "upstreams": "a fleet: HOST:PORT of each replica, or a DNS name that resolves to all of them "
                 "(e.g. a Kubernetes headless Service); replaces --upstream-host/--upstream-port",
    "health_check_interval_s": "seconds between active gRPC health checks of each replica",
    "upstream_streams_per_connection":
        "concurrent calls per upstream connection before Envoy opens another (0: no limit below "
        "--max-requests); set it (e.g. 8) for a server with --api-server-count > 1, whose "
        "processes share connections, not calls",
    "affinity":
        "route calls with an affinity key (X-Session-ID, or the body's session_id / "
        "cache_salt / user) by consistent hash; --no-affinity: round robin (for comparison)",
    "retries": "times a call that never reached an engine (connect failure, refused, or the "
               "server's retry-safe refusal) is retried on another replica",
    "tls_cert": "serve the listener over TLS with this PEM certificate chain",
    "tls_key": "the PEM private key of --tls-cert",
    "ssl_ca_certs": "mTLS (vLLM's flag): PEM CA certificates a client certificate must chain "
                    "to, with --ssl-cert-reqs 1 or 2",
    "ssl_cert_reqs": "mTLS (vLLM's flag, Python's ssl constants): 0 no client certificate "
                     "asked for, 1 asked for and checked when sent, 2 required and checked",
    "upstream_tls_ca": "talk TLS to the server, trusting this PEM CA or self-signed certificate",
    "upstream_tls_server_name": "SNI to send to a TLS server",
    "descriptor": "descriptor set for the transcoder (make proto writes it)",
    "admin_port": "Envoy admin port on --admin-host (-1: no admin, 0: any free port)",
    "admin_host":
        "Envoy admin address (loopback by default: /config_dump and /quitquitquit need no key)",
    "max_request_bytes": "largest request body; larger ones get 413",
    "stream_idle_timeout_s": "seconds a call may stay silent before Envoy ends it",
    "max_requests": "concurrent upstream requests before Envoy answers 503",
    "max_connections": "open client connections Envoy accepts",
    "max_streams_per_connection":
        "concurrent HTTP/2 streams (calls) one client connection may open",
    "request_headers_timeout_s":
        "seconds a client has to send its request headers (slow clients are cut off)",
    "request_timeout_s": "seconds a client has to send its whole request body (disarmed once the "
                         "response starts, so long generations are not cut)",
    "max_heap_bytes": "Envoy's heap budget: its overload manager resets the streams buffering the "
                      "most memory from 90 %%, shrinks the heap at 95 %% and refuses new requests "
                      "(503) at 98 %%",
    "concurrency": "Envoy worker threads",
    "log_level": "Envoy log level (trace, debug, info, warning, error, critical, off)",
    "config_dir": "write the rendered Envoy config here (default: a temporary folder)",
    "control": "pass the ControlService (native gRPC, and its REST routes /pause, /resume, "
               "/update_weights, ...) to the one upstream (an IP address; a fleet is controlled "
               "with `tokenwire control --fleet`); without it the gateway refuses control calls. "
               "The server must run with --enable-control, and refuses control through a proxy "
               "without its admin key",
    "inject_admin_key": "with --control, on a loopback listener: the gateway adds "
                        f"'authorization: Bearer <admin key>' (${ADMIN_KEY_ENV}, read at start) "
                        "to ControlService calls a browser cannot have sent (native gRPC, or JSON "
                        "or no body, with no Origin, Sec-Fetch-* or browser User-Agent, Host "
                        "localhost/127.0.0.1/[::1] with the listen port), over what the caller "
                        "sent, so trainers that send no key (TRL, SkyRL, slime, AReaL) have "
                        "control through it; other control calls get 403. Any program on this "
                        "host then has control",
    "allowed_origins": "CORS (vLLM's flag): the origins browsers may call the inference routes "
                       "from, a JSON list ('[\"https://app.example\"]', '[\"*\"]'); default: no "
                       "CORS. Control routes never answer a browser",
    "allowed_methods": "CORS (vLLM's flag): the methods a preflight allows, a JSON list",
    "allowed_headers": "CORS (vLLM's flag): the headers a preflight allows, a JSON list ('*' "
                       "also lists Authorization, which a wildcard does not cover)",
    "allow_credentials": "CORS (vLLM's flag): allow credentials (cookies, HTTP auth)",
    "upstream_metrics_port": "the server's --metrics-port: GET /metrics on the gateway's port is "
                             "proxied there (vLLM's vllm:* and tokenwire_* metrics); one upstream "
                             "only; 0: no /metrics",
    "upstream_metrics_host": "the host of --upstream-metrics-port (default: the upstream's); with "
                             "several upstreams, required: one endpoint that serves the whole "
                             "fleet's metrics",
    "otlp_traces_endpoint": "vLLM's flag: OpenTelemetry traces, a span per call from Envoy's "
                            "tracer, sent over OTLP (gRPC, or OTLP/HTTP with "
                            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf) to this "
                            "http://HOST:PORT; the server (its own --otlp-traces-endpoint) "
                            "continues each call's trace",
    "enable_request_id_headers": "vLLM's flag: every response carries X-Request-Id (the "
                                 "caller's, else the one the gateway made; the request's id "
                                 "is chatcmpl-<it> unless the body sets request_id)",
}
CORS_LISTS = ("allowed_origins", "allowed_methods", "allowed_headers")
# vLLM's spellings of the listener's TLS flags (`tokenwire gateway`; under
# `tokenwire up` they are its own flags for the gateway's listener).
VLLM_SPELLINGS = {"tls_cert": "--ssl-certfile", "tls_key": "--ssl-keyfile"}


def json_list(text: str) -> list[str]:
    """vLLM's spelling of a list flag: a JSON list of strings (a bare string
    is a list of one)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        value = [text]
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise argparse.ArgumentTypeError(f"not a JSON list of strings: {text!r}")
    return value


def add_arguments(
    parser: argparse.ArgumentParser, *, prefix: str = "", exclude: tuple[str, ...] = ()
) -> None:
    """One flag per field: ``--listen-port`` for listen_port (with a prefix:
    ``--gateway-listen-port``). Excluded fields keep their defaults unless
    the caller sets ``gateway_<name>`` on the namespace."""
    defaults = GatewaySettings()
    for field in dataclasses.fields(GatewaySettings):
        if field.name in exclude:
            parser.set_defaults(**{"gateway_" + field.name: getattr(defaults, field.name)})
            continue
        flag = "--" + prefix + field.name.replace("_", "-")
        default = getattr(defaults, field.name)
        if not prefix and field.name in VLLM_SPELLINGS:
            parser.add_argument(flag, VLLM_SPELLINGS[field.name], dest="gateway_" + field.name,
                                default=default, help=HELPS.get(field.name, ""))
            continue
        if isinstance(default, bool):
            parser.add_argument(flag, dest="gateway_" + field.name, default=default,
                                action=argparse.BooleanOptionalAction,
                                help=HELPS.get(field.name, ""))
            continue
        if field.name in CORS_LISTS:
            parser.add_argument(flag, dest="gateway_" + field.name, type=json_list,
                                default=default, metavar="JSON_LIST",
                                help=HELPS.get(field.name, ""))
            continue
        if isinstance(default, tuple):
            parser.add_argument(flag, dest="gateway_" + field.name, nargs="+", default=default,
                                metavar="HOST:PORT", help=HELPS.get(field.name, ""))
            continue
        parser.add_argument(
            flag, dest="gateway_" + field.name, type=type(default), default=default,
            help=HELPS.get(field.name, ""),
        )


def from_namespace(ns: argparse.Namespace) -> GatewaySettings:
    values = {f.name: getattr(ns, "gateway_" + f.name) for f in dataclasses.fields(GatewaySettings)}
    for name in ("upstreams", *CORS_LISTS):
        values[name] = tuple(values[name])
    return GatewaySettings(**values)


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def check_control(settings: GatewaySettings) -> None:
    """ValueError when --control or --inject-admin-key cannot be honoured.

    --control needs exactly one upstream given as an IP address: with
    several replicas each control call would reach one of them (the
    cluster's load balancer picks), so ``/pause`` then ``/is_paused`` could
    ask different replicas; a DNS name may stand for many (STRICT_DNS: a
    headless Service), so it is refused too. --inject-admin-key gives control
    to whoever reaches the listener, so it runs only on a loopback one."""
    hosts = endpoints(settings)
    if settings.control and (len(hosts) > 1 or not is_ip(hosts[0][0])):
        given = " ".join(settings.upstreams) or f"{settings.upstream_host}:{settings.upstream_port}"
        raise ValueError(
            f"--control passes each control call to one replica, so it needs exactly one upstream "
            f"given by IP address (got {given}; a DNS name may stand for many: give one replica's "
            f"IP address). Control a fleet replica by replica with `tokenwire control --fleet "
            f"HOST:PORT,HOST:PORT ...` (the replicas' own addresses, with the admin key) and run "
            f"the gateway without --control")
    if not settings.inject_admin_key:
        return
    if not settings.control:
        raise ValueError("--inject-admin-key needs --control (it adds the admin key to the "
                         "control calls the gateway passes)")
    if not (is_ip(settings.listen_host) and ipaddress.ip_address(settings.listen_host).is_loopback):
        raise ValueError(
            f"--inject-admin-key gives control to whoever reaches the gateway, so it listens only "
            f"on a loopback address (127.0.0.1 or ::1), not {settings.listen_host}; "
            f"elsewhere callers send the admin key themselves")


def check_tls(settings: GatewaySettings) -> None:
    """ValueError when the listener's TLS flags cannot be honoured: a
    certificate without its key, client-certificate flags without TLS, a
    --ssl-cert-reqs not one of Python's three, or 1/2 without a CA."""
    if bool(settings.tls_cert) != bool(settings.tls_key):
        raise ValueError("--tls-cert (--ssl-certfile) and --tls-key (--ssl-keyfile) go together")
    if settings.ssl_cert_reqs not in (0, 1, 2):
        raise ValueError(f"--ssl-cert-reqs must be 0 (CERT_NONE), 1 (CERT_OPTIONAL) or 2 "
                         f"(CERT_REQUIRED), not {settings.ssl_cert_reqs}")
    if (settings.ssl_ca_certs or settings.ssl_cert_reqs) and not settings.tls_cert:
        raise ValueError("--ssl-ca-certs and --ssl-cert-reqs check client certificates over TLS: "
                         "give the listener a certificate (--ssl-certfile and --ssl-keyfile)")
    if settings.ssl_cert_reqs and not settings.ssl_ca_certs:
        raise ValueError(f"--ssl-cert-reqs {settings.ssl_cert_reqs} needs --ssl-ca-certs (the CA "
                         "certificates a client certificate must chain to)")


def injected_admin_key(settings: GatewaySettings,
                       environ: collections.abc.Mapping[str, str] = os.environ) -> str:
    """The admin key the gateway adds to control calls ("" without
    --inject-admin-key); ValueError when --control or the flag cannot be
    honoured (check_control)."""
    check_control(settings)
    if not settings.inject_admin_key:
        return ""
    key = environ.get(ADMIN_KEY_ENV, "")
    if not key:
        raise ValueError(f"--inject-admin-key needs the server's admin key in ${ADMIN_KEY_ENV}")
    return key


def endpoints(settings: GatewaySettings) -> list[tuple[str, int]]:
    """(host, port) of every upstream replica."""
    if not settings.upstreams:
        return [(settings.upstream_host, settings.upstream_port)]
    out = []
    for item in settings.upstreams:
        host, sep, port = item.rpartition(":")
        if not sep or not port.isdigit() or not host:
            raise ValueError(f"upstream {item!r} is not HOST:PORT")
        out.append((host.strip("[]"), int(port)))
    return out


def services(settings: GatewaySettings) -> list[str]:
    """The gRPC services the transcoder exposes over REST: inference, and the
    ControlService only when the operator turned control on."""
    names = ["tokenwire.v1.TokenwireService", "tokenwire.v1.EventStreamService"]
    if settings.control:
        names.append("tokenwire.v1.ControlService")
    return names
