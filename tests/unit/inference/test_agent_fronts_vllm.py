"""Messages and Responses as vLLM 0.32's fronts (issue #45 items 2/4) on the
fake engine: Messages' usage split as vLLM's Anthropic server splits it
(input_tokens without the prefix-cache reads, cache_read_input_tokens
holding them; message_start the whole prompt; count_tokens the whole
prompt), kv_transfer_params in and out on both APIs (chat's path:
inference/shared/kv_transfer.py), Messages' output_config (effort: the
template's reasoning_effort; format: structured output), and a Responses
stream's token ids on each delta event (docs/agents.md)."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tests.unit.inference.agent_cases import message_request, response_request, typed_sse
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.kv_transfer import ENGINE_ID
from tokenwire.server.inference.anthropic.request import count_to_chat, to_chat
from tokenwire.server.inference.anthropic.typed_events import typed_event
from tokenwire.server.inference.responses.events import DELTA_EVENTS
from tokenwire.v1 import anthropic_pb2, events_pb2_grpc, service_pb2_grpc

PREFILL = {"do_remote_decode": True, "do_remote_prefill": False}
THINK = "Think first. Then greet me."  # the fake engine answers with a <think> section
LONG = "Tell me a story about a long and winding road, please. " * 3  # several blocks
TOOLS = [{"type": "function", "name": "get_weather", "description": "weather",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}},
          "required": ["city"]}


def _msg(**body: Any) -> anthropic_pb2.CreateMessageRequest:
    return message_request(20, **body)


_resp = response_request


@pytest.fixture(scope="module")
def stubs(fake_server):
    with grpc.insecure_channel(fake_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), events_pb2_grpc.EventStreamServiceStub(ch)


_sse = typed_sse


def _refused(call: Any, req: Any) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as err:
        call(req, timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(err.value)
    assert info is not None
    return info.reason, info.metadata["param"]


# -- Messages usage ---------------------------------------------------------

def test_messages_usage_leaves_the_cache_reads_out_of_input_tokens(stubs) -> None:
    stub, events = stubs
    messages = [{"role": "user", "content": LONG}]
    count = anthropic_pb2.CountMessageTokensRequest()
    count.messages.add(role="user").content.string_value = LONG
    whole = stub.CountMessageTokens(count, timeout=10).input_tokens
    stub.CreateMessage(_msg(messages=messages), timeout=10)  # its blocks are cached now
    again = stub.CreateMessage(_msg(messages=messages, return_token_ids=True), timeout=10)
    cached = again.usage.cache_read_input_tokens
    assert cached >= 16 and cached % 16 == 0 and cached <= whole
    assert again.usage.input_tokens == whole - cached == len(again.prompt_token_ids) - cached
    body = json.loads(events.CreateMessageJson(_msg(messages=messages), timeout=10).data)
    assert body["usage"] == {"input_tokens": whole - cached, "output_tokens": 20,
                             "cache_read_input_tokens": cached}
    sse = _sse(b"".join(b.data for b in events.StreamMessageEvents(
        _msg(messages=messages, stream=True), timeout=10)))
    # message_start: the whole prompt, no cache count yet (vLLM's first chunk's usage)
    assert sse[0]["message"]["usage"] == {"input_tokens": whole, "output_tokens": 0}
    end = next(e for e in sse if e["type"] == "message_delta")
    assert end["usage"] == {"input_tokens": whole - cached, "output_tokens": 20,
                            "cache_read_input_tokens": cached}
    typed = list(stub.StreamMessage(_msg(messages=messages), timeout=10))
    start = next(e for e in typed if e.type == "message_start")
    last = next(e for e in typed if e.type == "message_delta")
    assert start.message.usage.input_tokens == whole
    assert not start.message.usage.HasField("cache_read_input_tokens")
    assert (last.usage.input_tokens, last.usage.cache_read_input_tokens) == (
        whole - cached, cached)


# -- kv_transfer_params -----------------------------------------------------

def test_messages_kv_transfer_params_in_and_out(stubs, fake_engine: FakeEngine) -> None:
    stub, events = stubs
    req = _msg(max_tokens=1, kv_transfer_params=PREFILL, return_token_ids=True)
    msg = stub.CreateMessage(req, timeout=10)
    assert fake_engine.requests[-1].params.kv_transfer_params == PREFILL  # chat's path
    answer = json_format.MessageToDict(msg.kv_transfer_params)
    assert answer["remote_engine_id"] == ENGINE_ID and answer["do_remote_prefill"] is True
    blocks = -(-len(msg.prompt_token_ids) // 16)
    body = json.loads(events.CreateMessageJson(req, timeout=10).data)
    assert body["kv_transfer_params"]["remote_block_ids"] == list(range(blocks))
    assert type(body["kv_transfer_params"]["remote_port"]) is int
    plain = json.loads(events.CreateMessageJson(_msg(), timeout=10).data)
    assert "kv_transfer_params" not in plain  # vLLM's exclude_none: absent without one
    sse = _sse(b"".join(b.data for b in events.StreamMessageEvents(
        _msg(max_tokens=1, kv_transfer_params=PREFILL, stream=True), timeout=10)))
    assert not any("kv_transfer_params" in e or "kv_transfer_params" in e.get("message", {})
                   for e in sse)  # none on vLLM's events either
    # The decode side: the forwarded prompt ids are the prompt (chat's reuse).
    ids = list(msg.prompt_token_ids)
    decode = stub.CreateMessage(_msg(
        messages=[{"role": "user", "content": "not what was prefilled"}],
        return_token_ids=True, kv_transfer_params={**answer, "prompt_token_ids": ids}),
        timeout=10)
    assert list(decode.prompt_token_ids) == ids
    assert not decode.HasField("kv_transfer_params")


def test_messages_prefill_leg_skips_the_budget_bound() -> None:
    # vLLM's validate_thinking_budget: a prefill leg (do_remote_decode) is
    # sent with max_tokens 1, so budget_tokens < max_tokens is not checked.
    thinking = {"type": "enabled", "budget_tokens": 1024}
    chat = to_chat(_msg(max_tokens=1, thinking=thinking, kv_transfer_params=PREFILL),
                   stream=False)
    assert chat.nvext.max_thinking_tokens == 1024
    assert json_format.MessageToDict(chat.kv_transfer_params) == PREFILL
    with pytest.raises(Exception, match="less than max_tokens"):
        to_chat(_msg(max_tokens=1, thinking=thinking,
                     kv_transfer_params={"do_remote_decode": False}), stream=False)


def test_kv_handshake_errors_name_the_field(stubs) -> None:
    stub = stubs[0]
    for call, req in ((stub.CreateMessage, _msg(ec_transfer_params={"x": 1})),
                      (stub.CreateResponse, _resp(ec_transfer_params={"x": 1}))):
        assert _refused(call, req) == ("UNSUPPORTED_FIELD", "ec_transfer_params")
    bad = {"prompt_token_ids": "nope"}
    for call, req in ((stub.CreateMessage, _msg(kv_transfer_params=bad)),
                      (stub.CreateResponse, _resp(kv_transfer_params=bad))):
        assert _refused(call, req) == ("INVALID_TYPE", "kv_transfer_params.prompt_token_ids")


def test_responses_kv_transfer_params_in_and_out(stubs, fake_engine: FakeEngine) -> None:
    stub, events = stubs
    req = _resp(max_output_tokens=1, kv_transfer_params=PREFILL, request_id="pd-resp-1")
    resp = stub.CreateResponse(req, timeout=10)
    assert fake_engine.requests[-1].params.kv_transfer_params == PREFILL
    answer = json_format.MessageToDict(resp.kv_transfer_params)
    assert answer["remote_engine_id"] == ENGINE_ID
    assert answer["remote_request_id"].endswith("pd-resp-1")
    body = json.loads(events.CreateResponseJson(req, timeout=10).data)
    assert body["kv_transfer_params"]["do_remote_prefill"] is True
    plain = json.loads(events.CreateResponseJson(_resp(), timeout=10).data)
    assert plain["kv_transfer_params"] is None  # vLLM's model_dump: null without one


# -- output_config ------------------------------------------------------------

def test_output_config_effort_and_format_as_vllm() -> None:
    chat = to_chat(_msg(output_config={"effort": "high"}), stream=False)
    kwargs = json_format.MessageToDict(chat.chat_template_kwargs)
    assert kwargs == {"reasoning_effort": "high", "enable_thinking": True}
    own = to_chat(_msg(output_config={"effort": "low"},
                       chat_template_kwargs={"enable_thinking": False}), stream=False)
    assert json_format.MessageToDict(own.chat_template_kwargs) == {
        "enable_thinking": False, "reasoning_effort": "low"}  # the body's flag stays
    off = to_chat(_msg(output_config={"effort": "max"}, thinking={"type": "disabled"}),
                  stream=False)
    assert json_format.MessageToDict(off.chat_template_kwargs) == {
        "enable_thinking": False, "reasoning_effort": "none"}  # thinking disabled wins
    fmt = to_chat(_msg(output_config={"format": {"type": "json_schema", "schema": SCHEMA}}),
                  stream=False)
    assert fmt.response_format.type == "json_schema"
    assert fmt.response_format.json_schema.name == "json_schema"
    assert json_format.MessageToDict(fmt.response_format.json_schema.schema) == SCHEMA
    empty = to_chat(_msg(output_config={"format": {"type": "json_schema"}}), stream=False)
    assert not empty.HasField("response_format")  # no schema: nothing asked (vLLM's)
    count = anthropic_pb2.CountMessageTokensRequest(model="m")
    count.messages.add(role="user").content.string_value = "Hi"
    count.output_config.update({"effort": "medium"})
    counted = count_to_chat(count)
    assert counted.chat_template_kwargs["reasoning_effort"] == "medium"


def test_output_config_format_reaches_the_engine_and_bad_values_are_named(
        stubs, fake_engine: FakeEngine) -> None:
    stub = stubs[0]
    stub.CreateMessage(_msg(output_config={"format": {"type": "json_schema",
                                                      "schema": SCHEMA}}), timeout=10)
    structured = fake_engine.requests[-1].params.structured
    assert structured is not None and structured.json_schema == SCHEMA
    assert _refused(stub.CreateMessage, _msg(output_config={"effort": "extreme"})) == (
        "VALUE_NOT_ALLOWED", "output_config.effort")
    assert _refused(stub.CreateMessage, _msg(output_config={"format": {"type": "text"}})) == (
        "VALUE_NOT_ALLOWED", "output_config.format.type")
    assert _refused(stub.CreateMessage,
                    _msg(output_config={"format": {"schema": "not an object"}})) == (
        "INVALID_TYPE", "output_config.format.schema")


# -- Responses: ids on each delta ----------------------------------------------

@pytest.mark.parametrize("body", [
    {"input": "Hi"},
    {"input": THINK},  # reasoning deltas, then text
    {"input": "What is the weather?", "tools": TOOLS},  # a call: the parser holds its text
], ids=["text", "reasoning", "tool_call"])
@pytest.mark.parametrize("ask", [{"return_token_ids": True},
                                 {"nvext": {"extra_fields": ["completion_token_ids"]}}],
                         ids=["return_token_ids", "nvext"])
def test_responses_stream_ids_ride_on_the_deltas(stubs, body, ask) -> None:
    stub, events = stubs
    req = _resp(**body, **ask, temperature=0, stream=True)
    sse = _sse(b"".join(b.data for b in events.StreamResponseEvents(req, timeout=10)))
    final = sse[-1]
    assert final["type"] == "response.completed"
    ids = final["response"].get("output_token_ids") or \
        final["response"]["nvext"]["completion_token_ids"]
    assert ids and [t for e in sse for t in e.get("token_ids", [])] == ids  # once, in order
    carriers = {e["type"] for e in sse if "token_ids" in e}
    assert carriers <= DELTA_EVENTS | {"response.completed"}
    deltas = [e for e in sse if e["type"] in DELTA_EVENTS]
    assert sum("token_ids" in e for e in deltas) > 1, "ids come as the text comes"
    if "tools" in body:
        assert any(e["type"] == "response.function_call_arguments.delta" and "token_ids" in e
                   for e in sse)
    if body["input"] == THINK:
        assert any(e["type"] == "response.reasoning_text.delta" and "token_ids" in e
                   for e in sse)
    unary = stub.CreateResponse(_resp(**body, **ask, temperature=0), timeout=10)
    assert list(unary.output_token_ids or unary.nvext.completion_token_ids) == ids
    typed = list(stub.StreamResponse(_resp(**body, **ask, temperature=0), timeout=10))
    assert [t for e in typed for t in e.token_ids] == ids


def test_responses_stream_without_asking_carries_no_ids(stubs) -> None:
    sse = _sse(b"".join(b.data for b in stubs[1].StreamResponseEvents(
        _resp(input=THINK, stream=True), timeout=10)))
    assert not any("token_ids" in e for e in sse)


def test_message_typed_events_keep_every_key() -> None:
    # usage as message_delta prints it reads back whole on the typed event
    event = {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"input_tokens": 3, "output_tokens": 2, "cache_read_input_tokens": 16}}
    typed = typed_event(event)
    assert (typed.usage.input_tokens, typed.usage.cache_read_input_tokens) == (3, 16)
