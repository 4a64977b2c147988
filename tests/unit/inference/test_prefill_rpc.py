"""Speculative prefill after plain chat RPCs (not only in a Session): the
data plane starts it from the ids the run produced (no engine wrapper)."""

from __future__ import annotations

import time

import pytest

from tests.rpc import chat_request
from tokenwire.server.engine.fake.engine import EOS, FakeEngine

HINT = {"agent_hints": {"speculative_prefill": True}}


def _prefills(engine: FakeEngine, since: int, *, expect: int) -> list:
    """The prefill requests sent since `since`, once `expect` of them were
    sent (prefills start in the background, after the response) and ran."""
    deadline = time.monotonic() + 5
    found: list = []
    while time.monotonic() < deadline:
        found = [r for r in engine.requests[since:] if r.request_id.startswith("prefill-")]
        if len(found) >= expect and not engine.running:
            break
        time.sleep(0.01)
    time.sleep(0.05)  # nothing more arrives
    return [r for r in engine.requests[since:] if r.request_id.startswith("prefill-")]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_chat_rpc_prefills_the_exact_next_prefix(fake_stub, fake_engine, stream) -> None:
    since = len(fake_engine.requests)
    req = chat_request(return_token_ids=True, cache_salt="salt-rpc", nvext=HINT)
    if stream:
        chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
        prompt = list(chunks[0].prompt_token_ids)
        completion = [t for c in chunks for ch in c.choices for t in ch.token_ids]
    else:
        resp = fake_stub.CreateChatCompletion(req, timeout=10)
        prompt, completion = list(resp.prompt_token_ids), list(resp.choices[0].token_ids)
    assert completion[-1] == EOS
    [prefill] = _prefills(fake_engine, since, expect=1)
    newline = fake_engine.encode("\n", False)[0]
    assert prefill.prompt_token_ids == prompt + completion + [newline]
    assert prefill.cache_salt == "salt-rpc" and prefill.params.max_tokens == 1


def test_no_prefill_without_the_hint_or_for_several_choices(fake_stub, fake_engine) -> None:
    since = len(fake_engine.requests)
    fake_stub.CreateChatCompletion(chat_request(), timeout=10)
    list(fake_stub.StreamChatCompletion(chat_request(n=2, temperature=1.0, nvext=HINT), timeout=10))
    assert _prefills(fake_engine, since, expect=0) == []
