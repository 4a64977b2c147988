"""vLLM's parsers on the real engine (#34 items 2-4): the demo model served
with `make run`'s parser flags (hermes tool calls, qwen3 reasoning);
tool_choice "required" and a named function constrained with vLLM's
structural tag and parsed back, unary and streamed, ids unchanged."""

from __future__ import annotations

import collections.abc
import json

import grpc
import pytest

from tests.conftest import REAL_SERVER_ARGS
from tests.rpc import chat_request, stream_ids
from tests.servers import ProcessServer
from tokenwire.v1 import service_pb2_grpc, tokenize_pb2

PARSERS = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes",
           "--reasoning-parser", "qwen3"]
TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "strict": True,
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}},
                   "required": ["city"], "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def stub() -> collections.abc.Iterator[service_pb2_grpc.TokenwireServiceStub]:
    server = ProcessServer(REAL_SERVER_ARGS + PARSERS).start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            yield service_pb2_grpc.TokenwireServiceStub(ch)
    finally:
        server.stop()


@pytest.mark.parametrize("choice", [
    "required", {"type": "function", "function": {"name": "get_weather"}}])
def test_forced_tool_calls_are_constrained_and_parsed(stub, choice) -> None:
    # enable_thinking false reaches the engine's qwen3 parser (vLLM's
    # reasoning_parser_kwargs): the constraint applies from the first token.
    req = chat_request(messages=ASK, tools=TOOLS, tool_choice=choice, temperature=0,
                       max_tokens=80, return_token_ids=True, logprobs=True,
                       chat_template_kwargs={"enable_thinking": False})
    resp = stub.CreateChatCompletion(req, timeout=300)
    c = resp.choices[0]
    assert len(c.message.tool_calls) == 1, c.message
    call = c.message.tool_calls[0]
    assert call.function.name == "get_weather" and call.id.startswith("chatcmpl-tool-")
    # strict: the schema's object (vLLM's structural tag pins it to the enum)
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert c.finish_reason == ("tool_calls" if choice == "required" else "stop")
    chunks = list(stub.StreamChatCompletion(req, timeout=300))
    assert stream_ids(chunks)[0] == list(c.token_ids)  # greedy: the same ids, all of them
    pieces = [tc for k in chunks for ch in k.choices for tc in ch.delta.tool_calls]
    assert pieces[0].function.name == "get_weather" and pieces[0].id.startswith("chatcmpl-tool")
    # Streamed, the arguments are the model's own JSON text (vLLM's hermes
    # parser streams it as written; the unary call re-dumps it): equal as JSON.
    assert json.loads("".join(p.function.arguments for p in pieces)) == {"city": "Paris"}
    assert sum(len(ch.logprobs.content) for k in chunks for ch in k.choices) == len(c.token_ids)


def test_qwen3_reasoning_and_enable_thinking(stub) -> None:
    """vLLM's qwen3 parser: text before a </think> is reasoning (the template
    opens the thought); enable_thinking false makes it all content."""
    ask = {"messages": ASK, "tools": TOOLS, "temperature": 0, "max_tokens": 16,
           "return_token_ids": True}
    c = stub.CreateChatCompletion(chat_request(**ask), timeout=300).choices[0]
    assert c.message.reasoning_content and not c.message.content
    off = stub.CreateChatCompletion(chat_request(
        chat_template_kwargs={"enable_thinking": False}, **ask), timeout=300).choices[0]
    assert (off.message.content or off.message.tool_calls) and not off.message.reasoning_content
    assert len(off.token_ids) > 0
    # reasoning_effort "none" sets enable_thinking false (vLLM's
    # build_chat_params), which the parser reads as above.
    none = stub.CreateChatCompletion(chat_request(reasoning_effort="none", **ask),
                                     timeout=300).choices[0]
    assert list(none.token_ids) == list(off.token_ids) and not none.message.reasoning_content
    assert none.message.content == off.message.content


def test_include_reasoning_false_hides_the_thought(stub) -> None:
    """vLLM's include_reasoning false: the qwen3 thought is generated (the
    same greedy ids) but left out of the message and the deltas; a
    response_format then constrains from the first generated token."""
    ask = {"messages": ASK, "temperature": 0, "max_tokens": 16, "return_token_ids": True}
    shown = stub.CreateChatCompletion(chat_request(**ask), timeout=300).choices[0]
    assert shown.message.reasoning_content
    req = chat_request(include_reasoning=False, **ask)
    hidden = stub.CreateChatCompletion(req, timeout=300).choices[0]
    assert not hidden.message.HasField("reasoning_content")
    assert list(hidden.token_ids) == list(shown.token_ids)
    chunks = list(stub.StreamChatCompletion(req, timeout=300))
    assert not any(ch.delta.HasField("reasoning_content") for k in chunks for ch in k.choices)
    assert stream_ids(chunks)[0] == list(shown.token_ids)
    schema = {"type": "object", "properties": {"city": {"type": "string", "enum": ["Paris"]}},
              "required": ["city"], "additionalProperties": False}
    fmt = {"type": "json_schema", "json_schema": {"name": "w", "schema": schema}}
    ids = stub.CreateChatCompletion(chat_request(
        include_reasoning=False, response_format=fmt, **{**ask, "max_tokens": 40}),
        timeout=300).choices[0].token_ids
    text = stub.Detokenize(tokenize_pb2.DetokenizeRequest(tokens=ids), timeout=60).prompt
    assert json.loads(text.split("<|im_end|>")[0]) == {"city": "Paris"}
