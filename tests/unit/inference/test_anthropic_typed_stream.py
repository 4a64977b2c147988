"""Anthropic's streamed events as StreamMessage's typed MessageStreamEvent
(inference/anthropic/typed_events.py): for every event of real streams on
the fake engine (text, thinking, tool use, a stop sequence, max_tokens),
the typed event is the dict read as proto3 JSON (every key has a field)
and its JSON form is the dict as proto3 JSON prints it (nulls, "" and []
left out)."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.protobuf.descriptor import Descriptor, FieldDescriptor

from tokenwire.server.inference.anthropic.response import MessageEvents
from tokenwire.server.inference.anthropic.typed_events import typed_event
from tokenwire.v1 import anthropic_pb2, chat_pb2, events_pb2_grpc

TOOLS = [{"name": "get_weather", "description": "Weather of a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]
THINK = [{"role": "user", "content": "Think first."}]


def _req(**body: Any) -> anthropic_pb2.CreateMessageRequest:
    body.setdefault("max_tokens", 200)
    body.setdefault("messages", [{"role": "user", "content": "Hi"}])
    return json_format.ParseDict({**body, "stream": True}, anthropic_pb2.CreateMessageRequest())


@pytest.fixture(scope="module")
def stub(fake_server):
    with grpc.insecure_channel(fake_server.address) as ch:
        yield events_pb2_grpc.EventStreamServiceStub(ch)


def _events(stub, req) -> list[dict[str, Any]]:
    """The kind's events of a streamed call, as StreamMessageEvents writes them."""
    data = b"".join(b.data for b in stub.StreamMessageEvents(req, timeout=10)).decode()
    return [json.loads(frame.split("\ndata: ", 1)[1]) for frame in data.split("\n\n") if frame]


def _printed(value: dict[str, Any], desc: Descriptor) -> dict[str, Any]:
    """`value` (a JSON object of message `desc`) as proto3 JSON prints the
    message it reads as: a null, an empty list and a default scalar of a
    field without presence are left out; a sub-message's object is kept,
    empty or not."""
    out = {}
    for key, item in value.items():
        field = desc.fields_by_name[key]
        if item is None or item == []:
            continue
        if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.file.package != (
                "google.protobuf"):  # (a Struct's JSON is its object as is)
            if field.is_repeated:
                item = [_printed(v, field.message_type) for v in item]
            else:
                item = _printed(item, field.message_type)
        elif not field.has_presence and item == field.default_value:
            continue
        out[key] = item
    return out


def _check(events: list[dict[str, Any]]) -> None:
    assert events and events[-1]["type"] == "message_stop"
    desc = anthropic_pb2.MessageStreamEvent.DESCRIPTOR
    for event in events:
        typed = typed_event(event)
        assert typed == json_format.ParseDict(event, anthropic_pb2.MessageStreamEvent())
        assert json_format.MessageToDict(
            typed, preserving_proto_field_name=True) == _printed(event, desc), event


STREAMS = {
    "text": _req(),
    "thinking": _req(messages=THINK),
    "tool_use": _req(tools=TOOLS),
    "text_and_tool_use": _req(tools=TOOLS, messages=THINK),
    "stop_sequence": _req(stop_sequences=["fake"]),
    "max_tokens": _req(max_tokens=2),
}


@pytest.mark.parametrize("name", list(STREAMS))
def test_typed_events_are_the_kinds_events(stub, name) -> None:
    _check(_events(stub, STREAMS[name]))


def test_streams_cover_every_event_and_delta(stub) -> None:
    events = [e for req in STREAMS.values() for e in _events(stub, req)]
    assert {e["type"] for e in events} == {
        "message_start", "ping", "content_block_start", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"}
    assert {e["delta"]["type"] for e in events if e["type"] == "content_block_delta"} == {
        "text_delta", "thinking_delta", "signature_delta", "input_json_delta"}
    assert {e["content_block"]["type"] for e in events if e["type"] == "content_block_start"
            } == {"text", "thinking", "tool_use"}
    reasons = {(e["delta"]["stop_reason"], e["delta"]["stop_sequence"])
               for e in events if e["type"] == "message_delta"}
    assert reasons == {("end_turn", None), ("tool_use", None), ("stop_sequence", "fake"),
                       ("max_tokens", None)}


def test_typed_fields() -> None:
    """The typed events read as Anthropic's: index 0 is set, a tool_use
    block's empty input is an empty object, a null stop_reason is unset."""
    events = MessageEvents(input_tokens=7)
    chunk = chat_pb2.StreamChatCompletionResponse(id="chatcmpl-abc", model="m")
    call = chunk.choices.add().delta.tool_calls.add(index=0, id="call-1")
    call.function.name = "get_weather"
    call.function.arguments = '{"city": '
    aborted = chat_pb2.StreamChatCompletionResponse(id="chatcmpl-abc", model="m")
    aborted.choices.add(finish_reason="abort")
    usage = chat_pb2.StreamChatCompletionResponse(id="chatcmpl-abc", model="m")
    usage.usage.completion_tokens = 3
    dicts = [*events.on_chunk(chunk), *events.on_chunk(aborted), *events.on_chunk(usage)]
    _check(dicts)
    typed = [typed_event(e) for e in dicts]
    assert [t.type for t in typed] == [
        "message_start", "ping", "content_block_start", "content_block_delta",
        "content_block_stop", "message_delta", "message_stop"]
    start = typed[0].message
    assert (start.id, start.model, start.usage.input_tokens) == ("msg_abc", "m", 7)
    block = typed[2]
    assert block.HasField("index") and block.index == 0
    assert block.content_block.HasField("input") and not block.content_block.input.fields
    assert typed[3].delta.partial_json == '{"city": '
    end = typed[5]
    assert dicts[5]["delta"] == {"stop_reason": None, "stop_sequence": None}
    assert end.HasField("delta") and not end.delta.stop_reason
    assert not end.delta.HasField("stop_sequence")
    assert (end.usage.input_tokens, end.usage.output_tokens) == (7, 3)


def test_unknown_key_is_left_out() -> None:
    typed = typed_event({"type": "content_block_stop", "index": 2, "extra": 1})
    assert typed == anthropic_pb2.MessageStreamEvent(type="content_block_stop", index=2)
