"""What a call's gRPC metadata says about it: the session and data-parallel
rank it names, the weight version it needs, and who calls (tenant and
priority range; the tenant it names counts only from a trusted hop, auth.Proxies).
Shared by every servicer."""

from __future__ import annotations

import dataclasses

import grpc

from tokenwire.server.core.domain import Caller
from tokenwire.server.core.errors import Unavailable
from tokenwire.server.core.weight_bounds import WeightBound, bound_from_text
from tokenwire.server.core.weight_versions import check_header_version
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.security.auth import proxies_of
from tokenwire.wire import (
    DP_RANK_HEADERS,
    EXACT_VERSION_HEADER,
    MAX_LAG_HEADER,
    MIN_VERSION_HEADER,
    SESSION_HEADER,
)

REQUEST_ID_HEADER = "x-request-id"  # vLLM's X-Request-Id (Envoy sets one on every call)


def _first(context: grpc.aio.ServicerContext, names: tuple[str, ...],
           empty: bool = False) -> str | None:
    """The first value of one of `names` (an empty one too when `empty`)."""
    for key, value in context.invocation_metadata() or ():
        if key in names and (value or empty):
            return str(value)
    return None


def session_of(context: grpc.aio.ServicerContext) -> str | None:
    """The x-session-id metadata (X-Session-ID header), if any."""
    return _first(context, (SESSION_HEADER,))


def dp_rank_of(context: grpc.aio.ServicerContext) -> str | None:
    """The data-parallel rank metadata (vLLM's or Dynamo's name), if any."""
    return _first(context, DP_RANK_HEADERS)


def min_version_of(context: grpc.aio.ServicerContext) -> str | None:
    """The x-min-weight-version metadata (X-Min-Weight-Version header), if
    any; one longer than a version name can be is refused naming it."""
    value = _first(context, (MIN_VERSION_HEADER,))
    return None if value is None else check_header_version(value, MIN_VERSION_HEADER)


def bound_of(context: grpc.aio.ServicerContext) -> WeightBound | None:
    """The weight bound the x-exact-weight-version / x-max-weight-lag
    metadata asks for (core/weight_bounds.py), if any; bad values are
    refused naming the header."""
    exact = _first(context, (EXACT_VERSION_HEADER,), empty=True)  # (an empty bound is refused)
    lag = _first(context, (MAX_LAG_HEADER,), empty=True)
    if exact is None and lag is None:
        return None
    return bound_from_text(exact, lag, exact_param=EXACT_VERSION_HEADER, lag_param=MAX_LAG_HEADER)


def request_id_of(context: grpc.aio.ServicerContext) -> str | None:
    """The call's x-request-id metadata (vLLM's X-Request-Id), if any."""
    return _first(context, (REQUEST_ID_HEADER,))


def with_request_id(caller: Caller, context: grpc.aio.ServicerContext) -> Caller:
    """`caller` carrying its call's x-request-id: for a call of one request
    (not a Session, whose requests would share it)."""
    header = request_id_of(context)
    return caller if header is None else dataclasses.replace(caller, request_id=header)


async def caller_of(plane: DataPlane, context: grpc.aio.ServicerContext) -> Caller:
    """Who calls (tenant, priority range, the weight bound its metadata
    asks for); refuses, retry-safe, a call that
    needs newer weights than this replica serves (x-min-weight-version): a
    fleet gateway then tries another replica. A serving process that mirrors
    another's control state reads it again before refusing."""
    required = min_version_of(context)
    state = plane.state
    if required is not None and not state.serves_at_least(required):
        if state.refresh is not None:
            await state.refresh()
        if not state.serves_at_least(required):
            raise Unavailable(
                f"this replica serves weight version '{state.weight_version}'; the request "
                f"needs '{required}' or newer", param=MIN_VERSION_HEADER,
                reason="WEIGHT_VERSION_BEHIND",
            )
    trusted_hop = (plane.tenancy.trust_tenant_header
                   and proxies_of(plane.settings.trusted_proxy).may_name_tenant(context.peer()))
    caller = plane.tenancy.caller(context.invocation_metadata(), trusted_hop=trusted_hop)
    bound = bound_of(context)
    return caller if bound is None else dataclasses.replace(caller, weight_bound=bound)
