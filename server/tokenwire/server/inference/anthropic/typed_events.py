"""Anthropic's streamed events (response.py's dicts) as the typed
MessageStreamEvent of StreamMessage (gRPC): the same fields, so the typed
event's proto3 JSON is the dict with its nulls, empty strings and empty
lists left out (proto3 JSON reads those back as unset).

An event's keys are the message's field names, nested dicts its
sub-messages, so the message is built by its constructor in one call: about
2 µs for a text delta, where json_format.ParseDict of the dict costs about
55 µs."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from tokenwire.v1 import anthropic_pb2

_EVENT = anthropic_pb2.MessageStreamEvent


def typed_event(event: dict[str, Any]) -> anthropic_pb2.MessageStreamEvent:
    """`event` (message_start, ping, content_block_start / _delta / _stop,
    message_delta, message_stop) as a MessageStreamEvent. A key the message
    has no field for is left out (tests hold every key the kind yields to a
    field)."""
    try:
        return _EVENT(**event)
    except (ValueError, TypeError):  # a key without a field, a Value: the slow path
        return json_format.ParseDict(event, _EVENT(), ignore_unknown_fields=True)
