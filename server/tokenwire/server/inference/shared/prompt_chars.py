"""The characters a request's prompt brings (messages with every rendered
field, tools, template kwargs, a completion prompt), counted without
converting anything: for the cheap length limit; the weight of a body of
any shape found by a bounded look (`weighs_over`: the off-loop threshold,
inference/offload.py); the text a content-block body (Messages, Responses)
holds at least (`block_text_chars`: its length limit before converting it)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from google.protobuf import message, struct_pb2

from tokenwire.v1 import chat_pb2


def message_chars(m: chat_pb2.ChatMessage) -> int:
    """The characters of every field of a message a template renders (role,
    content, name, tool calls with their arguments, tool call id,
    reasoning), counted without converting them."""
    return (len(m.role) + content_chars(m.content) + len(m.name) + len(m.tool_call_id)
            + len(m.reasoning_content) + len(m.reasoning)
            + sum(len(tc.id) + len(tc.type) + len(tc.function.name) + len(tc.function.arguments)
                  for tc in m.tool_calls))


def rendered_chars(req: Any) -> tuple[str, int]:
    """What a chat template renders of a request (messages, tools,
    chat_template_kwargs), counted without converting it (tools and kwargs
    by their protobuf size, close to their JSON): the field that brings the
    most, and the total. For the cheap length limit."""
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


# How many items (fields, list entries, messages, blocks) `weighs_over`
# looks at before it calls a body heavy: looking at more would itself be
# work on the event loop (a few ms at most here); an ordinary conversation's
# text reaches OFFLOAD_CHARS first.
NODES = 1024
_END = object()


def _children(item: message.Message) -> Iterator[Any]:
    """The values of a message's set fields (a map's keys and values, a
    repeated field's entries), lazily: a field of many entries costs only
    the entries looked at."""
    for _, value in item.ListFields():
        if isinstance(value, message.Message | str | bytes | int | float):
            yield value
        elif hasattr(value, "items"):  # a map
            for key, entry in value.items():
                yield key
                yield entry
        else:  # a repeated field
            yield from value


def weighs_over(parts: Iterable[Any], chars: int, nodes: int = NODES) -> bool:
    """Whether `parts` (strings, protobuf messages: every string in them
    counts, a number as one character, as an id does) hold over `chars`
    characters, found by looking at `nodes` items at most: a body with more
    items than that (messages, blocks, inputs, documents) counts as over.
    Cheap at any body size: the off-loop threshold of a body of any shape."""
    total = seen = 0
    stack: list[Iterator[Any]] = [iter(parts)]
    value = struct_pb2.Value
    while stack:
        item: Any = next(stack[-1], _END)
        if item is _END:
            stack.pop()
            continue
        seen += 1
        if seen > nodes:
            return True
        kind = type(item)
        if kind is str or kind is bytes:
            total += len(item)
        elif kind is value:  # (the common node: read directly)
            which = item.WhichOneof("kind")
            if which == "string_value":
                total += len(item.string_value)
            elif which == "list_value":
                stack.append(iter(item.list_value.values))
            elif which == "struct_value":
                stack.append(iter(item.struct_value.fields.values()))
            else:
                total += 1
        elif isinstance(item, message.Message):
            stack.append(_children(item))
        else:
            total += 1
        if total > chars:
            return True
    return False


def block_text_chars(values: Iterable[struct_pb2.Value | str]) -> int:
    """The characters of text a content-block body (Messages' system and
    message contents, Responses' instructions and input) holds at least: its
    strings, its blocks' `text`, and what their `content` holds (a tool
    result's, an input item's), all of which a chat template renders; what
    a block holds otherwise (images, tool inputs) is not counted. Never more
    than the chat it converts to counts (prompt_chars.rendered_chars), so a
    body refused by it would be refused as that chat."""
    total = 0
    stack: list[Any] = list(values)
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            total += len(value)
            continue
        kind = value.WhichOneof("kind")
        if kind == "string_value":
            total += len(value.string_value)
        elif kind == "list_value":
            stack.extend(value.list_value.values)
        elif kind == "struct_value":
            fields = value.struct_value.fields
            for key in ("text", "content"):
                if key in fields:
                    stack.append(fields[key])
    return total
