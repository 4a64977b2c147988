"""The gRPC server's transport (--grpc-transport): grpc.aio's, or
pygrpc-native's Rust one where it serves the settings given as grpc.aio
does; otherwise grpc.aio, with one log line saying why (docs/engine.md,
"gRPC transports")."""

from __future__ import annotations

import importlib.util
import logging
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


def native_refusal(settings: ServerSettings) -> str | None:
    """Why pygrpc-native cannot serve these settings as grpc.aio does (None:
    it can). It serves one plaintext port; bidirectional calls (the Session
    stream, reflection) and generic handlers (the control relay) reach a
    grpcio server behind it, where every caller's address is its Unix socket."""
    if settings.tls_cert:
        return "TLS (--tls-cert / --ssl-certfile): pygrpc-native serves plaintext only"
    if settings.control_sockets:
        return ("--enable-control with --api-server-count > 1: the control relay listens on a "
                "second (private Unix) socket, and its handlers would see pygrpc-native's "
                "fallback socket as every caller's address (pygrpc-native serves one port)")
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


def is_native(server: grpc.aio.Server) -> bool:
    """Whether `server` is pygrpc-native's (make_server's `native`)."""
    return type(server).__module__.startswith(NATIVE_PACKAGE)
