"""Hermes-style tool-call parsing, alone and through the servicer."""

from __future__ import annotations

import json

from tests.rpc import chat_request, stream_ids
from tokenwire.server.inference.tool_calls import StreamParser, parse_text

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]


def test_parse_text_splits_content_and_calls() -> None:
    content, calls = parse_text("Sure." + CALL)
    assert content == "Sure."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    content, calls = parse_text("<tool_call>not json</tool_call>")
    assert calls == [] and content == "<tool_call>not json</tool_call>"


def test_stream_parser_any_split() -> None:
    text = "Sure." + CALL + " done"
    for size in (1, 2, 3, 7, 100):
        parser = StreamParser()
        content, names = "", []
        for i in range(0, len(text), size):
            delta, calls = parser.feed(text[i : i + size])
            content += delta
            names += [c.name for c in calls]
        content += parser.flush()
        assert content == "Sure. done" and names == ["get_weather"], size


def test_unary_tool_calls(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(
        chat_request(tools=TOOLS, return_token_ids=True), timeout=10
    )
    c = resp.choices[0]
    assert c.finish_reason == "tool_calls"
    assert c.message.content == "Let me check."
    call = c.message.tool_calls[0]
    assert call.type == "function" and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert call.id.startswith("call_")
    # ids are untouched by parsing
    assert c.token_ids[-1] == 2


def test_stream_tool_calls_and_ids(fake_stub, fake_engine) -> None:
    req = chat_request(tools=TOOLS, return_token_ids=True)
    unary = fake_stub.CreateChatCompletion(req, timeout=10)
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    assert stream_ids(chunks)[0] == list(unary.choices[0].token_ids)
    text = "".join(ch.delta.content for c in chunks for ch in c.choices)
    calls = [tc for c in chunks for ch in c.choices for tc in ch.delta.tool_calls]
    assert text == "Let me check."
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].function.name == "get_weather"
    finals = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finals == ["tool_calls"]


def test_tool_choice_none_leaves_text(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(tools=TOOLS, tool_choice="none"), timeout=10)
    assert "<tool_call>" in resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "stop"
