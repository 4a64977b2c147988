"""The Messages API's wire: Anthropic's Message JSON, Server-Sent Events
and error objects, rendered once by the server (EventStreamService's
Messages calls; api/fronts.py runs them as `WIRE`): an event is
``event: <type>\\ndata: {json}\\n\\n`` (no ``[DONE]``: message_stop ends the
stream), and a failure after the first event is an ``error`` event with
Anthropic's error object, typed as gateway/lua/anthropic_error.lua types
a failed call (tokenwire.wire's ANTHROPIC_ERROR_TYPES)."""

from __future__ import annotations

from typing import Any

from tokenwire import wire
from tokenwire.server.core.errors import TokenwireError
from tokenwire.server.inference.anthropic.response import message_object
from tokenwire.server.inference.shared.openai_wire import HTTP_STATUS
from tokenwire.server.inference.shared.proto_json import encode_json
from tokenwire.server.inference.shared.wire import Wire

CONTENT_TYPE = "text/event-stream"


def event(body: dict[str, Any]) -> bytes:
    """One event: its `type` names it."""
    return b"event: " + body["type"].encode() + b"\ndata: " + encode_json(body) + b"\n\n"


def error_body(err: TokenwireError) -> dict[str, Any]:
    """Anthropic's error object for `err` (the field at fault leads the
    message when the message does not name it)."""
    http = HTTP_STATUS.get(err.code, wire.UNKNOWN_HTTP_STATUS)
    message = err.message
    if err.param and err.param not in message:
        message = f"{err.param}: {message}"
    return {"type": "error",
            "error": {"type": wire.anthropic_error_type(http), "message": message}}


def error_event(err: TokenwireError) -> bytes:
    """The error event that ends a started stream."""
    return event(error_body(err))


def _json(resp: Any) -> bytes:
    """A unary answer as Anthropic's Message JSON (every field it requires)."""
    return encode_json(message_object(resp))


# The Messages front's REST codecs; message_stop ends the stream.
WIRE = Wire(json=_json, event=event, error_event=lambda err, last: error_event(err))
