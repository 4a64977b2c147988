"""The Responses API's wire: OpenAI's Response JSON and its Server-Sent
Events, rendered once by the server (EventStreamService's Responses calls;
api/fronts.py runs them as `WIRE`): an event is
``event: <type>\\ndata: {json}\\n\\n`` (no ``[DONE]``: response.completed
ends the stream, as OpenAI and vLLM send it), and a failure after the
first event is an ``error`` event with OpenAI's error fields (code,
message, param) and its sequence number."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core.errors import TokenwireError
from tokenwire.server.inference.responses.response import response_object
from tokenwire.server.inference.shared.openai_wire import error_body
from tokenwire.server.inference.shared.proto_json import encode_json
from tokenwire.server.inference.shared.wire import Wire

CONTENT_TYPE = "text/event-stream"


def event(body: dict[str, Any]) -> bytes:
    """One event: its `type` names it."""
    return b"event: " + body["type"].encode() + b"\ndata: " + encode_json(body) + b"\n\n"


def error_fields(err: TokenwireError) -> dict[str, Any]:
    """The fields of OpenAI's stream error event for `err`."""
    inner = error_body(err)["error"]
    return {"code": inner["code"], "message": inner["message"], "param": inner["param"]}


def _json(resp: Any) -> bytes:
    """A unary answer as OpenAI's Response JSON (every field it requires)."""
    return encode_json(response_object(resp))


def _error_event(err: TokenwireError, last: dict[str, Any] | None) -> bytes:
    """The `error` event, numbered after the last event sent."""
    seq = 0 if last is None else last["sequence_number"] + 1
    return event({"type": "error", "sequence_number": seq, **error_fields(err)})


# The Responses front's REST codecs; response.completed ends the stream.
WIRE = Wire(json=_json, event=event, error_event=_error_event)
