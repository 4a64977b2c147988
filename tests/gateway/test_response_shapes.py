"""The OpenAI response shapes in full through the real Envoy (#34 items 7
and 8): every key OpenAI's schema requires is present even when empty or
null, as vLLM's server prints it, and vLLM 0.33's spellings
(`return_weight_versions`, `POST /inference/v1/abort_requests`) work."""

from __future__ import annotations

import collections.abc

import httpx
import pytest

from tests.gateway.conftest import MODEL
from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import sse_json
from tests.servers import fake_serving

ADMIN_KEY = "admin-key-for-shapes"
HI = [{"role": "user", "content": "Hi"}]


def _first_char_stop(rest: httpx.Client) -> str:
    """A stop string the fake engine's output starts with (the choice's
    text is then empty)."""
    r = rest.post("/v1/completions", json={"model": MODEL, "prompt": "hi", "max_tokens": 4})
    text = r.json()["choices"][0]["text"]
    assert text
    return text[:1]


def test_an_empty_completion_text_is_printed(rest: httpx.Client) -> None:
    stop = _first_char_stop(rest)
    r = rest.post("/v1/completions", json={
        "model": MODEL, "prompt": "hi", "max_tokens": 4, "stop": [stop]})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["text"] == "" and choice["finish_reason"] == "stop"
    assert choice["logprobs"] is None and "stop_reason" in choice
    assert {"index", "text", "logprobs", "finish_reason"} <= set(choice)


def test_streamed_completion_choices_carry_every_required_key(rest: httpx.Client) -> None:
    stop = _first_char_stop(rest)
    for extra in ({}, {"stop": [stop]}):
        r = rest.post("/v1/completions", json={
            "model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": True, **extra})
        chunks = [c for c in sse_json(r.content) if c["choices"]]
        assert chunks
        for chunk in chunks:
            for choice in chunk["choices"]:
                assert {"index", "text", "logprobs", "finish_reason", "stop_reason"} <= set(choice)
                assert choice["logprobs"] is None
        assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
        assert all(c["choices"][0]["finish_reason"] is None for c in chunks[:-1])


def test_streamed_chat_choices_carry_delta_logprobs_and_finish_reason(rest: httpx.Client) -> None:
    r = rest.post("/v1/chat/completions", json={
        "model": MODEL, "messages": HI, "max_tokens": 3, "stream": True,
        "stream_options": {"include_usage": True}})
    chunks = sse_json(r.content)
    with_choices = [c for c in chunks if c["choices"]]
    for chunk in with_choices:
        choice = chunk["choices"][0]
        assert {"index", "delta", "logprobs", "finish_reason"} <= set(choice)
        assert choice["logprobs"] is None and isinstance(choice["delta"], dict)
    assert with_choices[0]["choices"][0]["delta"].get("role") == "assistant"
    last = with_choices[-1]["choices"][0]
    assert last["finish_reason"] == "length" and "stop_reason" in last
    usage = chunks[-1]["usage"]
    assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(usage)


def test_unary_chat_shape(rest: httpx.Client) -> None:
    r = rest.post("/v1/chat/completions", json={"model": MODEL, "messages": HI, "max_tokens": 3})
    body = r.json()
    assert {"id", "object", "created", "model", "choices", "usage"} <= set(body)
    choice = body["choices"][0]
    assert {"index", "message", "logprobs", "finish_reason", "stop_reason"} <= set(choice)
    assert choice["logprobs"] is None
    message = choice["message"]
    assert message["role"] == "assistant" and isinstance(message["content"], str)
    assert message["refusal"] is None
    assert "tool_calls" not in message  # vLLM drops an empty tool_calls list


def test_unary_completion_with_logprobs_keeps_them(rest: httpx.Client) -> None:
    r = rest.post("/v1/completions", json={
        "model": MODEL, "prompt": "hi", "max_tokens": 2, "logprobs": 1})
    choice = r.json()["choices"][0]
    assert len(choice["logprobs"]["tokens"]) == 2 and choice["text"]
    r = rest.post("/v1/chat/completions", json={
        "model": MODEL, "messages": HI, "max_tokens": 2, "logprobs": True})
    entries = r.json()["choices"][0]["logprobs"]["content"]
    assert len(entries) == 2 and all(e["top_logprobs"] == [] for e in entries)


def test_unary_usage_fields(rest: httpx.Client) -> None:
    for path, extra in (("/v1/completions", {"prompt": "hi"}),
                        ("/v1/chat/completions", {"messages": HI})):
        usage = rest.post(path, json={"model": MODEL, "max_tokens": 2, **extra}).json()["usage"]
        assert {"prompt_tokens", "completion_tokens", "total_tokens"} <= set(usage)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_return_weight_versions_is_accepted(rest: httpx.Client, path: str) -> None:
    body = {"model": MODEL, "max_tokens": 3, "return_weight_versions": True}
    body |= {"messages": HI} if "chat" in path else {"prompt": "hi"}
    r = rest.post(path, json=body)
    assert r.status_code == 200, r.text
    spans = r.json()["choices"][0]["weight_versions"]
    assert spans and {"version", "start", "end"} <= set(spans[0])  # the spans, as always
    r = rest.post(path, json={**body, "return_weight_versions": "yes"})
    assert r.status_code == 400 and r.json()["error"]["param"] == "return_weight_versions"


@pytest.fixture(scope="module")
def control_url() -> collections.abc.Iterator[str]:
    with fake_serving(served_model_name=MODEL, enable_control=True,
                      admin_api_key=ADMIN_KEY) as server:
        envoy = start_gateway(server.address, control=True)
        try:
            yield envoy.url
        finally:
            stop_gateway(envoy)


def test_abort_requests_at_vllm_033s_path(control_url: str) -> None:
    with httpx.Client(base_url=control_url, timeout=30) as client:
        r = client.post("/inference/v1/abort_requests", json={"request_ids": ["x"]})
        assert r.status_code == 401  # admin-only, like the rest of control
        r = client.post("/inference/v1/abort_requests", json={"request_ids": ["x"]},
                        headers={"authorization": f"Bearer {ADMIN_KEY}"})
        assert r.status_code == 200, r.text
        assert r.json()["status"] == "aborted"


def test_unary_generate_choices_carry_logprobs_and_stop_reason(rest: httpx.Client) -> None:
    r = rest.post("/inference/v1/generate", json={
        "model": MODEL, "token_ids": [1, 75, 80], "sampling_params": {"max_tokens": 2}})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["logprobs"] is None and choice["stop_reason"] is None
    assert len(choice["token_ids"]) == 2 and choice["finish_reason"] == "length"



def _vllm_models() -> dict[str, type]:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionResponse
    from vllm.entrypoints.openai.completion.protocol import CompletionResponse
    from vllm.entrypoints.scale_out.token_in_token_out.protocol import GenerateTokensResponse
    return {"chat": ChatCompletionResponse, "completion": CompletionResponse,
            "generate": GenerateTokensResponse}


UNARY_BODIES = {
    "chat": ("/v1/chat/completions", {"model": MODEL, "max_tokens": 2,
                                      "messages": [{"role": "user", "content": "hi"}]}),
    "completion": ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 2}),
    "generate": ("/inference/v1/generate", {"model": MODEL, "token_ids": [1, 75, 80],
                                            "sampling_params": {"max_tokens": 2}}),
}


# vLLM's keys that are not fields of tokenwire's contract, and list fields
# (absent when empty: a null would not parse as the contract's message;
# api/sse.py): not printed, so the REST JSON parses as the gRPC message.
NOT_IN_CONTRACT = {"ec_transfer_params", "metrics", "service_tier",
                   "prompt_text", "prompt_token_id_logprobs", "sampling_mask",
                   "token_ids", "prompt_token_ids", "prompt_logprobs", "routed_experts",
                   "weight_versions"}


@pytest.mark.parametrize("kind", sorted(UNARY_BODIES))
def test_unary_answer_sends_every_key_vllms_sends(rest: httpx.Client, kind: str) -> None:
    """vLLM's unary chat, completion and generate answer `model_dump()` of
    its response model: every field, null when unset (mm_placeholders on a
    text prompt included). The same keys here, at the top and per choice,
    but for the few that are not fields of the contract."""
    model = _vllm_models()[kind]
    path, body = UNARY_BODIES[kind]
    r = rest.post(path, json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    missing = set(model.model_fields) - set(answer) - NOT_IN_CONTRACT
    assert not missing, f"keys vLLM sends that are missing: {sorted(missing)}"
    choice_model = model.model_fields["choices"].annotation.__args__[0]
    missing = set(choice_model.model_fields) - set(answer["choices"][0]) - NOT_IN_CONTRACT
    assert not missing, f"choice keys vLLM sends that are missing: {sorted(missing)}"
    if kind == "generate":
        assert answer["mm_placeholders"] is None  # a text prompt: null, as vLLM
    assert answer["kv_transfer_params"] is None  # no handshake: null, as vLLM
    from google.protobuf import json_format

    from tokenwire.v1 import chat_pb2, completion_pb2, generate_pb2
    message = {"chat": chat_pb2.CreateChatCompletionResponse,
               "completion": completion_pb2.CreateCompletionResponse,
               "generate": generate_pb2.GenerateResponse}[kind]
    # the nulls parse as the contract's message (a chat message's `refusal`,
    # printed for OpenAI's schema, is the one key outside it)
    json_format.ParseDict(answer, message(), ignore_unknown_fields=kind == "chat")


def test_chat_prompt_logprobs_validate_as_vllms_response(rest: httpx.Client) -> None:
    """Chat's prompt_logprobs in vLLM's shape (issue #45 item 4): null, then
    {"<token id>": {logprob, rank, decoded_token}} per prompt position, so
    the answer parses as vLLM's own ChatCompletionResponse (OpenAI-style
    entries did not); a stream's first chunk carries the same."""
    body = {**UNARY_BODIES["chat"][1], "prompt_logprobs": 2, "return_token_ids": True}
    r = rest.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    answer = r.json()
    parsed = _vllm_models()["chat"].model_validate(answer)
    prompt = answer["prompt_token_ids"]
    assert parsed.prompt_logprobs is not None and len(parsed.prompt_logprobs) == len(prompt) > 1
    assert parsed.prompt_logprobs[0] is None and answer["prompt_logprobs"][0] is None
    for entry, token_id in zip(parsed.prompt_logprobs[1:], prompt[1:], strict=True):
        assert entry is not None and token_id in entry and 1 <= len(entry) <= 3
        assert all(lp.rank is not None and lp.decoded_token is not None for lp in entry.values())
    r = rest.post("/v1/chat/completions", json={**body, "stream": True})
    first = next(c for c in sse_json(r.content) if "prompt_logprobs" in c)
    assert first["prompt_logprobs"] == answer["prompt_logprobs"]


@pytest.mark.parametrize("kind", sorted(UNARY_BODIES))
def test_kv_transfer_params_round_trip_over_rest(rest: httpx.Client, kind: str) -> None:
    """A P/D proxy's handshake in the JSON body reaches the engine and the
    fake connector's prefill handoff comes back as vLLM prints it (integers
    stay integers); the answer validates as vLLM's own response model."""
    path, body = UNARY_BODIES[kind]
    r = rest.post(path, json={**body, "kv_transfer_params": {"do_remote_decode": True}})
    assert r.status_code == 200, r.text
    answer = r.json()["kv_transfer_params"]
    assert answer["do_remote_prefill"] is True and answer["remote_port"] == 5600
    blocks = answer["remote_block_ids"]
    assert type(answer["remote_port"]) is int and blocks == list(range(len(blocks))) and blocks
    parsed = _vllm_models()[kind].model_validate(r.json())
    assert parsed.kv_transfer_params == answer
    r = rest.post(path, json={**body, "ec_transfer_params": {"x": 1}})
    assert r.status_code == 400 and r.json()["error"]["param"] == "ec_transfer_params"
