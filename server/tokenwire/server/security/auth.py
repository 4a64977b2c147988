"""Who may call what, from gRPC metadata and the peer.

- Inference calls: `authorization: Bearer <key>` (an inference key),
  compared in constant time; health and reflection stay reachable without
  the key only when the settings say so. The serving processes' private
  methods (control/relay.py) are not inference calls: they check their
  socket and the launch's relay token themselves. A rejected call gets
  UNAUTHENTICATED with an ErrorInfo (reason "API_KEY_INVALID", param
  "authorization").
- Operator calls (the ControlService, and GetStats, which describes the
  whole server): the admin key when one is set. Without one, control is for
  local callers that did not come through a proxy, and GetStats for any
  caller but a tenant key (docs/control.md, Access).
- Proxies: a call came through one when its metadata carries a proxy's
  headers (x-forwarded-for, forwarded, x-envoy-*; the gateway always adds
  x-forwarded-for) or its peer is a --trusted-proxy address. Only such a
  hop (by default: a local peer) may name the tenant (x-tenant-id).
"""

from __future__ import annotations

import dataclasses
import functools
import hmac
import ipaddress
import urllib.parse
from collections.abc import Iterable
from typing import Any

import grpc

from tokenwire.server.core.errors import (
    PermissionDenied,
    TokenwireError,
    Unauthenticated,
    abort_with,
)
from tokenwire.server.core.rpc_handlers import HandlerInterceptor, wrap_handler
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.security.tenancy import bearer_token
from tokenwire.wire import PROXY_HEADER_PREFIX, PROXY_HEADERS  # proxy marks: those and x-envoy-*

OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
# Probes (vLLM serves /health, /ping, /version and /load without its key too).
OPEN_METHODS = tuple(f"/tokenwire.v1.TokenwireService/{m}"
                     for m in ("GetHealth", "GetVersion", "GetServerLoad"))
CONTROL_PREFIX = "/tokenwire.v1.ControlService/"
STATS_METHOD = "/tokenwire.v1.TokenwireService/GetStats"
# The serving processes' private service (control/relay.py, between the
# processes of one launch on their Unix sockets): each of its methods checks
# that it came in on a private socket with the launch's relay token, so the
# inference key is not theirs to check (with it, process 0's LoRA pushes
# were refused: issue 42 H-2); on the public port they refuse every caller.
RELAY_SERVICE = "tokenwire.relay.ServingProcesses"
RELAY_PREFIX = f"/{RELAY_SERVICE}/"
LOOPBACK_HOSTS = ("localhost",)  # names; addresses are judged by ipaddress

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def bearer_ok(metadata: Any, *keys: bytes) -> bool:
    """Whether the bearer token is one of `keys` (each compared in constant time)."""
    token = bearer_token(metadata)
    if token is None:
        return False
    return sum(hmac.compare_digest(token, key) for key in keys) > 0


def is_open(method: str, open_probes: bool) -> bool:
    return open_probes and (method.startswith(OPEN_PREFIXES) or method in OPEN_METHODS)


def peer_address(peer: str | None) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The IP address of a gRPC peer ("ipv4:1.2.3.4:5", "ipv6:[::1]:5", also
    percent-encoded), or None (a Unix socket, or unknown)."""
    kind, _, rest = urllib.parse.unquote(peer or "").partition(":")
    if kind == "ipv4":
        host = rest.rpartition(":")[0]
    elif kind == "ipv6":
        host = rest.rpartition(":")[0].strip("[]").partition("%")[0]
    else:
        return None
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def is_local_peer(peer: str | None) -> bool:
    """A caller on this host: a loopback address or a Unix socket."""
    if (peer or "").startswith("unix:"):
        return True
    address = peer_address(peer)
    return address is not None and address.is_loopback


def is_loopback_host(host: str) -> bool:
    """Whether a listen address (--host) is reachable from this host only."""
    if host.startswith("unix:") or host.lower() in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost, or "" (every address)


@dataclasses.dataclass(frozen=True)
class Proxies:
    """The --trusted-proxy addresses (IPs or CIDR networks): the hops in
    front of this server, such as the gateway. A call from one of them is a
    proxied call; only such a hop may name the tenant. With none listed, a
    local peer (the gateway on this host, `tokenwire up`) is that hop."""

    networks: tuple[IpNetwork, ...] = ()

    @classmethod
    def parse(cls, values: Iterable[str]) -> Proxies:
        """From flag values (each may be a comma list); ValueError naming
        --trusted-proxy and the value at fault."""
        networks = []
        for value in values:
            for item in filter(None, (part.strip() for part in value.split(","))):
                try:
                    networks.append(ipaddress.ip_network(item.strip("[]"), strict=False))
                except ValueError:
                    raise ValueError(f"--trusted-proxy {item!r} is not an IP address or CIDR "
                                     "network (e.g. 10.0.0.5 or 10.0.0.0/24)") from None
        return cls(tuple(networks))

    def listed(self, peer: str | None) -> bool:
        address = peer_address(peer)
        return address is not None and any(address in net for net in self.networks)

    def may_name_tenant(self, peer: str | None) -> bool:
        """Whether x-tenant-id from this peer is believed (with --trust-tenant-header)."""
        return self.listed(peer) if self.networks else is_local_peer(peer)

    def proxied(self, metadata: Iterable[tuple[str, Any]] | None, peer: str | None) -> bool:
        """Whether the call came through a proxy: its headers, or its peer."""
        for key, _ in metadata or ():
            if key in PROXY_HEADERS or key.startswith(PROXY_HEADER_PREFIX):
                return True
        return self.listed(peer)


@functools.lru_cache(maxsize=16)
def proxies_of(values: tuple[str, ...]) -> Proxies:
    """The parsed --trusted-proxy setting (parsed once per value)."""
    return Proxies.parse(values)


def check_exposure(settings: ServerSettings) -> None:
    """Refuse settings that would expose control or misname proxies:
    ValueError naming the flags."""
    proxies_of(settings.trusted_proxy)
    if (settings.enable_control and not settings.admin_api_key
            and not is_loopback_host(settings.host)):
        raise ValueError(
            f"--enable-control on --host {settings.host or '(every address)'} needs "
            "--admin-api-key (or $TOKENWIRE_ADMIN_API_KEY): without an admin key, control is "
            "allowed from this host only, so the server must listen on a loopback address "
            "(127.0.0.1, ::1, localhost or unix:)")


class ApiKeyInterceptor(HandlerInterceptor):
    """Inference calls need an inference key; operator calls are
    ControlAccessInterceptor's (GetStats only when an admin key is set)."""

    def __init__(self, api_keys: list[str], *, open_probes: bool, admin_key: str = ""):
        self._keys = [k.encode() for k in api_keys]
        self._open_probes = open_probes
        self._operator = (CONTROL_PREFIX, STATS_METHOD) if admin_key else (CONTROL_PREFIX,)

    def intercept(self, handler: grpc.RpcMethodHandler,
                  details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method
        if (is_open(method, self._open_probes)
                or method.startswith(self._operator)  # the admin credential's business
                or method.startswith(RELAY_PREFIX)  # the relay token's business
                or bearer_ok(details.invocation_metadata, *self._keys)):
            return handler
        return _deny_like(handler, _NO_KEY)


class ControlAccessInterceptor(HandlerInterceptor):
    """Operator calls. ControlService calls need the admin key when one is
    set (the inference key never grants control); with none, only a local
    peer that did not come through a proxy. GetStats (the whole server's
    counters and identity) needs the admin key when one is set; with none,
    a tenant key of --api-keys-file does not get it."""

    def __init__(self, admin_key: str, *, proxies: Proxies | None = None,
                 tenant_keys: Iterable[str] = ()):
        self._key = admin_key.encode()
        self._proxies = proxies or Proxies()
        self._tenant_keys = [k.encode() for k in tenant_keys]

    def intercept(self, handler: grpc.RpcMethodHandler,
                  details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        metadata = details.invocation_metadata
        control = details.method.startswith(CONTROL_PREFIX)
        if not control and details.method != STATS_METHOD:
            return handler
        if self._key:
            if bearer_ok(metadata, self._key):
                return handler
            return _deny_like(handler, _NO_ADMIN_KEY if control else _STATS_ADMIN)
        if control:
            return _local_only(handler, self._proxies)
        if self._tenant_keys and bearer_ok(metadata, *self._tenant_keys):
            return _deny_like(handler, _STATS_NOT_FOR_TENANTS)
        return handler


_NO_KEY = Unauthenticated(
    "missing or wrong API key: send metadata 'authorization: Bearer <key>'",
    param="authorization", reason="API_KEY_INVALID",
)
_NO_ADMIN_KEY = Unauthenticated(
    "control calls need the admin key: send metadata 'authorization: Bearer <admin key>' "
    "(the inference API key does not grant control)",
    param="authorization", reason="ADMIN_KEY_REQUIRED",
)
_STATS_ADMIN = Unauthenticated(
    "GetStats describes the whole server: it needs the admin key (metadata 'authorization: "
    "Bearer <admin key>'); the inference API key does not grant it",
    param="authorization", reason="ADMIN_KEY_REQUIRED",
)
_STATS_NOT_FOR_TENANTS = PermissionDenied(
    "GetStats describes the whole server, not one tenant: a key of --api-keys-file does not "
    "grant it (call it with --admin-api-key, or --api-key)",
    param="authorization", reason="STATS_OPERATOR_ONLY",
)
_VIA_PROXY = PermissionDenied(
    "control calls through a proxy (the gateway, or a --trusted-proxy peer) need the admin key: "
    "set --admin-api-key and send 'authorization: Bearer <admin key>', or call the server "
    "directly from its own host",
    param="authorization", reason="CONTROL_VIA_PROXY",
)
_NOT_LOCAL = PermissionDenied(
    "control calls are allowed from loopback only when no --admin-api-key is set",
    param="authorization", reason="CONTROL_LOOPBACK_ONLY",
)


def _local_only(handler: grpc.RpcMethodHandler, proxies: Proxies) -> grpc.RpcMethodHandler:
    """The handler, first checking that the caller is on this host and did
    not come through a proxy (behind one, every caller is a local peer)."""

    async def check(request: Any, context: grpc.aio.ServicerContext) -> None:
        peer = context.peer()
        if proxies.proxied(context.invocation_metadata(), peer):
            await abort_with(context, _VIA_PROXY)
        if not is_local_peer(peer):
            await abort_with(context, _NOT_LOCAL)

    return wrap_handler(handler, check)


def _deny_like(handler: grpc.RpcMethodHandler, err: TokenwireError) -> grpc.RpcMethodHandler:
    """The handler's shape (cardinality, serializers), every call refused with `err`."""

    async def deny(request: Any, context: grpc.aio.ServicerContext) -> None:
        await abort_with(context, err)

    return wrap_handler(handler, deny)
