"""Chat's `echo` (vLLM's field) on the FakeEngine: the last message's text
before each choice's content when its role is the reply's (unary: in the
content; streamed: a chunk per choice after the role chunk, with no ids),
the prompt's logprobs asked with it, the generated ids unchanged. vLLM's
own server answers the same bodies alike in
tests/gateway/test_vllm_side_by_side.py."""

from __future__ import annotations

from typing import Any

import pytest

from tests.rpc import chat_request, stream_ids, stream_text

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)

PREFIX = "The capital is"
CONTINUE: dict[str, Any] = {
    "messages": [{"role": "user", "content": "What is the capital of France?"},
                 {"role": "assistant", "content": PREFIX}],
    "add_generation_prompt": False, "continue_final_message": True}


def test_unary_content_starts_with_the_continued_message(fake_stub) -> None:
    plain = fake_stub.CreateChatCompletion(chat_request(return_token_ids=True, **CONTINUE),
                                           timeout=10)
    echoed = fake_stub.CreateChatCompletion(
        chat_request(return_token_ids=True, echo=True, **CONTINUE), timeout=10)
    [p], [e] = plain.choices, echoed.choices
    assert e.message.content == PREFIX + p.message.content
    assert list(e.token_ids) == list(p.token_ids)  # the ids are the generated ones only
    assert echoed.usage.completion_tokens == plain.usage.completion_tokens
    # vLLM's: echo asks the prompt's logprobs (top_logprobs of them; 0 unset)
    assert not plain.prompt_logprobs
    assert len(echoed.prompt_logprobs) == len(echoed.prompt_token_ids)


def test_another_role_last_echoes_nothing(fake_stub) -> None:
    plain = fake_stub.CreateChatCompletion(chat_request(), timeout=10)
    echoed = fake_stub.CreateChatCompletion(chat_request(echo=True), timeout=10)
    assert echoed.choices[0].message.content == plain.choices[0].message.content
    assert echoed.prompt_logprobs  # asked all the same, as vLLM


@pytest.mark.parametrize("n", [1, 2])
def test_streamed_echo_is_one_chunk_per_choice_after_the_role_chunk(fake_stub, n) -> None:
    req = chat_request(return_token_ids=True, echo=True, n=n, temperature=0 if n == 1 else 1,
                       stream_options={"include_usage": True, "continuous_usage_stats": True},
                       **CONTINUE)
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    assert [c.delta.role for c in chunks[0].choices] == ["assistant"] * n
    echoes = chunks[1:1 + n]
    assert [[(c.index, c.delta.content) for c in k.choices] for k in echoes] == [
        [(i, PREFIX)] for i in range(n)]
    assert not any(c.token_ids for k in echoes for c in k.choices)
    assert all(k.usage.completion_tokens == 0 for k in echoes)
    texts, ids = stream_text(chunks), stream_ids(chunks)
    assert all(texts[i].startswith(PREFIX) and ids[i] for i in range(n))
    if n == 1:  # greedy: the unary answer, echo included, every id once
        unary = fake_stub.CreateChatCompletion(req, timeout=10).choices[0]
        assert (texts[0], ids[0]) == (unary.message.content, list(unary.token_ids))


def test_text_parts_are_joined_by_newlines(fake_stub) -> None:
    body = dict(CONTINUE, messages=[
        CONTINUE["messages"][0],
        {"role": "assistant", "content": [{"type": "text", "text": "The capital"},
                                          {"type": "text", "text": "is"}]}])
    plain = fake_stub.CreateChatCompletion(chat_request(**body), timeout=10)
    echoed = fake_stub.CreateChatCompletion(chat_request(echo=True, **body), timeout=10)
    assert echoed.choices[0].message.content == (
        "The capital\nis" + plain.choices[0].message.content)


def test_a_token_in_prompt_echoes_nothing(fake_stub) -> None:
    ids = list(fake_stub.CreateChatCompletion(chat_request(return_token_ids=True, **CONTINUE),
                                              timeout=10).prompt_token_ids)
    body = {"messages": [], "nvext": {"token_data": ids}, "add_generation_prompt": False}
    plain = fake_stub.CreateChatCompletion(chat_request(**body), timeout=10)
    echoed = fake_stub.CreateChatCompletion(chat_request(echo=True, **body), timeout=10)
    assert echoed.choices[0].message.content == plain.choices[0].message.content
