"""Errors and their mapping to gRPC status codes: the one place for both.

Every error the server reports carries a ``google.rpc.ErrorInfo`` detail
(domain "tokenwire", a machine-readable reason, and metadata ``param``
naming the offending request field) packed in ``grpc-status-details-bin``,
so the gateway and clients can render the OpenAI error shape
``{"error": {"message", "type", "param", "code"}}``.
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
from google.rpc import code_pb2, error_details_pb2, status_pb2

log = logging.getLogger("tokenwire.errors")

DOMAIN = "tokenwire"


class TokenwireError(Exception):
    """An error with a gRPC status code, a reason and the field at fault."""

    code: grpc.StatusCode = grpc.StatusCode.INTERNAL
    reason: str = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        reason: str | None = None,
        retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        self.param = param
        self.retry_after = retry_after  # seconds; sent as google.rpc.RetryInfo
        if reason is not None:
            self.reason = reason


class InvalidArgument(TokenwireError):
    code = grpc.StatusCode.INVALID_ARGUMENT
    reason = "INVALID_ARGUMENT"


class NotFound(TokenwireError):
    code = grpc.StatusCode.NOT_FOUND
    reason = "NOT_FOUND"


class AlreadyExists(TokenwireError):
    code = grpc.StatusCode.ALREADY_EXISTS
    reason = "ALREADY_EXISTS"


class DeadlineExceeded(TokenwireError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED
    reason = "DEADLINE_EXCEEDED"


class Cancelled(TokenwireError):
    code = grpc.StatusCode.CANCELLED
    reason = "CANCELLED"


class FailedPrecondition(TokenwireError):
    code = grpc.StatusCode.FAILED_PRECONDITION
    reason = "FAILED_PRECONDITION"


class ResourceExhausted(TokenwireError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED
    reason = "RESOURCE_EXHAUSTED"


class Unavailable(TokenwireError):
    code = grpc.StatusCode.UNAVAILABLE
    reason = "UNAVAILABLE"


class Internal(TokenwireError):
    code = grpc.StatusCode.INTERNAL
    reason = "INTERNAL"


def to_rich_status(err: TokenwireError) -> status_pb2.Status:
    info = error_details_pb2.ErrorInfo(reason=err.reason, domain=DOMAIN)
    if err.param:
        info.metadata["param"] = err.param
    details = [any_pb2.Any()]
    details[0].Pack(info)
    if err.retry_after is not None:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromMilliseconds(int(err.retry_after * 1000))
        details.append(any_pb2.Any())
        details[1].Pack(retry)
    code_value = err.code.value[0]
    return status_pb2.Status(code=code_value, message=err.message, details=details)


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
    return Internal(f"internal error (incident {incident}; details are in the server log)")


async def abort_with(context: grpc.aio.ServicerContext, err: TokenwireError) -> None:
    status = to_rich_status(err)
    metadata = (("grpc-status-details-bin", status.SerializeToString()),)
    context.set_trailing_metadata(metadata)
    await context.abort(err.code, err.message)


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
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[T]:
        try:
            async for item in fn(self, request, context):
                yield item
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            await abort_with(context, classify(exc))

    return wrapper


def code_name(code: int) -> str:
    return code_pb2.Code.Name(code)
