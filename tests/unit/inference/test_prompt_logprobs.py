"""prompt_logprobs are returned wherever they are asked (issue #11 item 6):
unary chat, streamed chat (first chunk), Generate and StreamGenerate (first
chunk), one entry per prompt position, in vLLM's shape (the first null),
the same entries whichever way they were asked."""

from __future__ import annotations

from google.protobuf import json_format

from tests.rpc import chat_request
from tokenwire.v1 import generate_pb2

PROMPT = [1, 75, 104, 33, 20]


def _generate(**sampling):
    return json_format.ParseDict(
        {"token_ids": PROMPT, "sampling_params": {"max_tokens": 3, **sampling}},
        generate_pb2.GenerateRequest())


def _check_vllm_shape(values, prompt: list[int], k: int) -> None:
    """vLLM's shape: null, then {"<token id>": {logprob, rank, decoded_token}}
    holding the prompt token and at most k alternatives besides it."""
    entries = [json_format.MessageToDict(v) for v in values]
    assert len(entries) == len(prompt) > 1 and entries[0] is None
    for entry, token_id in zip(entries[1:], prompt[1:], strict=True):
        assert str(token_id) in entry and 1 <= len(entry) <= k + 1
        assert all(set(v) == {"logprob", "rank", "decoded_token"} for v in entry.values())
        assert all(isinstance(v["logprob"], float) and v["logprob"] <= 0 for v in entry.values())


def test_chat_returns_them_in_vllms_shape_unary_and_on_the_first_chunk(fake_stub) -> None:
    # vLLM's ChatCompletionResponse.prompt_logprobs (issue #45 item 4): the
    # same shape as completion's and Generate's, not OpenAI-style entries
    req = chat_request(max_tokens=3, prompt_logprobs=2, return_token_ids=True)
    unary = fake_stub.CreateChatCompletion(req, timeout=10)
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    prompt = list(unary.prompt_token_ids)
    _check_vllm_shape(unary.prompt_logprobs, prompt, 2)
    entries = [json_format.MessageToDict(v) for v in unary.prompt_logprobs]
    assert any(len(e) == 3 for e in entries[1:])  # the prompt token and 2 alternatives
    assert list(chunks[0].prompt_logprobs) == list(unary.prompt_logprobs)
    assert not any(c.prompt_logprobs for c in chunks[1:])
    zero = fake_stub.CreateChatCompletion(
        chat_request(max_tokens=1, prompt_logprobs=0, return_token_ids=True), timeout=10)
    _check_vllm_shape(zero.prompt_logprobs, list(zero.prompt_token_ids), 0)


def test_generate_returns_them_unary_and_streamed(fake_stub) -> None:
    unary = fake_stub.Generate(_generate(prompt_logprobs=1), timeout=10)
    chunks = list(fake_stub.StreamGenerate(_generate(prompt_logprobs=1), timeout=10))
    # vLLM's shape (issue #28; prime-rl's prefill scoring reads it): null,
    # then {"<token id>": {logprob, rank, decoded_token}} with the prompt token
    entries = [json_format.MessageToDict(v) for v in unary.prompt_logprobs]
    assert len(entries) == len(PROMPT) and entries[0] is None
    for entry, token_id in zip(entries[1:], PROMPT[1:], strict=True):
        assert str(token_id) in entry and 1 <= len(entry) <= 2
        assert all(set(v) == {"logprob", "rank", "decoded_token"} for v in entry.values())
    assert list(chunks[0].prompt_logprobs) == list(unary.prompt_logprobs)
    assert not any(c.prompt_logprobs for c in chunks[1:])
    assert sum(len(c.choices[0].token_ids) for c in chunks if c.choices) == 3


def test_no_prompt_logprobs_unless_asked(fake_stub) -> None:
    assert not fake_stub.Generate(_generate(), timeout=10).prompt_logprobs
    chunks = list(fake_stub.StreamChatCompletion(chat_request(max_tokens=2), timeout=10))
    assert not any(c.prompt_logprobs for c in chunks)
