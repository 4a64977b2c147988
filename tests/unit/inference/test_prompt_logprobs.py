"""prompt_logprobs are returned wherever they are asked (issue #11 item 6):
unary chat (as before), streamed chat (first chunk), Generate and
StreamGenerate (first chunk), one entry per prompt position, the first
empty, the same entries whichever way they were asked."""

from __future__ import annotations

from google.protobuf import json_format

from tests.rpc import chat_request
from tokenwire.v1 import generate_pb2

PROMPT = [1, 75, 104, 33, 20]


def _generate(**sampling):
    return json_format.ParseDict(
        {"token_ids": PROMPT, "sampling_params": {"max_tokens": 3, **sampling}},
        generate_pb2.GenerateRequest())


def test_chat_stream_sends_them_on_the_first_chunk(fake_stub) -> None:
    req = chat_request(max_tokens=3, prompt_logprobs=2, return_token_ids=True)
    unary = fake_stub.CreateChatCompletion(req, timeout=10)
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    assert len(unary.prompt_logprobs) == len(unary.prompt_token_ids) > 1
    assert list(chunks[0].prompt_logprobs) == list(unary.prompt_logprobs)
    assert not any(c.prompt_logprobs for c in chunks[1:])
    first, rest = chunks[0].prompt_logprobs[0], chunks[0].prompt_logprobs[1:]
    assert not first.HasField("logprob")
    assert [e.token_id for e in rest] == list(unary.prompt_token_ids[1:])
    assert all(len(e.top_logprobs) == 2 for e in rest)


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
