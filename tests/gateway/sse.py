"""Helpers for reading REST responses from the gateway."""

from __future__ import annotations

import json
import re
from typing import Any

DONE = b"data: [DONE]\n\n"
CAMEL = re.compile(r"[a-z][A-Z]")


def sse_events(raw: bytes) -> list[bytes]:
    """Split an SSE body into its events, checking the framing byte for
    byte: every event is one `data: ` line followed by a blank line."""
    assert raw.endswith(b"\n\n"), raw[-200:]
    events = raw[:-2].split(b"\n\n")
    for event in events:
        assert event.startswith(b"data: "), event[:200]
        assert b"\n" not in event, event[:200]
    return [e[len(b"data: "):] for e in events]


def sse_json(raw: bytes) -> list[dict[str, Any]]:
    """The JSON chunks of a complete SSE body that ends with [DONE]."""
    events = sse_events(raw)
    assert events[-1] == b"[DONE]", events[-3:]
    return [json.loads(e) for e in events[:-1]]


def keys(value: Any) -> set[str]:
    """Every object key in a JSON value (to check field spelling)."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def camel_case_keys(value: Any) -> set[str]:
    return {k for k in keys(value) if CAMEL.search(k)}


def chat_body(content: str = "Hello there", **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": content}],
    }
    body.update(fields)
    return body
