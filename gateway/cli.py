"""The `tokenwire gateway` and `tokenwire up` subcommands."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from tokenwire.gateway import settings as gw_settings
from tokenwire.gateway import tracing as gw_tracing
from tokenwire.gateway.up_ports import check_ports, free_ports

if TYPE_CHECKING:  # (a client-only install has no server)
    from tokenwire.server.core.settings import ServerSettings


def add_gateway_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "gateway", help="run Envoy (OpenAI REST + SSE, and gRPC) in front of a running server"
    )
    gw_settings.add_arguments(p)
    p.add_argument("--print-config", action="store_true", help="print the Envoy config and exit")
    p.set_defaults(func=run_gateway)

    try:
        from tokenwire.server.core.settings import add_arguments as add_server_arguments
    except ImportError:  # client-only install: no server to start
        return
    up = sub.add_parser(
        "up", allow_abbrev=False,
        help="run the server and the gateway together (Ctrl-C stops both); "
             "vLLM engine flags pass through to `tokenwire serve`",
    )
    # vLLM's TLS and request-id flags mean the listener a vLLM user talks
    # to: the gateway's (REST, and gRPC through it); tokenwire's --tls-cert
    # and --tls-key stay the servers' gRPC listener.
    # vLLM's --host / --port are the REST listener's too (the gateway's: `vllm
    # serve --port 8000` and `tokenwire up --port 8000` serve REST on 8000);
    # the servers' gRPC listener is --grpc-host / --grpc-port (vLLM's
    # --grpc-port: gRPC beside REST).
    add_server_arguments(up, skip=frozenset((*UP_GATEWAY_FLAGS, "host", "port")),
                         vllm_spellings=False)
    up.set_defaults(ssl_ca_certs="", ssl_cert_reqs=0)  # the servers': none under `up`
    grpc = up.add_argument_group("the servers' gRPC listener (each replica's `tokenwire serve "
                                 "--host/--port`)")
    grpc.add_argument("--grpc-host", dest="host", default=GRPC_HOST, metavar="HOST",
                      help="the servers' gRPC listen address (loopback by default, whatever "
                           "--host is: clients reach gRPC through the REST port too)")
    grpc.add_argument("--grpc-port", dest="port", type=int, default=GRPC_PORT, metavar="PORT",
                      help="the servers' gRPC port (vLLM's flag: gRPC beside REST); with "
                           "--replicas N, replica i serves on --grpc-port + i")
    up.add_argument("--replicas", type=int, default=1,
                    help="run N servers (each its own engine) on --grpc-port, --grpc-port+1, ... "
                         "behind the gateway, with session/cache affinity (docs/fleet.md)")
    up.add_argument("--gpus-per-replica", type=int, default=0,
                    help="with --replicas on a GPU host: give replica i the devices "
                         "i*K .. i*K+K-1 (CUDA_VISIBLE_DEVICES); 0 leaves devices alone")
    up.set_defaults(accepts_extra=True)
    gw_settings.add_arguments(up, prefix="gateway-",
                              exclude=("upstream_host", "upstream_port", "control",
                                       "upstream_metrics_port", "upstream_metrics_host",
                                       "otlp_traces_endpoint", "listen_host", "listen_port",
                                       *UP_GATEWAY_FLAGS))
    vllm = up.add_argument_group("vLLM's flags for the REST listener (the gateway's)")
    vllm.add_argument("--host", "--gateway-listen-host", dest="gateway_listen_host",
                      default=gw_settings.GatewaySettings().listen_host, metavar="HOST",
                      help="vLLM's flag: the REST listener's address (REST, and gRPC through "
                           "it); loopback by default (vLLM's: every address; give 0.0.0.0)")
    vllm.add_argument("--port", "--gateway-listen-port", dest="gateway_listen_port", type=int,
                      default=UP_PORT, metavar="PORT",
                      help=f"vLLM's flag: the REST listener's port (REST, and gRPC through it; "
                           f"default {UP_PORT}, vLLM's); the servers' gRPC port is --grpc-port")
    vllm.add_argument("--ssl-certfile", dest="gateway_tls_cert", default="", metavar="FILE",
                      help="vLLM's flag: serve the gateway's listener (REST, and gRPC through it) "
                           "over TLS with this PEM certificate chain (= --gateway-tls-cert)")
    vllm.add_argument("--ssl-keyfile", dest="gateway_tls_key", default="", metavar="FILE",
                      help="vLLM's flag: the PEM private key of --ssl-certfile "
                           "(= --gateway-tls-key)")
    vllm.add_argument("--ssl-ca-certs", dest="gateway_ssl_ca_certs", default="", metavar="FILE",
                      help=gw_settings.HELPS["ssl_ca_certs"] + " (the gateway's listener)")
    vllm.add_argument("--ssl-cert-reqs", dest="gateway_ssl_cert_reqs", type=int, default=0,
                      metavar="N",
                      help=gw_settings.HELPS["ssl_cert_reqs"] + " (the gateway's listener)")
    defaults = gw_settings.GatewaySettings()
    for name in UP_VLLM_NAMES:  # also --gateway-<name>
        flag, dest = "--" + name.replace("_", "-"), "gateway_" + name
        default = getattr(defaults, name)
        if isinstance(default, bool):
            vllm.add_argument(flag, dest=dest, default=default,
                              action=argparse.BooleanOptionalAction, help=gw_settings.HELPS[name])
        else:  # vLLM's CORS lists
            vllm.add_argument(flag, dest=dest, type=gw_settings.json_list, default=default,
                              metavar="JSON_LIST", help=gw_settings.HELPS[name])
    vllm.add_argument("--otlp-traces-endpoint", dest="gateway_otlp_traces_endpoint", default="",
                      metavar="URL", help=gw_settings.HELPS["otlp_traces_endpoint"] + " (the "
                      "gateway and every server: one trace per request)")
    up.set_defaults(func=run_up)


# `tokenwire up`'s listeners: REST (the gateway's) on vLLM's default port;
# the servers' gRPC on `tokenwire serve`'s defaults.
UP_PORT = 8000
GRPC_HOST = "127.0.0.1"
GRPC_PORT = 50051
# Settings vLLM spells for its one listener: under `tokenwire up` the
# gateway's own flags, not the servers' (which keep tokenwire's --tls-*).
UP_GATEWAY_FLAGS = ("ssl_ca_certs", "ssl_cert_reqs")
# vLLM's names of gateway settings `tokenwire up` takes as they are.
UP_VLLM_NAMES = ("enable_request_id_headers", "allowed_origins", "allowed_methods",
                 "allowed_headers", "allow_credentials")


def run_gateway(ns: argparse.Namespace) -> int:
    from tokenwire.gateway.config import render
    from tokenwire.gateway.process import EnvoyProcess, port_open

    settings = gw_settings.from_namespace(ns)
    try:
        gw_settings.check_control(settings)
        gw_settings.check_tls(settings)
        gw_tracing.check(settings)
        if not ns.print_config:
            gw_settings.injected_admin_key(settings)
    except ValueError as err:
        raise SystemExit(f"tokenwire gateway: {err}") from None
    if ns.print_config:  # the admin key, if injected, stays out of the printout
        sys.stdout.write(render(settings, admin_key=f"${gw_settings.ADMIN_KEY_ENV}"))
        return 0
    if not settings.upstreams and not port_open(settings.upstream_host, settings.upstream_port):
        print(
            f"tokenwire gateway: warning: no server on {settings.upstream_host}:"
            f"{settings.upstream_port} yet (calls get 503 until it is up)",
            file=sys.stderr,
        )
    stop = threading.Event()
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, lambda signum, frame: stop.set())
    envoy = EnvoyProcess(settings).start()
    print(f"tokenwire gateway: REST on {envoy.url}/v1, gRPC through {envoy.address}", flush=True)
    try:
        while not stop.is_set() and envoy.proc is not None and envoy.proc.poll() is None:
            stop.wait(0.2)
    finally:
        code = envoy.stop()
    return 0 if stop.is_set() else (code or 1)


# Passed to the server through its environment, not its (visible) command line.
SECRET_FIELDS = {"api_key": "TOKENWIRE_API_KEY", "admin_api_key": gw_settings.ADMIN_KEY_ENV}


def serve_argv(ns: argparse.Namespace) -> list[str]:
    """The `tokenwire serve` flags for the server settings in `ns` (only
    those that differ from the defaults)."""
    from tokenwire.server.core.settings import ServerSettings, own_fields

    defaults = ServerSettings()
    argv: list[str] = []
    for field in own_fields():
        value = getattr(ns, field.name)
        if value == getattr(defaults, field.name) or value is None or field.name in SECRET_FIELDS:
            continue
        flag = "--" + field.name.replace("_", "-")
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, (tuple, list)):
            if value:
                argv += [flag, *map(str, value)]
        else:
            argv += [flag, str(value)]
    return argv


def run_up(ns: argparse.Namespace) -> int:
    from tokenwire.gateway import supervisor
    from tokenwire.server.core.settings import from_namespace as server_settings
    from tokenwire.server.security.auth import check_exposure

    check_ports(ns)
    server = server_settings(ns)  # what each replica's `tokenwire serve` will get
    try:
        check_exposure(server)
    except ValueError as err:  # the servers' listener is --grpc-host here
        raise SystemExit(f"tokenwire up: {str(err).replace('--host', '--grpc-host')}") from None
    _up_upstream(ns)
    _up_control(ns, server)
    gateway = gw_settings.from_namespace(ns)
    probe = supervisor.Probe(
        tls_ca=gateway.upstream_tls_ca,
        tls_server_name=gateway.upstream_tls_server_name or "localhost",
        api_key="" if ns.open_probes else server.api_key,
    )
    env = {var: getattr(ns, name) for name, var in SECRET_FIELDS.items()
           if getattr(ns, name) and name != "api_key"}
    if server.api_keys():  # every --api-key (or $VLLM_API_KEY's), one a line
        env[SECRET_FIELDS["api_key"]] = "\n".join(server.api_keys())
    replicas = plan_replicas(ns)
    if len(replicas) > 1:
        gateway = dataclasses.replace(gateway, upstreams=tuple(r.address for r in replicas))
    try:
        gw_settings.check_control(gateway)  # e.g. --gateway-inject-admin-key on 0.0.0.0
        gw_settings.check_tls(gateway)
        gw_tracing.check(gateway)
    except ValueError as err:
        raise SystemExit(f"tokenwire up: {err}") from None
    merger = None
    if len(replicas) * ns.api_server_count > 1:  # one /metrics for them all
        from tokenwire.gateway.metrics_merge import MetricsMerger, plan_targets

        merger = MetricsMerger(plan_targets(ns.metrics_host, ns.metrics_port, len(replicas),
                                            ns.api_server_count)).start()
        gateway = dataclasses.replace(gateway, upstream_metrics_host="127.0.0.1",
                                      upstream_metrics_port=merger.port)
    try:
        return supervisor.run(replicas, gateway, probe=probe, server_env=env)
    finally:
        if merger is not None:
            merger.close()


def _up_upstream(ns: argparse.Namespace) -> None:
    """The gateway's flags for reaching the servers: their address, metrics
    ports, certificate and connections."""
    # The gateway's upstream by address: a name (even localhost, which may
    # resolve to two) would stand for several replicas to --control.
    ns.gateway_upstream_host = "127.0.0.1" if ns.host == "localhost" else ns.host
    ns.gateway_upstream_port = ns.port
    # GET /metrics on the REST port, always (as vLLM's): the servers' metrics
    # ports, free loopback ones unless --metrics-port is given. Several
    # (replicas, serving processes) are merged by metrics_merge.py.
    if not ns.metrics_port:
        ns.metrics_port = free_ports(max(1, ns.replicas) * max(1, ns.api_server_count),
                                     ns.metrics_host)
    ns.gateway_upstream_metrics_port = ns.metrics_port
    if ns.tls_cert and not ns.gateway_upstream_tls_ca:
        ns.gateway_upstream_tls_ca = ns.tls_cert  # a self-signed server certificate
    if ns.api_server_count > 1 and not ns.gateway_upstream_streams_per_connection:
        # Several serving processes share connections, not calls: open several.
        ns.gateway_upstream_streams_per_connection = 8


def _up_control(ns: argparse.Namespace, server: ServerSettings) -> None:
    """Whether the gateway passes control (--gateway-control), said when it
    does not, and --gateway-inject-admin-key's conditions."""
    # The server refuses control that came through a proxy unless it carries
    # the admin key, so the gateway exposes control only when there is one,
    # and only in front of one replica (each call would reach one of several).
    fleet = ns.replicas > 1
    ns.gateway_control = ns.enable_control and bool(server.admin_api_key) and not fleet
    if ns.enable_control and fleet:
        print(f"tokenwire up: with --replicas {ns.replicas} the gateway does not pass control "
              "(each call would reach one replica): control the replicas with `tokenwire control "
              "--fleet HOST:PORT,HOST:PORT ...` (their own addresses)", file=sys.stderr, flush=True)
    elif ns.enable_control and not server.admin_api_key:
        print(f"tokenwire up: control without --admin-api-key is for this host only: call the "
              f"server at {ns.host}:{ns.port} (its gRPC port, --grpc-port: `tokenwire control "
              f"--server {ns.host}:{ns.port} ...`); the gateway (REST on --port "
              f"{ns.gateway_listen_port}) does not expose it", file=sys.stderr, flush=True)
    if ns.gateway_inject_admin_key:
        if fleet:
            raise SystemExit("tokenwire up: --gateway-inject-admin-key needs one replica (a "
                             "fleet's control goes replica by replica: `tokenwire control "
                             "--fleet`)")
        if not ns.gateway_control:
            raise SystemExit("tokenwire up: --gateway-inject-admin-key needs --enable-control and "
                             "--admin-api-key (or $TOKENWIRE_ADMIN_API_KEY)")
        # The gateway (started from this process) reads it from there.
        os.environ[gw_settings.ADMIN_KEY_ENV] = server.admin_api_key


def up_config(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """`tokenwire up ... --config vllm.yaml`: the YAML's keys that `tokenwire
    up` takes itself (its listener's: --host and --port are REST's, as in
    `vllm serve`; --grpc-port, --api-key, ...: what it would
    get wrong if only the servers read them) become its flags, before the
    command line's, which win as in `vllm serve`; the other keys stay a
    YAML (written 0600) for every replica's `tokenwire serve --config`."""
    import atexit
    import json
    import pathlib
    import shutil
    import tempfile

    import yaml

    if "--config" not in argv or argv.index("--config") + 1 >= len(argv):
        return argv
    at = argv.index("--config")
    try:
        data = yaml.safe_load(pathlib.Path(argv[at + 1]).read_text())
    except (OSError, yaml.YAMLError):
        return argv  # `tokenwire serve` reports it
    if not isinstance(data, dict):
        return argv
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    known = sub.choices["up"]._option_string_actions
    ours: list[str] = []
    rest: dict[Any, Any] = {}
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        action = known.get(flag)
        if action is None or flag == "--config":
            rest[key] = value
        elif isinstance(value, bool):
            if value or isinstance(action, argparse.BooleanOptionalAction):
                ours.append(flag if value else "--no-" + flag[2:])
        elif action.type is gw_settings.json_list or isinstance(value, dict):
            ours += [flag, json.dumps(value)]
        elif isinstance(value, list):
            ours += [flag, *map(str, value)]
        else:
            ours += [flag, str(value)]
    served: list[str] = []
    if rest:
        folder = pathlib.Path(tempfile.mkdtemp(prefix="tokenwire-up-"))  # 0700
        atexit.register(shutil.rmtree, folder, ignore_errors=True)  # servers read it at start
        path = folder / "serve.yaml"
        path.touch(mode=0o600)
        path.write_text(yaml.safe_dump(rest))
        served = ["--config", str(path)]
    model = argv[:1] if argv and not argv[0].startswith("-") else []  # `up MODEL`
    return [*model, *ours, *argv[len(model):at], *served, *argv[at + 2:]]


def _model_first(extra: list[str]) -> list[str]:
    """`tokenwire up MODEL ...` (vLLM's positional model) as `--model MODEL`
    for each replica's `tokenwire serve`."""
    if extra and not extra[0].startswith("-"):
        return ["--model", extra[0], *extra[1:]]
    return list(extra)


def plan_replicas(ns: argparse.Namespace) -> list[Any]:
    """The `tokenwire serve` of each replica: gRPC ports one after another
    from --grpc-port (`serve --port`); metrics ports from --metrics-port, --api-server-count of
    them each (serving process i of a replica serves on its port + i);
    devices split with --gpus-per-replica. Engine flags (vLLM's) were not
    parsed here: they go to every replica as given, but for the ports of
    --kv-events-config (gateway/replica_kv_events.py)."""
    from tokenwire.gateway.replica_kv_events import for_replica
    from tokenwire.gateway.supervisor import Replica

    if ns.replicas < 1:
        raise SystemExit("tokenwire up: --replicas must be at least 1")
    base_port, base_metrics = ns.port, ns.metrics_port
    endpoint = getattr(ns, "gateway_otlp_traces_endpoint", "")  # vLLM's one flag: servers too
    traced = ["--otlp-traces-endpoint", endpoint] if endpoint else []
    replicas = []
    for i in range(ns.replicas):
        ns.port = base_port + i
        ns.metrics_port = base_metrics + i * max(1, ns.api_server_count) if base_metrics else 0
        env = {}
        if ns.gpus_per_replica > 0:
            k = ns.gpus_per_replica
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in range(i * k, (i + 1) * k))
        engine_argv = for_replica(_model_first(getattr(ns, "extra", [])), i)
        replicas.append(Replica(serve_argv(ns) + engine_argv + traced, f"{ns.host}:{ns.port}",
                                env))
    ns.port, ns.metrics_port = base_port, base_metrics
    return replicas
