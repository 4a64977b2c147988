"""OpenAI Server-Sent Events, rendered once by the server (EventStreamService).

A stream chunk becomes ``data: {json}\\n\\n`` with the JSON the gateway's
transcoder would print for it (proto_json), plus ``"choices": []`` when the
chunk has none (OpenAI always prints the key; the openai SDK reads a missing
one as ``None``). The stream ends with ``data: [DONE]\\n\\n``; a failure after
the first event is an OpenAI error event before it, with the fields
gateway/lua/openai_error.lua renders for a failed call (a test holds the two
renderings equal for every status code).
"""

from __future__ import annotations

import grpc
from google.protobuf.message import Message

from tokenwire.server.api.proto_json import encode_json, to_object
from tokenwire.server.core.errors import TokenwireError

CONTENT_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"

# gRPC code -> HTTP status, as the gateway maps a failed call.
HTTP_STATUS = {
    grpc.StatusCode.OK: 200, grpc.StatusCode.CANCELLED: 499, grpc.StatusCode.UNKNOWN: 500,
    grpc.StatusCode.INVALID_ARGUMENT: 400, grpc.StatusCode.DEADLINE_EXCEEDED: 504,
    grpc.StatusCode.NOT_FOUND: 404, grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.PERMISSION_DENIED: 403, grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.FAILED_PRECONDITION: 400, grpc.StatusCode.ABORTED: 409,
    grpc.StatusCode.OUT_OF_RANGE: 400, grpc.StatusCode.UNIMPLEMENTED: 501,
    grpc.StatusCode.INTERNAL: 500, grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DATA_LOSS: 500, grpc.StatusCode.UNAUTHENTICATED: 401,
}


def error_type(http: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    if http in (400, 404, 409, 413):
        return "invalid_request_error"
    if http == 401:
        return "authentication_error"
    if http == 403:
        return "permission_error"
    if http == 429:
        return "rate_limit_error"
    return "server_error"


def chunk_event(chunk: Message) -> bytes:
    """The event for one stream chunk."""
    body = to_object(chunk)
    if "choices" not in body:
        body = {"choices": [], **body}
    return b"data: " + encode_json(body) + b"\n\n"


def error_body(err: TokenwireError) -> dict[str, dict[str, str | None]]:
    """OpenAI's error object for `err`."""
    http = HTTP_STATUS.get(err.code, 500)
    return {"error": {
        "message": err.message, "type": error_type(http), "param": err.param or None,
        "code": err.reason.lower() if err.reason else err.code.name.lower(),
    }}


def error_event(err: TokenwireError) -> bytes:
    """The error event that ends a started stream (DONE follows it)."""
    return b"data: " + encode_json(error_body(err)) + b"\n\n"
