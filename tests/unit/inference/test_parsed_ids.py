"""Item 4 of #34: with parsers on, token-in chat (nvext.token_data) parses
text only. Every id the engine sampled reaches the client once, in order,
in the chunk it came in, with its logprobs and weight-version spans, while
the parser holds text back (a partial <tool_call> tag, a partial </think>),
whatever the chunking (stream_interval)."""

from __future__ import annotations

import json

import pytest

from tests.rpc import chat_request, stream_ids
from tokenwire.server.engine.fake.engine import FakeEngine

TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]


def _token_in(engine: FakeEngine, text: str) -> list[int]:
    return engine.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n", False)


@pytest.mark.parametrize("interval", [1, 2, 3, 7])
@pytest.mark.parametrize("prompt, tools", [
    ("tools: get_weather", TOOLS),  # the fake answers with a Hermes call
    ("Think first.", None),  # the fake answers <think>…</think>\n\nHello!
])
def test_token_in_ids_logprobs_and_spans_pass_the_parsers(fake_stub, fake_engine, interval,
                                                          prompt, tools) -> None:
    fields = {"nvext": {"token_data": _token_in(fake_engine, prompt)}, "return_token_ids": True,
              "logprobs": True, "top_logprobs": 2, "max_tokens": 200}
    if tools:
        fields["tools"] = tools
    unary = fake_stub.CreateChatCompletion(chat_request(**fields), timeout=10)
    chunks = list(fake_stub.StreamChatCompletion(
        chat_request(stream_options={"stream_interval": interval}, **fields), timeout=10))
    ids = list(unary.choices[0].token_ids)
    assert stream_ids(chunks)[0] == ids  # once each, in order, unchanged
    for chunk in chunks:  # each chunk's logprobs are exactly its ids'
        for ch in chunk.choices:
            assert [lp.token_id for lp in ch.logprobs.content] == list(ch.token_ids) or (
                not ch.token_ids and not ch.logprobs.content)
    assert [lp.token_id for lp in unary.choices[0].logprobs.content] == ids
    spans = [s for c in chunks for ch in c.choices for s in ch.weight_versions]
    assert spans and spans[-1].end == len(ids)
    assert list(unary.choices[0].weight_versions) == spans
    # the text parsed the same way, unary and streamed
    m = unary.choices[0].message
    content = "".join(ch.delta.content for c in chunks for ch in c.choices)
    reasoning = "".join(ch.delta.reasoning_content for c in chunks for ch in c.choices)
    calls = [tc for c in chunks for ch in c.choices for tc in ch.delta.tool_calls]
    assert (reasoning, content) == (m.reasoning_content, m.content)
    if tools:
        assert [c.function.name for c in calls] == [c.function.name for c in m.tool_calls]
        assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
        assert chunks[-1].choices[0].finish_reason == "tool_calls"
    # the ids the parser held text back for went out in the chunks they came in
    held = [ch for c in chunks for ch in c.choices
            if ch.token_ids and not (ch.delta.content or ch.delta.reasoning_content
                                     or ch.delta.tool_calls)]
    assert held
