"""The `tokenwire gateway` and `tokenwire up` subcommands."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from tokenwire.gateway import settings as gw_settings


def add_gateway_parsers(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "gateway", help="run Envoy (OpenAI REST + SSE, and gRPC) in front of a running server"
    )
    gw_settings.add_arguments(p)
    p.add_argument("--print-config", action="store_true", help="print the Envoy config and exit")
    p.set_defaults(func=run_gateway)

    try:
        from tokenwire.server.settings import add_arguments as add_server_arguments
    except ImportError:  # client-only install: no server to start
        return
    up = sub.add_parser(
        "up", allow_abbrev=False,
        help="run the server and the gateway together (Ctrl-C stops both); "
             "vLLM engine flags pass through to `tokenwire serve`",
    )
    add_server_arguments(up)
    up.set_defaults(accepts_extra=True)
    gw_settings.add_arguments(up, prefix="gateway-",
                              exclude=("upstream_host", "upstream_port", "control"))
    up.set_defaults(func=run_up)


def run_gateway(ns: argparse.Namespace) -> int:
    from tokenwire.gateway.config import render
    from tokenwire.gateway.process import EnvoyProcess, port_open

    settings = gw_settings.from_namespace(ns)
    if ns.print_config:
        sys.stdout.write(render(settings))
        return 0
    if not port_open(settings.upstream_host, settings.upstream_port):
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
SECRET_FIELDS = {"api_key": "TOKENWIRE_API_KEY", "admin_api_key": "TOKENWIRE_ADMIN_API_KEY"}


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def serve_argv(ns: argparse.Namespace) -> list[str]:
    """The `tokenwire serve` flags for the server settings in `ns` (only
    those that differ from the defaults)."""
    from tokenwire.server.settings import ServerSettings, own_fields

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

    if ns.port == 0:
        raise SystemExit("tokenwire up: give the server a fixed --port (not 0)")
    ns.gateway_upstream_host = ns.host
    ns.gateway_upstream_port = ns.port
    ns.gateway_control = ns.enable_control
    admin_key = ns.admin_api_key or os.environ.get("TOKENWIRE_ADMIN_API_KEY", "")
    if ns.enable_control and not admin_key and ns.gateway_listen_host not in LOOPBACK_HOSTS:
        # Behind Envoy every caller is a loopback peer of the server.
        raise SystemExit("tokenwire up: --enable-control on a non-loopback gateway needs "
                         "--admin-api-key (or $TOKENWIRE_ADMIN_API_KEY)")
    if ns.tls_cert and not ns.gateway_upstream_tls_ca:
        ns.gateway_upstream_tls_ca = ns.tls_cert  # a self-signed server certificate
    gateway = gw_settings.from_namespace(ns)
    probe = supervisor.Probe(
        tls_ca=gateway.upstream_tls_ca,
        tls_server_name=gateway.upstream_tls_server_name or "localhost",
        api_key="" if ns.open_probes else (ns.api_key or os.environ.get("TOKENWIRE_API_KEY", "")),
    )
    env = {var: getattr(ns, name) for name, var in SECRET_FIELDS.items() if getattr(ns, name)}
    # Engine flags (vLLM's) were not parsed here: they go to `tokenwire serve` as given.
    argv = serve_argv(ns) + list(getattr(ns, "extra", []))
    return supervisor.run(argv, gateway, probe=probe, server_env=env)
