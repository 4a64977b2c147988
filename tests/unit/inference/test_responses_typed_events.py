"""StreamResponse's typed events are built by the message's constructor
where it can (inference/responses/typed_events.py typed_event): for every
event of real Responses streams on the fake engine (text, logprobs,
reasoning, a tool call), the typed event equals what json_format.ParseDict
reads from the same event."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.servers import fake_serving
from tokenwire.server.inference.responses.typed_events import typed_event
from tokenwire.v1 import events_pb2_grpc, responses_pb2

TOOL = {"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}
BODIES = [
    {"input": "Hi", "max_output_tokens": 4},
    {"input": "Hi", "max_output_tokens": 4, "top_logprobs": 2, "include": [
        "message.output_text.logprobs"]},
    {"input": "<think>hmm</think> Hi", "max_output_tokens": 6},
    {"input": "Weather in Paris?", "tools": [TOOL], "max_output_tokens": 40},
]


@pytest.fixture(scope="module")
def events_stub() -> Iterator[Any]:
    with fake_serving(served_model_name="m", reasoning_parser="fake", tool_call_parser="hermes",
                      enable_auto_tool_choice=True) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        yield events_pb2_grpc.EventStreamServiceStub(ch)


@pytest.mark.parametrize("body", BODIES)
def test_every_event_is_what_parse_dict_reads(events_stub, body) -> None:
    req = json_format.ParseDict(body, responses_pb2.CreateResponseRequest())
    data = b"".join(b.data for b in events_stub.StreamResponseEvents(req, timeout=10))
    events = [json.loads(block.split(b"data: ", 1)[1]) for block in data.split(b"\n\n") if block]
    assert events and events[-1]["type"] == "response.completed"
    for event in events:
        expected = json_format.ParseDict(event, responses_pb2.ResponseStreamEvent(),
                                         ignore_unknown_fields=True)
        assert typed_event(event) == expected, event["type"]
