"""Typed exceptions for tokenwire errors, mapped from gRPC status codes.

Every error the server reports carries a ``google.rpc.ErrorInfo`` (a
``reason`` naming the cause, e.g. ``PROMPT_TOO_LONG``, and ``metadata.param``,
the request field at fault; read with grpcio-status); these exceptions
expose both. Per-request errors inside a Session
stream map to the same classes.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.rpc import error_details_pb2, status_pb2
from grpc_status import rpc_status


class TokenwireError(Exception):
    """A failed call: status code, message, ErrorInfo reason and param."""

    code: grpc.StatusCode = grpc.StatusCode.UNKNOWN

    def __init__(
        self, message: str, *, code: grpc.StatusCode | None = None, reason: str = "",
        param: str = "", metadata: dict[str, str] | None = None, retry_after: float | None = None,
    ):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.reason = reason
        self.param = param
        self.metadata = dict(metadata or {})
        self.retry_after = retry_after  # seconds, from google.rpc.RetryInfo

    def __str__(self) -> str:
        where = f" (param {self.param})" if self.param else ""
        reason = f" [{self.reason}]" if self.reason else ""
        return f"{self.code.name}{reason}: {self.message}{where}"


class InvalidArgumentError(TokenwireError):
    code = grpc.StatusCode.INVALID_ARGUMENT


class NotFoundError(TokenwireError):
    code = grpc.StatusCode.NOT_FOUND


class FailedPreconditionError(TokenwireError):
    code = grpc.StatusCode.FAILED_PRECONDITION


class ResourceExhaustedError(TokenwireError):
    code = grpc.StatusCode.RESOURCE_EXHAUSTED


class UnavailableError(TokenwireError):
    code = grpc.StatusCode.UNAVAILABLE


class DeadlineExceededError(TokenwireError):
    code = grpc.StatusCode.DEADLINE_EXCEEDED


class RequestCancelledError(TokenwireError):
    """The request was cancelled (by this client, or its session ended)."""

    code = grpc.StatusCode.CANCELLED


class InternalError(TokenwireError):
    code = grpc.StatusCode.INTERNAL


class UnauthenticatedError(TokenwireError):
    """No or a wrong API key (`authorization: Bearer <key>`)."""

    code = grpc.StatusCode.UNAUTHENTICATED


_BY_CODE: dict[grpc.StatusCode, type[TokenwireError]] = {
    cls.code: cls
    for cls in (
        InvalidArgumentError, NotFoundError, FailedPreconditionError, ResourceExhaustedError,
        UnavailableError, DeadlineExceededError, RequestCancelledError, InternalError,
        UnauthenticatedError,
    )
}
_BY_NUMBER = {c.value[0]: c for c in grpc.StatusCode}


def error_for(
    code: grpc.StatusCode, message: str, *, reason: str = "", param: str = "",
    metadata: dict[str, str] | None = None, retry_after: float | None = None,
) -> TokenwireError:
    cls = _BY_CODE.get(code, TokenwireError)
    return cls(message, code=code, reason=reason, param=param, metadata=metadata,
               retry_after=retry_after)


def _rich_status(call: Any) -> status_pb2.Status | None:
    """The google.rpc.Status of a failed call (grpcio-status); None when the
    call has none, or a proxy changed the code or message under it."""
    try:
        return rpc_status.from_call(call)
    except (ValueError, AttributeError):
        return None


def from_rpc_error(err: grpc.RpcError) -> TokenwireError:
    """The typed exception for a failed call (sync or asyncio)."""
    call: Any = err
    code = call.code() if hasattr(call, "code") else grpc.StatusCode.UNKNOWN
    message = (call.details() if hasattr(call, "details") else None) or str(err)
    reason, metadata, retry_after = "", {}, None
    status = _rich_status(call)
    for detail in status.details if status is not None else ():
        info = error_details_pb2.ErrorInfo()
        retry = error_details_pb2.RetryInfo()
        if detail.Unpack(info):
            reason, metadata = info.reason, dict(info.metadata)
        elif detail.Unpack(retry):
            retry_after = retry.retry_delay.ToMilliseconds() / 1000.0
    return error_for(
        code, message, reason=reason, param=metadata.get("param", ""), metadata=metadata,
        retry_after=retry_after,
    )


def from_session_error(error: Any) -> TokenwireError:
    """The typed exception for a Session `error` event (SessionRequestError)."""
    code = _BY_NUMBER.get(int(error.code), grpc.StatusCode.UNKNOWN)
    return error_for(code, error.message, reason=error.reason, param=error.param)
