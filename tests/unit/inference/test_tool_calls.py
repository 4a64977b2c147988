"""Tool calls through the configured parsers (the fake engine's Hermes-style
double, engine/fake/parsers.py), alone and through the servicer; vLLM's
shapes (ids, indices, finish reasons) and vLLM's 400s without the flags."""

from __future__ import annotations

import json

import grpc
import pytest

from tests.rpc import chat_request, error_info, stream_ids
from tests.servers import fake_serving
from tokenwire.server.core.parsing import ParserConfig, ParseSpec
from tokenwire.server.engine.fake.parsers import FakeChatParsers
from tokenwire.v1 import service_pb2_grpc

CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}
]
HERMES = ParserConfig("hermes", True, "")


def test_parse_splits_content_and_calls() -> None:
    rp = FakeChatParsers(HERMES).for_request(ParseSpec(tools=TOOLS))
    assert rp is not None
    m = rp.parse("Sure." + CALL, [], [])
    assert m.content == "Sure." and m.tool_finish
    assert [(c.name, json.loads(c.arguments)) for c in m.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert m.tool_calls[0].id.startswith("chatcmpl-tool-")
    m = rp.parse("<tool_call>not json</tool_call>", [], [])
    assert m.tool_calls == [] and m.content == "<tool_call>not json</tool_call>"


def test_stream_parser_any_split() -> None:
    text = "Sure." + CALL + " done"
    for size in (1, 2, 3, 7, 100):
        rp = FakeChatParsers(HERMES).for_request(ParseSpec(tools=TOOLS))
        assert rp is not None
        parser = rp.stream_parser([])
        content, names = "", []
        pieces = [text[i : i + size] for i in range(0, len(text), size)]
        for k, piece in enumerate(pieces):
            d = parser.delta(piece, [], finished=k == len(pieces) - 1)
            if d is not None:
                content += d.content or ""
                names += [c.name for c in d.tool_calls]
        assert content == "Sure. done" and names == ["get_weather"], size
        assert parser.tool_finish


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
    assert call.id.startswith("chatcmpl-tool-")  # vLLM's ids
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
    assert calls[0].id.startswith("chatcmpl-tool-") and calls[0].type == "function"
    finals = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finals == ["tool_calls"]


def test_tool_choice_none_leaves_text(fake_stub) -> None:
    resp = fake_stub.CreateChatCompletion(chat_request(tools=TOOLS, tool_choice="none"), timeout=10)
    assert "<tool_call>" in resp.choices[0].message.content
    assert resp.choices[0].finish_reason == "stop"


def test_named_tool_choice_is_constrained_and_parsed(fake_stub, fake_engine) -> None:
    """A named function: the output is constrained to its arguments' JSON
    (structured outputs, as vLLM), and finish_reason stays "stop"."""
    choice = {"type": "function", "function": {"name": "get_weather"}}
    fake_stub.CreateChatCompletion(chat_request(tools=TOOLS, tool_choice=choice), timeout=10)
    assert fake_engine.requests[-1].params.structured.json_schema == {"type": "object"}


@pytest.mark.parametrize("choice, message", [
    (None, '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'),
    ("auto", '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser'),
    ("required", 'tool_choice="required" requires --tool-call-parser to be set'),
])
def test_tools_without_the_flags_are_refused_as_vllm_does(choice, message) -> None:
    with fake_serving() as server, grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        fields = {"tools": TOOLS} if choice is None else {"tools": TOOLS, "tool_choice": choice}
        with pytest.raises(grpc.RpcError) as err:
            stub.CreateChatCompletion(chat_request(**fields), timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert message in err.value.details()
        assert error_info(err.value).metadata["param"] == "tool_choice"
        # tool_choice "none" with tools: the text as generated
        resp = stub.CreateChatCompletion(chat_request(tools=TOOLS, tool_choice="none"),
                                         timeout=10)
        assert "<tool_call>" in resp.choices[0].message.content
