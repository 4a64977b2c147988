"""API-key check on gRPC metadata (`authorization: Bearer <key>`).

Constant-time comparison; health and reflection stay reachable without the
key only when the settings say so. A rejected call gets UNAUTHENTICATED
with an ErrorInfo (reason "API_KEY_INVALID", param "authorization").
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from tokenwire.server.errors import PermissionDenied, TokenwireError, Unauthenticated, abort_with
from tokenwire.server.tenancy import bearer_token

OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")
OPEN_METHODS = ("/tokenwire.v1.TokenwireService/GetHealth",)
CONTROL_PREFIX = "/tokenwire.v1.ControlService/"
LOOPBACK_PEERS = ("ipv4:127.", "ipv6:[::1]", "unix:")


def bearer_ok(metadata: Any, *keys: bytes) -> bool:
    """Whether the bearer token is one of `keys` (each compared in constant time)."""
    token = bearer_token(metadata)
    if token is None:
        return False
    return sum(hmac.compare_digest(token, key) for key in keys) > 0


def is_open(method: str, open_probes: bool) -> bool:
    return open_probes and (method.startswith(OPEN_PREFIXES) or method in OPEN_METHODS)


class ApiKeyInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, api_keys: list[str], *, open_probes: bool):
        self._keys = [k.encode() for k in api_keys]
        self._open_probes = open_probes

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or is_open(details.method, self._open_probes):
            return handler
        if details.method.startswith(CONTROL_PREFIX):  # the admin credential's business
            return handler
        if bearer_ok(details.invocation_metadata, *self._keys):
            return handler
        return _deny_like(handler, _NO_KEY)


class ControlAccessInterceptor(grpc.aio.ServerInterceptor):
    """ControlService calls need the admin key when one is set (the
    inference key never grants control); with none, only loopback peers."""

    def __init__(self, admin_key: str):
        self._key = admin_key.encode()

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None or not details.method.startswith(CONTROL_PREFIX):
            return handler
        if self._key:
            if bearer_ok(details.invocation_metadata, self._key):
                return handler
            return _deny_like(handler, _NO_ADMIN_KEY)
        return _loopback_only(handler)


_NO_KEY = Unauthenticated(
    "missing or wrong API key: send metadata 'authorization: Bearer <key>'",
    param="authorization", reason="API_KEY_INVALID",
)
_NO_ADMIN_KEY = Unauthenticated(
    "control calls need the admin key: send metadata 'authorization: Bearer <admin key>' "
    "(the inference API key does not grant control)",
    param="authorization", reason="ADMIN_KEY_REQUIRED",
)


def _loopback_only(handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
    """A unary handler that first checks the peer is on this host."""
    inner = handler.unary_unary
    assert inner is not None, "ControlService methods are unary"
    err = PermissionDenied(
        "control calls are allowed from loopback only when no --admin-api-key is set",
        param="authorization", reason="CONTROL_LOOPBACK_ONLY",
    )

    async def check(request: Any, context: grpc.aio.ServicerContext) -> Any:
        if not str(context.peer() or "").startswith(LOOPBACK_PEERS):
            await abort_with(context, err)
        return await inner(request, context)

    return grpc.unary_unary_rpc_method_handler(
        check, request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )


def _deny_like(handler: grpc.RpcMethodHandler, err: TokenwireError) -> grpc.RpcMethodHandler:

    async def deny(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await abort_with(context, err)

    async def deny_stream(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await abort_with(context, err)
        yield  # pragma: no cover - makes this an async generator

    kwargs = dict(
        request_deserializer=handler.request_deserializer,
        response_serializer=handler.response_serializer,
    )
    if handler.unary_unary:
        return grpc.unary_unary_rpc_method_handler(deny, **kwargs)
    if handler.unary_stream:
        return grpc.unary_stream_rpc_method_handler(deny_stream, **kwargs)
    if handler.stream_unary:
        return grpc.stream_unary_rpc_method_handler(deny, **kwargs)
    return grpc.stream_stream_rpc_method_handler(deny_stream, **kwargs)
