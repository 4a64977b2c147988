"""The characters a request's prompt brings (messages with every rendered
field, tools, template kwargs, a completion prompt), counted without
converting anything: for the cheap length limit and the off-loop threshold
(inference/offload.py)."""

from __future__ import annotations

from typing import Any

from google.protobuf import struct_pb2

from tokenwire.v1 import chat_pb2


def request_chars(req: Any) -> int:
    """The characters of a request's prompt text (prompt, or everything a
    chat template renders: rendered_chars)."""
    prompt = getattr(req, "prompt", "")
    chars = prompt_chars(prompt) if isinstance(prompt, struct_pb2.Value) else len(prompt or "")
    return chars + rendered_chars(req)[1]


def message_chars(m: chat_pb2.ChatMessage) -> int:
    """The characters of every field of a message a template renders (role,
    content, name, tool calls with their arguments, tool call id,
    reasoning), counted without converting them."""
    return (len(m.role) + content_chars(m.content) + len(m.name) + len(m.tool_call_id)
            + len(m.reasoning_content)
            + sum(len(tc.id) + len(tc.type) + len(tc.function.name) + len(tc.function.arguments)
                  for tc in m.tool_calls))


def rendered_chars(req: Any) -> tuple[str, int]:
    """What a chat template renders of a request (messages, tools,
    chat_template_kwargs), counted without converting it (tools and kwargs
    by their protobuf size, close to their JSON): the field that brings the
    most, and the total. For the cheap length limit and the off-loop
    threshold."""
    kwargs = getattr(req, "chat_template_kwargs", None)
    parts = {
        "messages": sum(message_chars(m) for m in getattr(req, "messages", ())),
        "tools": sum(t.ByteSize() for t in getattr(req, "tools", ())),
        "chat_template_kwargs": kwargs.ByteSize() if kwargs is not None else 0,
    }
    return max(parts, key=lambda name: parts[name]), sum(parts.values())


def prompt_chars(value: struct_pb2.Value) -> int:
    """Characters of a completion `prompt` (its strings; an id counts as
    one), counted without converting it."""
    if value.HasField("string_value"):
        return len(value.string_value)
    total = 0
    for item in value.list_value.values if value.HasField("list_value") else ():
        if item.HasField("string_value"):
            total += len(item.string_value)
        elif item.HasField("list_value"):
            total += len(item.list_value.values)
        else:
            total += 1
    return total


def content_chars(content: struct_pb2.Value) -> int:
    """The characters of a message's content (a string or text parts),
    counted without converting it: for the cheap length limit."""
    if content.HasField("string_value"):
        return len(content.string_value)
    if content.HasField("list_value"):
        return sum(len(part.struct_value.fields["text"].string_value)
                   for part in content.list_value.values
                   if part.HasField("struct_value") and "text" in part.struct_value.fields)
    return 0
