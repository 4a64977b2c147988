"""Token in, token out on the Messages and Responses APIs (issue #45 items 2
and 3) on the fake engine: return_token_ids and chat's nvext in, the ids,
weight spans and nvext out (unary, SSE, typed stream), a second turn sent
as ids that extends the first and hits the prefix cache; reasoning_tokens
counted by the reasoning parser (chat's completion_tokens_details,
Responses' output_tokens_details); thinking.budget_tokens as vLLM passes
it (docs/agents.md, "Token in, token out on Responses and Messages")."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, error_info
from tests.servers import fake_serving
from tests.unit.inference.agent_cases import message_request, response_request, typed_sse
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.anthropic.request import to_chat
from tokenwire.v1 import anthropic_pb2, events_pb2_grpc, responses_pb2, service_pb2_grpc

THINK = "Think first. Then greet me."  # the fake engine answers with a <think> section
THOUGHT = "The user wants a greeting."  # its reasoning: one byte token each
NEXT_TURN = "<|im_end|>\n<|im_start|>user\nAnd now?<|im_end|>\n<|im_start|>assistant\n"
EXTRA = ["completion_token_ids", "prompt_token_ids", "engine_data"]


def _msg(**body: Any) -> anthropic_pb2.CreateMessageRequest:
    return message_request(200, **body)


_resp = response_request


@pytest.fixture(scope="module")
def stubs(fake_server):
    with grpc.insecure_channel(fake_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), events_pb2_grpc.EventStreamServiceStub(ch)


_sse = typed_sse


def _message_events(stub, req) -> list[dict[str, Any]]:
    return _sse(b"".join(b.data for b in stub.StreamMessageEvents(req, timeout=10)))


def _streamed_ids(events: list[dict[str, Any]]) -> list[int]:
    return [t for e in events if e["type"] in ("content_block_delta", "message_delta")
            for t in e.get("token_ids", [])]


# -- Messages ---------------------------------------------------------------

def test_messages_return_token_ids_unary_json_and_streams(stubs) -> None:
    stub, events = stubs
    req = _msg(return_token_ids=True, temperature=0)
    msg = stub.CreateMessage(req, timeout=10)
    assert msg.prompt_token_ids and len(msg.prompt_token_ids) == (
        msg.usage.input_tokens + msg.usage.cache_read_input_tokens)  # (Anthropic's split)
    assert len(msg.token_ids) == msg.usage.output_tokens > 0
    assert msg.weight_versions and msg.weight_versions[-1].end == len(msg.token_ids)
    body = json.loads(events.CreateMessageJson(req, timeout=10).data)
    assert body["token_ids"] == list(msg.token_ids)
    assert body["prompt_token_ids"] == list(msg.prompt_token_ids)
    sse = _message_events(events, _msg(return_token_ids=True, temperature=0, stream=True))
    assert sse[0]["message"]["prompt_token_ids"] == list(msg.prompt_token_ids)
    assert _streamed_ids(sse) == list(msg.token_ids)  # every id once, in order
    deltas = [e for e in sse if e["type"] == "content_block_delta" and "token_ids" in e]
    assert deltas, "ids ride on the content deltas as they come"
    end = next(e for e in sse if e["type"] == "message_delta")
    assert end["weight_versions"][-1]["end"] == len(msg.token_ids)
    typed = list(stub.StreamMessage(_msg(return_token_ids=True, temperature=0), timeout=10))
    assert [t for e in typed for t in e.token_ids] == list(msg.token_ids)
    assert list(typed[0].message.prompt_token_ids) == list(msg.prompt_token_ids)


def test_messages_without_asking_keep_anthropic_shape(stubs) -> None:
    body = json.loads(stubs[1].CreateMessageJson(_msg(), timeout=10).data)
    assert set(body) == {"id", "type", "role", "content", "model", "stop_reason",
                         "stop_sequence", "usage"}
    sse = _message_events(stubs[1], _msg(stream=True))
    assert not any({"token_ids", "weight_versions", "nvext"} & set(e) for e in sse)


def test_messages_nvext_extra_fields(stubs) -> None:
    stub, events = stubs
    req = _msg(nvext={"extra_fields": EXTRA}, temperature=0)
    msg = stub.CreateMessage(req, timeout=10)
    nv = msg.nvext
    assert list(nv.completion_token_ids) == list(msg.token_ids)
    assert list(nv.engine_data.completion_token_ids) == list(msg.token_ids)
    assert list(nv.engine_data.prompt_token_ids) == list(nv.prompt_token_ids)
    assert len(nv.prompt_token_ids) == msg.usage.input_tokens + msg.usage.cache_read_input_tokens
    body = json.loads(events.CreateMessageJson(req, timeout=10).data)
    assert body["nvext"]["engine_data"]["completion_token_ids"] == list(msg.token_ids)
    sse = _message_events(events, _msg(nvext={"extra_fields": EXTRA}, temperature=0,
                                       stream=True))
    assert sse[0]["message"]["nvext"]["prompt_token_ids"] == list(nv.prompt_token_ids)
    end = next(e for e in sse if e["type"] == "message_delta")
    assert end["nvext"]["completion_token_ids"] == list(msg.token_ids)
    assert end["nvext"]["engine_data"]["finished"] is True
    assert _streamed_ids(sse) == list(msg.token_ids)


def test_messages_second_turn_as_ids_hits_the_cache(stubs, fake_engine) -> None:
    stub = stubs[0]
    first = stub.CreateMessage(_msg(
        messages=[{"role": "user", "content": "Tell me a story about a long road. " * 3}],
        return_token_ids=True, temperature=0), timeout=10)
    history = [*first.prompt_token_ids, *first.token_ids]
    ids = history + fake_engine.encode(NEXT_TURN, add_special_tokens=False)
    second = stub.CreateMessage(_msg(messages=[], nvext={"token_data": ids},
                                     return_token_ids=True, temperature=0), timeout=10)
    assert list(second.prompt_token_ids) == ids
    assert list(second.prompt_token_ids[:len(history)]) == history
    assert second.usage.cache_read_input_tokens > 0
    assert second.usage.cache_read_input_tokens >= len(first.prompt_token_ids) // 16 * 16


def test_messages_vllm_extensions_reach_the_chat() -> None:
    chat = to_chat(_msg(cache_salt="s1", chat_template_kwargs={"k": 1},
                        thinking={"type": "disabled"}, return_token_ids=True,
                        nvext={"extra_fields": ["timing"], "max_weight_lag": 2}), stream=False)
    assert chat.cache_salt == "s1" and chat.return_token_ids
    assert chat.chat_template_kwargs["k"] == 1
    assert chat.chat_template_kwargs["enable_thinking"] is False  # thinking wins over kwargs
    assert list(chat.nvext.extra_fields) == ["timing"] and chat.nvext.max_weight_lag == 2


@pytest.mark.parametrize("body,param,reason", [
    ({"thinking": {"type": "enabled"}}, "thinking.budget_tokens", "FIELD_REQUIRED"),
    ({"thinking": {"type": "enabled", "budget_tokens": 1000}}, "thinking.budget_tokens",
     "VALUE_OUT_OF_RANGE"),
    ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "thinking.budget_tokens",
     "VALUE_OUT_OF_RANGE"),  # not less than max_tokens
    ({"nvext": {"max_thinking_tokens": 5}}, "nvext.max_thinking_tokens", "VALUE_NOT_ALLOWED"),
    ({"messages": []}, "messages", "FIELD_REQUIRED"),
])
def test_messages_bad_token_fields_are_named(stubs, body, param, reason) -> None:
    with pytest.raises(grpc.RpcError) as err:
        stubs[0].CreateMessage(_msg(**{"max_tokens": 2048, **body}), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(err.value)
    assert info is not None and info.reason == reason and info.metadata["param"] == param


def test_messages_budget_is_the_engines_thinking_budget() -> None:
    """budget_tokens reaches the engine as vLLM's thinking_token_budget
    (SamplingParams.thinking_token_budget, engine/vllm/convert.py)."""
    engine = FakeEngine(max_model_len=4096)
    seen = []
    orig = engine.generate

    def spy(request, *args, **kwargs):
        seen.append(request.params.thinking_token_budget)
        return orig(request, *args, **kwargs)

    engine.generate = spy  # type: ignore[method-assign]
    with fake_serving(engine, max_model_len=4096, reasoning_parser="fake") as server, \
            grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        stub.CreateMessage(_msg(max_tokens=2000, thinking={
            "type": "enabled", "budget_tokens": 1024}), timeout=10)
        assert seen[-1] == 1024  # (the first: the start-up warm-up)
        # count_tokens takes the thinking config without the budget's rules (vLLM's)
        count = anthropic_pb2.CountMessageTokensRequest()
        json_format.ParseDict({"messages": [{"role": "user", "content": "Hi"}],
                               "thinking": {"type": "enabled", "budget_tokens": 4096}}, count)
        assert stub.CountMessageTokens(count, timeout=10).input_tokens > 0
    with fake_serving(engine, max_model_len=4096) as server, \
            grpc.insecure_channel(server.address) as ch:  # no --reasoning-parser: vLLM's 400
        with pytest.raises(grpc.RpcError) as err:
            service_pb2_grpc.TokenwireServiceStub(ch).CreateMessage(_msg(
                max_tokens=2000, thinking={"type": "enabled", "budget_tokens": 1024}),
                timeout=10)
        info = error_info(err.value)
        assert info is not None and info.reason == "FEATURE_DISABLED"
        assert info.metadata["param"] == "thinking.budget_tokens"


# -- Responses ------------------------------------------------------------

def _response_events(stub, req) -> list[dict[str, Any]]:
    return _sse(b"".join(b.data for b in stub.StreamResponseEvents(req, timeout=10)))


def test_responses_ids_spans_and_nvext(stubs) -> None:
    stub, events = stubs
    req = _resp(return_token_ids=True, nvext={"extra_fields": EXTRA}, temperature=0)
    resp = stub.CreateResponse(req, timeout=10)
    assert len(resp.output_token_ids) == resp.usage.output_tokens > 0
    assert resp.weight_versions[-1].end == len(resp.output_token_ids)
    assert list(resp.nvext.engine_data.completion_token_ids) == list(resp.output_token_ids)
    body = json.loads(events.CreateResponseJson(req, timeout=10).data)
    assert body["nvext"]["completion_token_ids"] == list(resp.output_token_ids)
    assert body["weight_versions"][-1]["end"] == len(resp.output_token_ids)
    req.stream = True
    final = _response_events(events, req)[-1]["response"]
    assert final["output_token_ids"] == list(resp.output_token_ids)
    assert final["prompt_token_ids"] == list(resp.prompt_token_ids)
    assert final["nvext"]["prompt_token_ids"] == list(resp.prompt_token_ids)
    assert final["nvext"]["engine_data"]["completion_token_ids"] == list(resp.output_token_ids)
    plain = json.loads(events.CreateResponseJson(_resp(), timeout=10).data)
    assert not {"weight_versions", "nvext", "output_token_ids"} & set(plain)


def test_responses_second_turn_as_ids_hits_the_cache(stubs, fake_engine) -> None:
    stub = stubs[0]
    first = stub.CreateResponse(_resp(input="Tell me a story about a long road. " * 3,
                                      return_token_ids=True, temperature=0), timeout=10)
    history = [*first.prompt_token_ids, *first.output_token_ids]
    ids = history + fake_engine.encode(NEXT_TURN, add_special_tokens=False)
    req = responses_pb2.CreateResponseRequest(return_token_ids=True, temperature=0)
    req.nvext.token_data.extend(ids)
    second = stub.CreateResponse(req, timeout=10)
    assert list(second.prompt_token_ids[:len(history)]) == history
    assert second.usage.input_tokens_details["cached_tokens"] > 0


# -- reasoning_tokens -------------------------------------------------------

def test_reasoning_tokens_in_every_usage(stubs) -> None:
    stub, events = stubs
    chat = stub.CreateChatCompletion(chat_request(
        messages=[{"role": "user", "content": THINK}]), timeout=10)
    assert chat.choices[0].message.reasoning_content == THOUGHT
    assert chat.usage.completion_tokens_details.reasoning_tokens == len(THOUGHT)
    chunks = list(stub.StreamChatCompletion(chat_request(
        messages=[{"role": "user", "content": THINK}], stream_options={"include_usage": True}),
        timeout=10))
    assert chunks[-1].usage.completion_tokens_details.reasoning_tokens == len(THOUGHT)
    plain = stub.CreateChatCompletion(chat_request(
        messages=[{"role": "user", "content": "Hi"}]), timeout=10)
    assert plain.usage.HasField("completion_tokens_details")  # a reasoning parser runs: 0
    assert plain.usage.completion_tokens_details.reasoning_tokens == 0
    resp = stub.CreateResponse(_resp(input=THINK), timeout=10)
    assert resp.usage.output_tokens_details["reasoning_tokens"] == len(THOUGHT)
    final = _response_events(events, _resp(input=THINK, stream=True))[-1]["response"]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == len(THOUGHT)


def test_no_reasoning_parser_no_completion_tokens_details() -> None:
    with fake_serving(served_model_name="fake-model") as server, \
            grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        chat = stub.CreateChatCompletion(chat_request(
            messages=[{"role": "user", "content": THINK}]), timeout=10)
        assert not chat.usage.HasField("completion_tokens_details")  # as vLLM: none printed
        resp = stub.CreateResponse(_resp(input=THINK), timeout=10)
        assert resp.usage.output_tokens_details["reasoning_tokens"] == 0
