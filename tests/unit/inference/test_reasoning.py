"""reasoning_content split from <think>...</think> text (with --reasoning-parser)."""

from __future__ import annotations

from tests.rpc import chat_request, stream_ids
from tokenwire.server.inference.reasoning import ReasoningStream, split_text

MARKERS = ("<think>", "</think>")
THINK = [{"role": "user", "content": "Think first. Then greet me."}]


def test_split_text() -> None:
    assert split_text("<think>hmm</think>\n\nHi", MARKERS) == ("hmm", "Hi")
    assert split_text("Hi <think>x</think>", MARKERS) == (None, "Hi <think>x</think>")
    assert split_text("<think>cut off", MARKERS) == ("cut off", "")


def test_stream_any_split() -> None:
    text = "<think>The user wants a greeting.</think>\n\nHello!"
    for size in (1, 2, 5, 100):
        r = ReasoningStream(MARKERS)
        thought, content = "", ""
        for i in range(0, len(text), size):
            a, b = r.feed(text[i : i + size])
            thought, content = thought + a, content + b
        a, b = r.flush()
        assert (thought + a, content + b) == ("The user wants a greeting.", "Hello!"), size
    r = ReasoningStream(MARKERS)
    assert r.feed("<th") == ("", "")
    assert r.feed("ank you") == ("", "<thank you")


def test_unary_and_stream_reasoning_content(fake_stub) -> None:
    req = chat_request(messages=THINK, return_token_ids=True)
    resp = fake_stub.CreateChatCompletion(req, timeout=10)
    m = resp.choices[0].message
    assert (m.reasoning_content, m.content) == ("The user wants a greeting.", "Hello!")
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    thought = "".join(ch.delta.reasoning_content for c in chunks for ch in c.choices)
    content = "".join(ch.delta.content for c in chunks for ch in c.choices)
    assert (thought, content) == (m.reasoning_content, m.content)
    assert stream_ids(chunks)[0] == list(resp.choices[0].token_ids)
