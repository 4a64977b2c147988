"""OpenAI's Responses Server-Sent Events, rendered once by the server
(EventStreamService.StreamResponseEvents): an event is
``event: <type>\\ndata: {json}\\n\\n`` (no ``[DONE]``: response.completed
ends the stream, as OpenAI and vLLM send it), and a failure after the
first event is an ``error`` event with OpenAI's error fields (code,
message, param) and its sequence number."""

from __future__ import annotations

from typing import Any

from tokenwire.server.api.proto_json import encode_json
from tokenwire.server.api.sse import error_body
from tokenwire.server.core.errors import TokenwireError

CONTENT_TYPE = "text/event-stream"


def event(body: dict[str, Any]) -> bytes:
    """One event: its `type` names it."""
    return b"event: " + body["type"].encode() + b"\ndata: " + encode_json(body) + b"\n\n"


def error_fields(err: TokenwireError) -> dict[str, Any]:
    """The fields of OpenAI's stream error event for `err`."""
    inner = error_body(err)["error"]
    return {"code": inner["code"], "message": inner["message"], "param": inner["param"]}
