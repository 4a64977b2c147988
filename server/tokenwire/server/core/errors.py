"""Errors and their mapping to gRPC status codes: the one place for both.

Every error names its cause in a ``reason`` (AIP-193: UPPER_SNAKE_CASE,
unique within the domain ``tokenwire.dev``, e.g. ``PROMPT_TOO_LONG``,
``VALUE_OUT_OF_RANGE``, ``UNKNOWN_EXTRA_FIELD``; the full list is in
docs/contract.md) and, when a request field is at fault, the field in
``param``. A failed call carries them twice:

* as the rich status (grpcio-status): ``google.rpc.Status`` with an
  ``ErrorInfo`` (reason, domain, metadata ``param``), a ``BadRequest``
  field violation for INVALID_ARGUMENT with a field, and a ``RetryInfo``
  when a retry may succeed, in ``grpc-status-details-bin``;
* as plain trailers (``tokenwire-reason``, ``tokenwire-param``,
  ``retry-after-ms``) that a proxy reads like ``grpc-status`` without
  decoding protobuf: the gateway renders OpenAI's error body from them.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

import grpc
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status

from tokenwire.wire import PARAM_TRAILER, REASON_TRAILER, RETRY_SAFE_TRAILER, RETRY_TRAILER

log = logging.getLogger("tokenwire.errors")

DOMAIN = "tokenwire.dev"
# Plain trailers beside grpc-status (REASON_TRAILER, PARAM_TRAILER,
# RETRY_TRAILER; see the module docstring) and RETRY_SAFE_TRAILER, the mark of
# a refusal before any engine work that a fleet gateway may retry on another
# replica (gateway/config.py): names from tokenwire.wire.
RETRY_SAFE_REASONS = frozenset({
    "NOT_SERVING", "TOO_MANY_REQUESTS", "TOO_MANY_TOKENS", "ENGINE_FULL", "WEIGHT_VERSION_BEHIND",
    "WEIGHT_VERSION_MISMATCH", "WEIGHT_LAG_BEHIND",  # weight bounds (core/weight_bounds.py)
})


class TokenwireError(Exception):
    """An error with a gRPC status code, a reason and the field at fault."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL

    def __init__(
        self,
        message: str,
        *,
        reason: str,
        param: str | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.reason = reason  # the cause, UPPER_SNAKE_CASE (AIP-193)
        self.param = param
        self.retry_after = retry_after  # seconds; sent as google.rpc.RetryInfo


class InvalidArgument(TokenwireError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFound(TokenwireError):
    code = grpc.StatusCode.NOT_FOUND


class AlreadyExists(TokenwireError):
    code = grpc.StatusCode.ALREADY_EXISTS


class DeadlineExceeded(TokenwireError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class Cancelled(TokenwireError):
    code = grpc.StatusCode.CANCELLED


class FailedPrecondition(TokenwireError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhausted(TokenwireError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class Unavailable(TokenwireError):
    code = grpc.StatusCode.UNAVAILABLE


ENGINE_DEAD_RETRY_SECONDS = 1.0  # `tokenwire up` restarts the replica; a fleet has others


def engine_dead(message: str) -> Unavailable:
    """The engine core died under a call: UNAVAILABLE `ENGINE_DEAD` with a
    RetryInfo delay. A retry is safe (generation changes nothing on the
    server; the failed call's ids never reached its caller as a result)
    and may succeed: on another replica, or here once `tokenwire up` has
    started the replica again."""
    return Unavailable(message, reason="ENGINE_DEAD", retry_after=ENGINE_DEAD_RETRY_SECONDS)


class Unauthenticated(TokenwireError):
    code = grpc.StatusCode.UNAUTHENTICATED


class PermissionDenied(TokenwireError):
    code = grpc.StatusCode.PERMISSION_DENIED


class Internal(TokenwireError):
    code = grpc.StatusCode.INTERNAL


class Unimplemented(TokenwireError):
    code = grpc.StatusCode.UNIMPLEMENTED


def _packed(message: Any) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def to_status(err: TokenwireError) -> grpc.Status:
    """The rich status (grpcio-status) plus the plain trailers for `err`."""
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN)
    plain = [(REASON_TRAILER, err.reason)]
    if err.param:
        info.metadata["param"] = err.param
        plain.append((PARAM_TRAILER, err.param.encode("ascii", "backslashreplace").decode()))
    details = [_packed(info)]
    if err.param and err.code == grpc.StatusCode.INVALID_ARGUMENT:
        violation = error_details_pb2.BadRequest.FieldViolation(
            field=err.param, description=err.message, reason=err.reason
        )
        details.append(_packed(error_details_pb2.BadRequest(field_violations=[violation])))
    if err.retry_after is not None:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromMilliseconds(int(err.retry_after * 1000))
        details.append(_packed(retry))
        plain.append((RETRY_TRAILER, str(int(err.retry_after * 1000))))
    if err.reason in RETRY_SAFE_REASONS:
        plain.append((RETRY_SAFE_TRAILER, "1"))
    status = rpc_status.to_status(
        status_pb2.Status(code=err.code.value[0], message=err.message, details=details)
    )
    return _WithTrailers(status.code, status.details, (*status.trailing_metadata, *plain))


class _WithTrailers(grpc.Status):
    def __init__(self, code: grpc.StatusCode, details: str, trailing_metadata: tuple) -> None:
        self.code = code
        self.details = details
        self.trailing_metadata = trailing_metadata


def classify(exc: BaseException) -> TokenwireError:
    """Turn any exception from below the servicer into a TokenwireError."""
    if isinstance(exc, TokenwireError):
        return exc
    # The engine adapter raises TokenwireError subclasses for engine errors
    # it recognises; anything else is a bug: report INTERNAL, log the trace.
    # The caller gets an id to quote, never the exception text (it may hold
    # paths or data of other requests); the log has the trace under that id.
    incident = uuid.uuid4().hex[:12]
    log.exception("internal error %s", incident, exc_info=exc)
    return Internal(f"internal error (incident {incident}; details are in the server log)",
                    reason="INTERNAL")


async def abort_with(context: grpc.aio.ServicerContext, err: TokenwireError) -> None:
    await context.abort_with_status(to_status(err))


T = TypeVar("T")


def unary_errors(
    fn: Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[T]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[T]]:
    """Map exceptions of a unary handler to a status. Cancellation passes."""

    @functools.wraps(fn)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> T:
        try:
            return await fn(self, request, context)
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            await abort_with(context, classify(exc))
            raise AssertionError("unreachable") from exc

    return wrapper


def stream_errors(
    fn: Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[T]],
) -> Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[T]]:
    """Map exceptions of a server-streaming handler to a status."""

    @functools.wraps(fn)
    async def wrapper(
        self: Any, request: Any, context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[T]:
        try:
            async for item in fn(self, request, context):
                yield item
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            await abort_with(context, classify(exc))

    return wrapper

