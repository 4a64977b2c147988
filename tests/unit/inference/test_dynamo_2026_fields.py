"""Dynamo's 2026 nvext fields (issue #14 item 5): extra_fields
"prompt_logprobs" (vLLM's native shape in nvext) on chat and completions,
unary and streamed; agent_hints.strict_priority accepted."""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from tests.rpc import chat_request
from tokenwire.v1 import completion_pb2


def native(entries: list[Any]) -> list[Any]:
    return [json_format.MessageToDict(v) for v in entries]


def check_native(entries: list[Any], prompt_ids: list[int], k: int) -> None:
    assert len(entries) == len(prompt_ids) and entries[0] is None
    for entry, token_id in zip(entries[1:], prompt_ids[1:], strict=True):
        assert str(token_id) in entry  # the prompt token itself
        assert 1 <= len(entry) <= k + 1
        for value in entry.values():
            assert set(value) == {"logprob", "rank", "decoded_token"} and value["logprob"] <= 0


def test_chat_extra_field_prompt_logprobs(fake_stub) -> None:
    req = chat_request(max_tokens=2, prompt_logprobs=2, return_token_ids=True,
                       nvext={"extra_fields": ["prompt_logprobs"]})
    resp = fake_stub.CreateChatCompletion(req, timeout=10)
    check_native(native(resp.nvext.prompt_logprobs), list(resp.prompt_token_ids), 2)
    assert len(resp.prompt_logprobs) == len(resp.prompt_token_ids)  # the root field stays


def test_extra_field_alone_asks_for_the_prompt_token(fake_stub) -> None:
    req = chat_request(
        max_tokens=2, return_token_ids=True, nvext={"extra_fields": ["prompt_logprobs"]}
    )
    resp = fake_stub.CreateChatCompletion(req, timeout=10)
    check_native(native(resp.nvext.prompt_logprobs), list(resp.prompt_token_ids), 0)


def test_chat_stream_sends_them_on_the_first_chunk(fake_stub) -> None:
    req = chat_request(max_tokens=2, prompt_logprobs=1, return_token_ids=True,
                       nvext={"extra_fields": ["prompt_logprobs"]})
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    check_native(native(chunks[0].nvext.prompt_logprobs), list(chunks[0].prompt_token_ids), 1)
    assert not any(c.nvext.prompt_logprobs for c in chunks[1:])


def test_completion_unary_and_stream(fake_stub) -> None:
    body = {"prompt": [70, 71, 72, 73], "max_tokens": 2, "prompt_logprobs": 1,
            "nvext": {"extra_fields": ["prompt_logprobs", "prompt_token_ids"]}}
    req = json_format.ParseDict(body, completion_pb2.CreateCompletionRequest())
    resp = fake_stub.CreateCompletion(req, timeout=10)
    check_native(native(resp.nvext.prompt_logprobs), [70, 71, 72, 73], 1)
    chunks = list(fake_stub.StreamCompletion(req, timeout=10))
    assert list(chunks[0].nvext.prompt_token_ids) == [70, 71, 72, 73]
    check_native(native(chunks[0].nvext.prompt_logprobs), [70, 71, 72, 73], 1)


def test_strict_priority_is_accepted(fake_stub) -> None:
    req = chat_request(max_tokens=2, nvext={"agent_hints": {"strict_priority": 3}})
    assert fake_stub.CreateChatCompletion(req, timeout=10).choices[0].finish_reason
