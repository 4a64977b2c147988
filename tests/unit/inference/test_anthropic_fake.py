"""The Anthropic Messages kind on the fake engine: request blocks and tools
into the chat it runs as, the Message and the streamed events out, errors
naming the field (gRPC, and the SSE renderings)."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.anthropic import wire as anthropic_sse
from tokenwire.server.inference.anthropic.request import chat_param, to_chat
from tokenwire.v1 import anthropic_pb2, events_pb2_grpc, service_pb2_grpc

TOOLS = [{"name": "get_weather", "description": "Weather of a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]


pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


def _req(**body: Any) -> anthropic_pb2.CreateMessageRequest:
    body.setdefault("max_tokens", 200)
    body.setdefault("messages", [{"role": "user", "content": "Hi"}])
    return json_format.ParseDict(body, anthropic_pb2.CreateMessageRequest())


@pytest.fixture(scope="module")
def stubs(fake_server):
    with grpc.insecure_channel(fake_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), events_pb2_grpc.EventStreamServiceStub(ch)


def _events(stub, req) -> list[tuple[str, dict[str, Any]]]:
    data = b"".join(b.data for b in stub.StreamMessageEvents(req, timeout=10)).decode()
    out = []
    for frame in data.split("\n\n"):
        if not frame:
            continue
        head, body = frame.split("\n", 1)
        assert head.startswith("event: ") and body.startswith("data: ")
        event = json.loads(body[len("data: "):])
        assert event["type"] == head[len("event: "):]
        out.append((event["type"], event))
    return out


# -- request -> chat ------------------------------------------------------

def test_blocks_become_chat_messages() -> None:
    chat = to_chat(_req(
        system=[{"type": "text", "text": "Be brief."}],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Use the tool.", "signature": "x"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                 "input": {"city": "Paris"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1",
                 "content": [{"type": "text", "text": "sunny"}]},
                {"type": "text", "text": "Thanks"}]},
        ],
        tools=TOOLS, tool_choice={"type": "tool", "name": "get_weather",
                                  "disable_parallel_tool_use": True},
        stop_sequences=["END"], temperature=0.5, top_k=5, metadata={"user_id": "u1"},
        thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=2000,
    ), stream=True)
    roles = [m.role for m in chat.messages]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert chat.messages[0].content.string_value == "Be brief."
    asst = chat.messages[2]
    assert asst.reasoning_content == "Use the tool." and asst.content.string_value == "Checking."
    assert asst.tool_calls[0].id == "toolu_1"
    assert json.loads(asst.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert chat.messages[3].tool_call_id == "toolu_1"
    assert chat.messages[3].content.string_value == "sunny"
    assert chat.tools[0].function.name == "get_weather"
    assert chat.tools[0].function.parameters["type"] == "object"
    assert json_format.MessageToDict(chat.tool_choice) == {
        "type": "function", "function": {"name": "get_weather"}}
    assert chat.parallel_tool_calls is False
    assert [v.string_value for v in chat.stop.list_value.values] == ["END"]
    assert chat.max_tokens == 2000 and chat.top_k == 5 and chat.user == "u1"
    assert chat.chat_template_kwargs["enable_thinking"] is True
    assert chat.nvext.max_thinking_tokens == 1024  # vLLM's thinking_token_budget
    assert chat.stream and chat.stream_options.include_usage


@pytest.mark.parametrize("choice,chat", [
    ({"type": "auto"}, "auto"), ({"type": "any"}, "required"), ({"type": "none"}, "none")])
def test_tool_choice(choice, chat) -> None:
    assert to_chat(_req(tools=TOOLS, tool_choice=choice),
                   stream=False).tool_choice.string_value == chat


@pytest.mark.parametrize("body,param,reason", [
    ({"max_tokens": None}, "max_tokens", "FIELD_REQUIRED"),
    ({"max_tokens": 0}, "max_tokens", "VALUE_OUT_OF_RANGE"),
    ({"messages": []}, "messages", "FIELD_REQUIRED"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role",
     "VALUE_NOT_ALLOWED"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]},
     "messages[0].content[0].type", "VALUE_NOT_ALLOWED"),
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {}}]}]},
     "messages[0].content[0].source.type", "VALUE_NOT_ALLOWED"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_result"}]}]},
     "messages[0].content[0].tool_use_id", "FIELD_REQUIRED"),
    ({"messages": [{"role": "assistant", "content": [{"type": "tool_use", "name": "f"}]}]},
     "messages[0].content[0].id", "FIELD_REQUIRED"),
    ({"system": 3}, "system", "INVALID_TYPE"),
    ({"tools": [{"name": "f"}]}, "tools[0].input_schema", "FIELD_REQUIRED"),
    ({"tools": TOOLS, "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice.name",
     "VALUE_NOT_ALLOWED"),
    ({"tool_choice": {"type": "sometimes"}}, "tool_choice.type", "VALUE_NOT_ALLOWED"),
    ({"stop_sequences": [""]}, "stop_sequences[0]", "EMPTY_VALUE"),
    ({"thinking": {"type": "maybe"}}, "thinking.type", "VALUE_NOT_ALLOWED"),
])
def test_bad_fields_are_named(body, param, reason) -> None:
    if body.get("max_tokens", 1) is None:
        req = _req()
        req.ClearField("max_tokens")
    else:
        req = _req(**body)
    with pytest.raises(InvalidArgument) as info:
        to_chat(req, stream=False)
    assert (info.value.param, info.value.reason) == (param, reason)


# -- through the servicers --------------------------------------------------

def test_unary_text_message(stubs) -> None:
    resp = stubs[0].CreateMessage(_req(), timeout=10)
    assert resp.id.startswith("msg_") and resp.type == "message" and resp.role == "assistant"
    assert [(b.type, b.text) for b in resp.content] == [("text", "Hello from the fake engine.")]
    assert resp.stop_reason == "end_turn" and not resp.HasField("stop_sequence")
    assert resp.usage.input_tokens > 0 and resp.usage.output_tokens > 0
    assert resp.model == "fake-model"


def test_unary_json_has_every_field(stubs) -> None:
    body = json.loads(stubs[1].CreateMessageJson(_req(), timeout=10).data)
    assert body["stop_sequence"] is None and body["type"] == "message"
    assert set(body) == {"id", "type", "role", "content", "model", "stop_reason",
                         "stop_sequence", "usage"}


def test_unary_tool_use_and_thinking(stubs) -> None:
    resp = stubs[0].CreateMessage(_req(tools=TOOLS), timeout=10)
    blocks = {b.type: b for b in resp.content}
    assert blocks["tool_use"].id.startswith("toolu_")
    assert blocks["tool_use"].name == "get_weather"
    assert json_format.MessageToDict(blocks["tool_use"].input) == {"city": "Paris"}
    assert resp.stop_reason == "tool_use"
    think = stubs[0].CreateMessage(_req(messages=[{"role": "user", "content": "Think first."}]),
                                   timeout=10)
    assert [b.type for b in think.content] == ["thinking", "text"]
    assert think.content[0].thinking == "The user wants a greeting."
    assert think.content[0].signature


def test_stop_sequence_and_max_tokens(stubs) -> None:
    resp = stubs[0].CreateMessage(_req(stop_sequences=["fake"]), timeout=10)
    assert (resp.stop_reason, resp.stop_sequence) == ("stop_sequence", "fake")
    assert resp.content[0].text == "Hello from the "
    short = stubs[0].CreateMessage(_req(max_tokens=2), timeout=10)
    assert short.stop_reason == "max_tokens"


def test_count_tokens(stubs) -> None:
    req = anthropic_pb2.CountMessageTokensRequest()
    req.messages.add(role="user").content.string_value = "Hi"
    n = stubs[0].CountMessageTokens(req, timeout=10).input_tokens
    usage = stubs[0].CreateMessage(_req(), timeout=10).usage
    # count_tokens counts the whole prompt; the Message's input_tokens leave
    # out its prefix-cache reads (vLLM's and Anthropic's split)
    assert n == usage.input_tokens + usage.cache_read_input_tokens > 0


def test_stream_event_order_text(stubs) -> None:
    events = _events(stubs[1], _req(stream=True))
    kinds = [k for k, _ in events]
    assert kinds[:4] == ["message_start", "ping", "content_block_start", "content_block_delta"]
    assert kinds[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["id"].startswith("msg_") and start["content"] == []
    assert start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    text = "".join(e["delta"]["text"] for k, e in events if k == "content_block_delta")
    assert text == "Hello from the fake engine."
    delta = events[-2][1]
    assert delta["delta"] == {"stop_reason": "end_turn", "stop_sequence": None}
    assert delta["usage"]["output_tokens"] > 0


def test_stream_thinking_and_tool_use(stubs) -> None:
    events = _events(stubs[1], _req(stream=True, tools=TOOLS,
                                    messages=[{"role": "user", "content": "Think first."}]))
    starts = [e["content_block"]["type"] for k, e in events if k == "content_block_start"]
    assert starts == ["text", "tool_use"]  # (tools answer with a call in the fake)
    tool = [e for k, e in events if k == "content_block_start"][1]
    assert tool["index"] == 1 and tool["content_block"]["id"].startswith("toolu_")
    args = "".join(e["delta"]["partial_json"] for k, e in events
                   if k == "content_block_delta" and e["delta"]["type"] == "input_json_delta")
    assert json.loads(args) == {"city": "Paris"}
    assert events[-2][1]["delta"]["stop_reason"] == "tool_use"
    think = _events(stubs[1], _req(stream=True,
                                   messages=[{"role": "user", "content": "Think first."}]))
    deltas = [e["delta"]["type"] for k, e in think if k == "content_block_delta"]
    assert deltas[0] == "thinking_delta" and "signature_delta" in deltas
    assert deltas[-1] == "text_delta"
    stops = [e["index"] for k, e in think if k == "content_block_stop"]
    assert stops == [0, 1]


def test_stream_error_before_start_is_a_status(stubs) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _events(stubs[1], _req(stream=True, stop_sequences=[""]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_error_event_shape() -> None:
    err = InvalidArgument("must be at least 1", param="max_tokens", reason="VALUE_OUT_OF_RANGE")
    frame = anthropic_sse.error_event(err).decode()
    assert frame.startswith("event: error\ndata: ")
    body = json.loads(frame.split("data: ", 1)[1])
    assert body == {"type": "error", "error": {
        "type": "invalid_request_error", "message": "max_tokens: must be at least 1"}}


def test_chat_errors_name_the_messages_field(stubs) -> None:
    assert chat_param("stop") == "stop_sequences"
    assert chat_param("stop[1]") == "stop_sequences[1]"
    assert chat_param("user") == "metadata.user_id"
    assert chat_param("chat_template_kwargs") == "chat_template_kwargs"  # (vLLM's field too)
    assert chat_param("nvext.max_thinking_tokens") == "thinking.budget_tokens"
    assert chat_param("messages[3].content") == "messages"
    assert chat_param("tools[0].function.parameters") == "tools[0].function.parameters"
    with pytest.raises(grpc.RpcError) as info:
        stubs[0].CreateMessage(_req(temperature=-1.0), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(info.value.trailing_metadata()).get("tokenwire-param") == "temperature"
    with pytest.raises(grpc.RpcError) as info:
        stubs[0].CreateMessage(_req(max_tokens=100000), timeout=10)
    assert dict(info.value.trailing_metadata()).get("tokenwire-param") == "max_tokens"


def test_own_errors_keep_their_field(stubs) -> None:
    bad = _req(messages=[{"role": "user", "content": [{"type": "document", "source": {}}]}])
    with pytest.raises(grpc.RpcError) as info:
        stubs[0].CreateMessage(bad, timeout=10)
    assert dict(info.value.trailing_metadata()).get(
        "tokenwire-param") == "messages[0].content[0].type"
