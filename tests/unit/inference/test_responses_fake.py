"""The Responses kind on the fake engine: input items, instructions and
tools into the chat it runs as, the Response and its typed events out,
errors naming the Responses field (gRPC, and the SSE rendering)."""

from __future__ import annotations

import json
import time
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.responses.request import chat_param, to_chat
from tokenwire.v1 import events_pb2_grpc, models_pb2, responses_pb2, service_pb2_grpc

TOOLS = [{"type": "function", "name": "get_weather", "description": "Weather of a city",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]


def _req(**body: Any) -> responses_pb2.CreateResponseRequest:
    body.setdefault("input", "Hi")
    return json_format.ParseDict(body, responses_pb2.CreateResponseRequest())


@pytest.fixture(scope="module")
def stubs(fake_server):
    with grpc.insecure_channel(fake_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), events_pb2_grpc.EventStreamServiceStub(ch)


def _events(stub, req) -> list[dict[str, Any]]:
    data = b"".join(b.data for b in stub.StreamResponseEvents(req, timeout=10)).decode()
    out = []
    for frame in data.split("\n\n"):
        if not frame:
            continue
        head, body = frame.split("\n", 1)
        assert head.startswith("event: ") and body.startswith("data: ")
        event = json.loads(body[len("data: "):])
        assert event["type"] == head[len("event: "):]
        out.append(event)
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


# -- request -> chat ------------------------------------------------------

def test_string_input_and_instructions() -> None:
    chat = to_chat(_req(instructions="Be brief.", max_output_tokens=30, temperature=0.5,
                        top_p=0.9, user="u1", metadata={"k": "v"}), stream=False)
    assert [(m.role, m.content.string_value) for m in chat.messages] == [
        ("system", "Be brief."), ("user", "Hi")]
    assert chat.max_tokens == 30 and chat.temperature == 0.5 and chat.user == "u1"
    assert not chat.stream


def test_items_become_chat_messages() -> None:
    chat = to_chat(_req(input=[
        {"role": "developer", "content": "Use tools."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Weather in Paris?"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [],
         "content": [{"type": "reasoning_text", "text": "Call the tool."}]},
        {"type": "function_call", "call_id": "call_1", "name": "get_weather",
         "arguments": "{\"city\": \"Paris\"}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Sunny."}]},
    ], tools=TOOLS, tool_choice={"type": "function", "name": "get_weather"},
        parallel_tool_calls=False, top_k=5, stop=["END"]), stream=True)
    assert [m.role for m in chat.messages] == ["developer", "user", "assistant", "tool",
                                               "assistant"]
    asst = chat.messages[2]
    assert asst.reasoning_content == "Call the tool."
    assert asst.tool_calls[0].id == "call_1"
    assert asst.tool_calls[0].function.name == "get_weather"
    assert chat.messages[3].tool_call_id == "call_1"
    assert chat.messages[3].content.string_value == "sunny"
    assert chat.messages[4].content.string_value == "Sunny."
    assert chat.tools[0].function.name == "get_weather"
    assert chat.tools[0].function.parameters["type"] == "object"
    assert json_format.MessageToDict(chat.tool_choice) == {
        "type": "function", "function": {"name": "get_weather"}}
    assert chat.parallel_tool_calls is False and chat.top_k == 5
    assert chat.stream and chat.stream_options.include_usage


def test_text_format_json_schema() -> None:
    chat = to_chat(_req(text={"format": {"type": "json_schema", "name": "w",
                                         "schema": {"type": "object"}}}), stream=False)
    assert chat.response_format.type == "json_schema"
    assert chat.response_format.json_schema.name == "w"


@pytest.mark.parametrize("body,param,reason", [
    ({"input": None}, "input", "FIELD_REQUIRED"),
    ({"input": []}, "input", "FIELD_REQUIRED"),
    ({"input": 3}, "input", "INVALID_TYPE"),
    ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role", "VALUE_NOT_ALLOWED"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].content[0].type", "VALUE_NOT_ALLOWED"),
    ({"input": [{"role": "user", "content": [{"type": "input_image"}]}]},
     "input[0].content[0].image_url", "FIELD_REQUIRED"),
    ({"input": [{"role": "user", "content": [{"type": "input_text", "text": "a"},
                                             {"type": "input_image", "file_id": "file-1"}]}]},
     "input[0].content[1].file_id", "FEATURE_DISABLED"),
    ({"input": [{"role": "user", "content": [{"type": "input_image",
                                              "image_url": "data:text/plain;base64,eA=="}]}]},
     "input[0].content[0].image_url", "UNSUPPORTED_MEDIA_TYPE"),
    ({"input": [{"type": "function_call_output", "call_id": "c",
                 "output": [{"type": "input_file", "file_id": "f"}]}]},
     "input[0].output[0].type", "VALUE_NOT_ALLOWED"),
    ({"input": [{"type": "function_call_output", "call_id": "c",
                 "output": [{"type": "input_image", "image_url": "data:text/plain;base64,eA=="}]}]},
     "input[0].output[0].image_url", "UNSUPPORTED_MEDIA_TYPE"),
    ({"input": [{"type": "function_call", "name": "f"}]}, "input[0].call_id",
     "FIELD_REQUIRED"),
    ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id",
     "FIELD_REQUIRED"),
    ({"input": [{"type": "web_search_call"}]}, "input[0].type", "VALUE_NOT_ALLOWED"),
    ({"tools": [{"type": "web_search"}]}, "tools[0].type", "VALUE_NOT_ALLOWED"),
    ({"tools": [{"type": "function"}]}, "tools[0].name", "FIELD_REQUIRED"),
    ({"tool_choice": "sometimes"}, "tool_choice", "VALUE_NOT_ALLOWED"),
    ({"tool_choice": {"type": "function"}}, "tool_choice.name", "FIELD_REQUIRED"),
    ({"text": {"format": {"type": "yaml"}}}, "text.format.type", "VALUE_NOT_ALLOWED"),
    ({"previous_response_id": "resp_1"}, "previous_response_id", "FEATURE_DISABLED"),
    ({"background": True}, "background", "FEATURE_DISABLED"),
])
def test_bad_fields_are_named(body, param, reason) -> None:
    req = _req(**body)
    if body.get("input", 1) is None:
        req.ClearField("input")
    with pytest.raises(InvalidArgument) as info:
        to_chat(req, stream=False)
    assert (info.value.param, info.value.reason) == (param, reason)


def test_chat_params_renamed() -> None:
    assert chat_param("max_tokens") == "max_output_tokens"
    assert chat_param("messages[2].content") == "input[2].content"
    assert chat_param("temperature") == "temperature"


# -- through the servicers --------------------------------------------------

def test_unary_text(stubs) -> None:
    resp = stubs[0].CreateResponse(_req(metadata={"k": "v"}), timeout=10)
    assert resp.id.startswith("resp_") and resp.object == "response"
    assert resp.status == "completed" and resp.model == "fake-model"
    assert [(o.type, o.role) for o in resp.output] == [("message", "assistant")]
    assert resp.output[0].content[0].type == "output_text"
    assert resp.output[0].content[0].text == "Hello from the fake engine."
    u = resp.usage
    assert u.input_tokens > 0 and u.output_tokens > 0
    assert u.total_tokens == u.input_tokens + u.output_tokens
    assert dict(resp.metadata) == {"k": "v"} and not resp.store


def test_unary_json_has_every_field(stubs) -> None:
    body = json.loads(stubs[1].CreateResponseJson(_req(), timeout=10).data)
    for key in ("error", "incomplete_details", "instructions", "previous_response_id",
                "max_output_tokens", "temperature", "top_p", "reasoning", "user"):
        assert body[key] is None, key
    assert body["object"] == "response" and body["output"][0]["content"][0]["annotations"] == []
    assert set(body["usage"]["input_tokens_details"]) == {"cached_tokens"}
    assert body["tool_choice"] == "auto" and body["tools"] == [] and body["metadata"] == {}


def test_unary_function_call_and_reasoning(stubs) -> None:
    resp = stubs[0].CreateResponse(_req(tools=TOOLS), timeout=10)
    calls = [o for o in resp.output if o.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "get_weather"
    assert calls[0].id.startswith("fc_") and calls[0].call_id
    assert json.loads(calls[0].arguments) == {"city": "Paris"}
    think = stubs[0].CreateResponse(_req(input="Think first."), timeout=10)
    assert [o.type for o in think.output] == ["reasoning", "message"]
    assert think.output[0].content[0].text == "The user wants a greeting."
    assert think.output[1].content[0].text.strip() == "Hello!"


def test_max_output_tokens_is_incomplete(stubs) -> None:
    resp = stubs[0].CreateResponse(_req(max_output_tokens=2), timeout=10)
    assert resp.status == "incomplete"
    assert resp.incomplete_details.reason == "max_output_tokens"


def test_errors_name_the_responses_field(stubs) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stubs[0].CreateResponse(_req(max_output_tokens=10**6), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "max_output_tokens" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        stubs[0].CreateResponse(_req(previous_response_id="resp_x"), timeout=10)
    assert "previous_response_id" in info.value.details()


def test_stream_event_order_text(stubs) -> None:
    events = _events(stubs[1], _req(stream=True))
    kinds = [e["type"] for e in events]
    assert kinds[:4] == ["response.created", "response.in_progress",
                         "response.output_item.added", "response.content_part.added"]
    assert kinds[-4:] == ["response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"]
    assert set(kinds[4:-4]) == {"response.output_text.delta"}
    created = events[0]["response"]
    assert created["status"] == "in_progress" and created["output"] == []
    text = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert text == "Hello from the fake engine."
    item_id = events[2]["item"]["id"]
    assert all(e["item_id"] == item_id for e in events[3:-2])
    done = events[-1]["response"]
    assert done["status"] == "completed" and done["id"] == created["id"]
    assert done["output"][0]["content"][0]["text"] == text
    assert done["usage"]["output_tokens"] > 0


def test_stream_reasoning_then_function_call(stubs) -> None:
    events = _events(stubs[1], _req(stream=True, tools=TOOLS, input="Think first."))
    added = [e["item"]["type"] for e in events if e["type"] == "response.output_item.added"]
    assert added[-1] == "function_call"
    args = "".join(e["delta"] for e in events
                   if e["type"] == "response.function_call_arguments.delta")
    assert json.loads(args) == {"city": "Paris"}
    done = [e for e in events if e["type"] == "response.function_call_arguments.done"]
    assert json.loads(done[0]["arguments"]) == {"city": "Paris"}
    final = events[-1]["response"]["output"]
    assert final[-1]["type"] == "function_call" and final[-1]["name"] == "get_weather"
    indexes = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert indexes == list(range(len(indexes)))


def test_stream_reasoning_events(stubs) -> None:
    events = _events(stubs[1], _req(stream=True, input="Think first."))
    kinds = [e["type"] for e in events]
    assert "response.reasoning_text.delta" in kinds
    final = events[-1]["response"]["output"]
    assert [o["type"] for o in final] == ["reasoning", "message"]
    assert final[0]["content"][0]["text"] == "The user wants a greeting."


def test_stream_error_before_first_event_is_a_status(stubs) -> None:
    with pytest.raises(grpc.RpcError) as info:
        _events(stubs[1], _req(stream=True, tools=[{"type": "function"}]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_return_token_ids_unary_and_stream(stubs) -> None:
    resp = stubs[0].CreateResponse(_req(return_token_ids=True), timeout=10)
    assert resp.usage.input_tokens == len(resp.prompt_token_ids) > 0
    assert resp.usage.output_tokens == len(resp.output_token_ids) > 0
    final = _events(stubs[1], _req(stream=True, return_token_ids=True))[-1]["response"]
    assert final["prompt_token_ids"] == list(resp.prompt_token_ids)
    assert final["output_token_ids"] == list(resp.output_token_ids)


INCLUDE = ["message.output_text.logprobs"]


def test_top_logprobs_on_output_text(stubs) -> None:
    """vLLM's rule: logprobs with include's "message.output_text.logprobs"
    (top_logprobs alternatives each); top_logprobs alone asks none."""
    alone = json.loads(stubs[1].CreateResponseJson(_req(top_logprobs=2, max_output_tokens=3),
                                                   timeout=10).data)
    assert alone["output"][0]["content"][0]["logprobs"] == [] and alone["top_logprobs"] == 2
    body = json.loads(stubs[1].CreateResponseJson(
        _req(top_logprobs=2, max_output_tokens=3, include=INCLUDE), timeout=10).data)
    entries = body["output"][0]["content"][0]["logprobs"]
    assert len(entries) == 3 and all(len(e["top_logprobs"]) == 2 for e in entries)
    assert all(isinstance(b, int) for e in entries for b in e["bytes"])
    events = _events(stubs[1], _req(stream=True, top_logprobs=2, max_output_tokens=3,
                                    include=INCLUDE))
    deltas = [e for e in events if e["type"] == "response.output_text.delta"]
    assert sum(len(e["logprobs"]) for e in deltas) == 3
    assert events[-1]["response"]["status"] == "incomplete"
    assert events[-1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_chat_rules_apply(stubs) -> None:
    """Model naming, weight bounds (nvext) and sampling ranges are chat's."""
    with pytest.raises(grpc.RpcError) as info:
        stubs[0].CreateResponse(_req(model="no-such-model"), timeout=10)
    assert info.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as info:
        stubs[0].CreateResponse(_req(temperature=-1), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "temperature" in info.value.details()
    with pytest.raises(grpc.RpcError) as info:
        stubs[0].CreateResponse(_req(nvext={"max_weight_lag": -1}), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "nvext.max_weight_lag" in info.value.details()


def test_output_items_round_trip_as_input(stubs) -> None:
    """An agent loop: the Response's output items (as the SDK sends them
    back) plus the function's result are the next request's input."""
    first = json.loads(stubs[1].CreateResponseJson(
        _req(input="Think first.", tools=TOOLS), timeout=10).data)
    call = next(o for o in first["output"] if o["type"] == "function_call")
    items = [{"role": "user", "content": "Think first."}, *first["output"],
             {"type": "function_call_output", "call_id": call["call_id"], "output": "sunny"}]
    chat = to_chat(_req(input=items), stream=False)
    roles = [m.role for m in chat.messages]
    assert roles == ["user", "assistant", "tool"]
    assert chat.messages[1].tool_calls[0].id == call["call_id"]
    second = stubs[0].CreateResponse(_req(input=items), timeout=10)
    assert second.status == "completed"


def test_typed_stream_matches_sse(stubs) -> None:
    typed = list(stubs[0].StreamResponse(_req(input="Think first."), timeout=10))
    sse = _events(stubs[1], _req(stream=True, input="Think first."))
    assert [e.type for e in typed] == [e["type"] for e in sse]
    assert [e.sequence_number for e in typed] == list(range(len(typed)))
    text = "".join(e.delta for e in typed if e.type == "response.output_text.delta")
    final = typed[-1].response
    assert final.status == "completed" and final.output[-1].content[0].text == text
    assert [o.type for o in final.output] == ["reasoning", "message"]
    assert final.usage.output_tokens > 0



@pytest.mark.parametrize("rpc", ["StreamResponse", "StreamResponseEvents"])
def test_cancelled_stream_frees_engine_request(stubs, fake_engine, rpc) -> None:
    fake_engine.token_delay = 0.02
    try:
        stub = stubs[0] if rpc == "StreamResponse" else stubs[1]
        call = getattr(stub, rpc)(_req(ignore_eos=True, max_output_tokens=400), timeout=30)
        for got, _ in enumerate(call):
            if got == 5:
                break
        assert fake_engine.num_unfinished_requests() == 1
        call.cancel()
        deadline = time.monotonic() + 5
        while fake_engine.num_unfinished_requests() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake_engine.num_unfinished_requests() == 0
        stats = stubs[0].GetStats(models_pb2.GetStatsRequest(), timeout=5)
        assert stats.engine_requests == 0 and stats.active_calls == 0
    finally:
        fake_engine.token_delay = 0.0
