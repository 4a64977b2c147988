"""The gRPC server's transport and listeners: grpc.aio's server, or
pygrpc-native's Rust one (--grpc-transport native) where it serves the
settings given as grpc.aio does, otherwise grpc.aio with one log line saying
why (docs/engine.md, "gRPC transports"); the port, its TLS credentials, and
the control relay's private socket."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
from collections.abc import Sequence
from typing import Any

import grpc

from tokenwire.server.core.settings import ServerSettings

log = logging.getLogger("tokenwire.server")

NATIVE_PACKAGE = "pygrpc_native"
NATIVE_INSTALL = "pip install 'tokenwire[native]'"
# What grpc-core's server does unasked and pygrpc-native 0.5.0 does not: no
# limit on a connection's concurrent streams (pygrpc-native's default: 1024,
# past which a client's calls wait for a slot, where on grpc.aio they reach
# the server and admission answers them). A caller's own value wins.
NATIVE_DEFAULTS = (("grpc.max_concurrent_streams", 2**31 - 1),)  # a C int (its fallback)
# pygrpc-native 0.5.0's stop(grace) closes its transport as soon as the
# handlers have returned, without waiting for what they queued to be
# written: a stream's last messages and trailers could be cut by the GOAWAY
# (seen once in CI, in test_sigterm_lets_inflight_stream_finish_then_exits_zero).
# Its writes take milliseconds; this much after the last call ends covers a
# busy machine.
NATIVE_FLUSH_SECONDS = 0.5


def native_refusal(settings: ServerSettings) -> str | None:
    """Why pygrpc-native cannot serve these settings as grpc.aio does (None:
    it can). It serves one plaintext port; bidirectional calls (the Session
    stream, reflection) and generic handlers reach a grpcio server behind
    it, where every caller's address is its Unix socket (the control relay's
    methods are registered ones, served natively: sockets_server)."""
    if settings.tls_cert:
        return "TLS (--tls-cert / --ssl-certfile): pygrpc-native serves plaintext only"
    if settings.trust_tenant_header:
        return ("--trust-tenant-header: the Session stream goes through pygrpc-native's grpcio "
                "fallback, where every caller's address is its Unix socket, so the trusted hop "
                "that may name the tenant could not be told from any other caller")
    if importlib.util.find_spec(NATIVE_PACKAGE) is None:
        return f"pygrpc-native is not installed ({NATIVE_INSTALL})"
    return None


def make_server(settings: ServerSettings, options: Sequence[tuple[str, Any]],
                interceptors: Sequence[grpc.aio.ServerInterceptor]) -> grpc.aio.Server:
    """The gRPC server of --grpc-transport. `native` falls back to grpc.aio,
    logging the reason once, where it would serve these settings otherwise
    (native_refusal), or refuses an option or argument at construction."""
    if settings.grpc_transport == "native":
        reason = native_refusal(settings)
        if reason is None:
            # `import pygrpc_native.aio`: 0.5.0's `from pygrpc_native import aio`
            # recurses in the package's __getattr__ until RecursionError.
            import pygrpc_native.aio as native
            from pygrpc_native import __version__

            try:
                given = {key for key, _ in options}
                unasked = [o for o in NATIVE_DEFAULTS if o[0] not in given]
                server = native.server(options=[*unasked, *options],
                                       interceptors=list(interceptors))
            except (ValueError, NotImplementedError) as exc:
                reason = f"pygrpc-native {__version__} refused the server's options: {exc}"
            else:
                log.info("gRPC transport: native (pygrpc-native %s)", __version__)
                return server
        log.warning("--grpc-transport native: serving on grpc.aio instead: %s", reason)
    return grpc.aio.server(options=list(options), interceptors=list(interceptors))


def sockets_server(server: grpc.aio.Server, settings: ServerSettings,
                   options: Sequence[tuple[str, Any]],
                   interceptors: Sequence[grpc.aio.ServerInterceptor]) -> grpc.aio.Server | None:
    """Where the control relay's private Unix socket listens when not on
    `server` (None: on it). pygrpc-native serves one port, so a native
    server's socket gets a grpc.aio server of its own with the same limits
    and interceptors, serving the relay's methods only (control/relay.py)."""
    if not settings.control_sockets or not is_native(server):
        return None
    return grpc.aio.server(options=[o for o in options if o[0] != "grpc.so_reuseport"],
                           interceptors=list(interceptors))


async def stop_server(server: grpc.aio.Server, grace: float, idle: asyncio.Event) -> None:
    """Stop `server`, its in-flight calls given `grace` seconds. On native
    the calls are waited for here (`idle`: set once none runs), then their
    queued writes get NATIVE_FLUSH_SECONDS (within the grace) before the
    transport closes."""
    if is_native(server) and grace > 0:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(idle.wait(), grace)
        await asyncio.sleep(max(0.0, min(NATIVE_FLUSH_SECONDS, deadline - loop.time())))
        grace = max(deadline - loop.time(), 0.01)  # (0 would not wait at all)
    await server.stop(grace)


def is_native(server: grpc.aio.Server) -> bool:
    """Whether `server` is pygrpc-native's (make_server's `native`)."""
    return type(server).__module__.startswith(NATIVE_PACKAGE)


def server_credentials(settings: ServerSettings) -> grpc.ServerCredentials | None:
    """TLS for the gRPC listener (None: plaintext): --tls-cert/--tls-key
    (vLLM's --ssl-certfile/--ssl-keyfile); with --ssl-cert-reqs 2 every
    client presents a certificate chaining to --ssl-ca-certs (mTLS).
    ValueError for what gRPC cannot do (settings.check_tls)."""
    settings.check_tls()
    if not settings.tls_cert:
        return None
    with open(settings.tls_key, "rb") as key, open(settings.tls_cert, "rb") as cert:
        pair = (key.read(), cert.read())
    if settings.ssl_cert_reqs != 2:  # CERT_NONE: vLLM's meaning, even with --ssl-ca-certs
        if settings.ssl_ca_certs:
            log.warning("--ssl-ca-certs without --ssl-cert-reqs 2: client certificates are not "
                        "asked for (vLLM's meaning of --ssl-cert-reqs 0)")
        return grpc.ssl_server_credentials([pair])
    with open(settings.ssl_ca_certs, "rb") as ca:
        return grpc.ssl_server_credentials([pair], root_certificates=ca.read(),
                                           require_client_auth=True)


def listen(server: grpc.aio.Server, settings: ServerSettings,
           sockets: grpc.aio.Server | None) -> int:
    """The gRPC port (TLS with server_credentials), and with several
    serving processes and control this process's relay socket (on `sockets`,
    the socket's own server, where not None)."""
    address = f"{settings.host}:{settings.port}"
    creds = server_credentials(settings)
    if creds is not None:
        port = server.add_secure_port(address, creds)
    else:
        port = server.add_insecure_port(address)
    if port == 0:
        raise RuntimeError(f"could not listen on {address}")
    if settings.control_sockets:  # the other serving processes reach this one here
        path = settings.control_sockets[settings.process_index]
        if (sockets or server).add_insecure_port(f"unix:{path}") == 0:
            raise RuntimeError(f"could not listen on unix:{path}")
        os.chmod(path, 0o600)  # this user's processes only (in a 0700 folder too)
    return port
