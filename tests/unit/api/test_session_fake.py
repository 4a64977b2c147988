"""The Session stream on the FakeEngine: multiplexing, per-request errors,
cancel/close/drop, continuation, limits, speculative prefill."""

from __future__ import annotations

import collections.abc
import time

import grpc
import pytest
from google.rpc import code_pb2

from tests.rpc import error_info
from tests.servers import ThreadServer, fake_serving
from tests.session_rpc import (
    RawSession,
    by_request,
    cancel,
    close,
    kinds,
    start_chat,
    start_completion,
    start_generate,
)
from tokenwire.server.engine.fake.engine import EOS, FakeEngine
from tokenwire.v1 import chat_pb2, models_pb2, service_pb2_grpc, session_pb2, tokenize_pb2

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


NEXT_USER = [{"role": "user", "content": "And Germany?"}]


@pytest.fixture(scope="module")
def slow_engine() -> FakeEngine:
    return FakeEngine(max_model_len=512, block_size=16, token_delay=0.005)


@pytest.fixture(scope="module")
def slow_server(slow_engine: FakeEngine,
                transport: str) -> collections.abc.Iterator[ThreadServer]:
    with fake_serving(
        slow_engine, served_model_name="fake-model", grpc_transport=transport,
        continuation_session_max_requests=3, continuation_session_max_tokens=2000,
        continuation_max_tokens=4000, session_max_requests=8,
    ) as server:
        yield server


@pytest.fixture(scope="module")
def slow_stub(
    slow_server: ThreadServer,
) -> collections.abc.Iterator[service_pb2_grpc.TokenwireServiceStub]:
    with grpc.insecure_channel(slow_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


def wait_idle(
    stub: service_pb2_grpc.TokenwireServiceStub, timeout: float = 10
) -> models_pb2.GetStatsResponse:
    deadline = time.monotonic() + timeout
    while True:
        stats = stub.GetStats(models_pb2.GetStatsRequest(), timeout=5)
        if (
            stats.engine_requests == 0 and stats.sessions == 0 and stats.speculative_prefills == 0
        ) or time.monotonic() > deadline:
            return stats
        time.sleep(0.02)


def test_requests_multiplex_and_each_ends_once(fake_stub) -> None:
    s = RawSession(fake_stub)
    s.send(
        start_chat("unary", return_token_ids=True),
        start_chat("streamed", stream=True, return_token_ids=True),
        start_generate(
            "gen", token_ids=[1, 50, 60], sampling_params={"max_tokens": 4}, return_token_ids=True
        ),
        start_generate(
            "gen-stream", token_ids=[1, 50, 60], stream=True, sampling_params={"max_tokens": 3}
        ),
    )
    s.half_close()
    events = by_request(s.drain())
    assert s.status is None, "half-close ends the stream with OK once requests finished"
    assert kinds(events["unary"]) == ["chat_result", "done"]
    assert kinds(events["gen"]) == ["generate_result", "done"]
    streamed = events["streamed"]
    assert kinds(streamed)[-1] == "done" and set(kinds(streamed)[:-1]) == {"chat_chunk"}
    ids = [t for ev in streamed[:-1] for c in ev.chat_chunk.choices for t in c.token_ids]
    assert ids == list(events["unary"][0].chat_result.choices[0].token_ids)
    assert ids[-1] == EOS
    assert kinds(events["gen-stream"]).count("generate_chunk") == 3
    for evs in events.values():
        assert [k for k in kinds(evs) if k in ("done", "error")] == [kinds(evs)[-1]]
        assert evs[-1].done.continuable


def test_bad_request_gets_its_own_error_and_session_goes_on(fake_stub) -> None:
    s = RawSession(fake_stub)
    s.send(start_chat("bad", max_tokens=-1), start_chat("good-1", max_tokens=5))
    err = s.until_terminal("bad")
    assert kinds(err) == ["error"]
    e = err[0].error
    assert e.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert (
        e.param == "max_tokens" and e.reason == "VALUE_OUT_OF_RANGE" and "max_tokens" in e.message
    )
    assert kinds(s.until_terminal("good-1")) == ["chat_result", "done"]
    s.send(start_chat("bad-model", model="nope"), start_chat("good-2", max_tokens=5))
    assert s.until_terminal("bad-model")[0].error.reason == "MODEL_NOT_FOUND"
    assert kinds(s.until_terminal("good-2")) == ["chat_result", "done"]
    s.send(start_generate("bad-gen", token_ids=[]))
    assert s.until_terminal("bad-gen")[0].error.param == "token_ids"
    s.half_close()
    assert s.drain() == [] and s.status is None


def test_cancel_stops_one_request_others_finish(slow_stub, slow_engine) -> None:
    s = RawSession(slow_stub)
    rids = [f"r{i}" for i in range(6)]
    s.send(
        *[
            start_chat(r, ignore_eos=True, max_tokens=60, stream=True, return_token_ids=True)
            for r in rids
        ]
    )
    taken = []
    for r in ("r0", "r2", "r4"):  # wait until each has produced something, then cancel them
        taken += s.until(
            lambda e, r=r: e.request_id == r and e.WhichOneof("event") == "chat_chunk", 10
        )
    s.send(cancel("r0"), cancel("r2"), cancel("r4"), cancel("not-running"))
    s.half_close()
    events = by_request(taken + s.drain())
    assert s.status is None
    for r in ("r0", "r2", "r4"):
        last = events[r][-1]
        assert (
            last.error.code == grpc.StatusCode.CANCELLED.value[0]
            and last.error.reason == "REQUEST_CANCELLED"
        )
        got = sum(len(c.token_ids) for ev in events[r] for c in ev.chat_chunk.choices)
        assert got < 60, "the cancelled request stopped early"
    for r in ("r1", "r3", "r5"):
        assert events[r][-1].WhichOneof("event") == "done"
        got = sum(len(c.token_ids) for ev in events[r] for c in ev.chat_chunk.choices)
        assert got == 60
    assert "not-running" not in events
    assert wait_idle(slow_stub).engine_requests == 0
    assert not slow_engine.running


def test_close_aborts_everything_then_ends_ok(slow_stub, slow_engine) -> None:
    s = RawSession(slow_stub)
    s.send(*[start_chat(f"c{i}", ignore_eos=True, max_tokens=200, stream=True) for i in range(3)])
    s.until(lambda e: e.WhichOneof("event") == "chat_chunk", 10)
    s.send(close(), start_chat("after-close"))
    events = by_request(s.drain())
    assert s.status is None
    assert sorted(events) == ["c0", "c1", "c2"], "nothing runs after close"
    for evs in events.values():
        assert evs[-1].error.code == grpc.StatusCode.CANCELLED.value[0]
        assert "closed" in evs[-1].error.message
    stats = wait_idle(slow_stub)
    assert stats.engine_requests == 0 and stats.sessions == 0


def test_dropping_the_stream_aborts_its_requests(slow_stub, slow_engine) -> None:
    s = RawSession(slow_stub)
    s.send(*[start_chat(f"d{i}", ignore_eos=True, max_tokens=300, stream=True) for i in range(3)])
    s.until(lambda e: e.WhichOneof("event") == "chat_chunk", 10)
    assert slow_stub.GetStats(models_pb2.GetStatsRequest(), timeout=5).sessions == 1
    s.call.cancel()
    stats = wait_idle(slow_stub)
    assert stats.engine_requests == 0 and stats.sessions == 0 and stats.continuation_tokens == 0
    assert not slow_engine.running


@pytest.mark.parametrize(
    ("msgs", "param", "reason"),
    [
        ([session_pb2.SessionRequest()], "kind", "FIELD_REQUIRED"),
        ([start_chat("")], "start.request_id", "INVALID_REQUEST_ID"),
        ([start_chat("same", ignore_eos=True, max_tokens=300), start_chat("same")],
         "start.request_id", "DUPLICATE_REQUEST_ID"),
    ],
    ids=["empty-message", "no-request-id", "duplicate-running-id"],
)
def test_protocol_errors_end_the_session_with_a_status(slow_stub, msgs, param, reason) -> None:
    s = RawSession(slow_stub)
    s.send(*msgs)
    events = s.drain()
    assert s.status is not None and s.status.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(s.status)
    assert info.metadata["param"] == param and info.reason == reason
    for ev in events:  # a request that was running ends with CANCELLED first
        if ev.WhichOneof("event") == "error":
            assert ev.error.reason == "REQUEST_CANCELLED"
    assert wait_idle(slow_stub).engine_requests == 0


def test_too_many_running_requests_is_a_request_error(slow_stub) -> None:
    s = RawSession(slow_stub)
    s.send(*[start_chat(f"m{i}", ignore_eos=True, max_tokens=100, stream=True) for i in range(9)])
    err = s.until_terminal("m8")
    assert err[-1].error.code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    s.send(close())
    s.drain()


def test_continuation_with_messages_equals_full_rendering(fake_stub, fake_engine) -> None:
    s = RawSession(fake_stub)
    s.send(start_chat("t1", return_token_ids=True))
    t1 = s.until_terminal("t1")[0].chat_result
    s.send(
        start_chat(
            "t2",
            return_token_ids=True,
            continuation={"previous_request_id": "t1", "messages": NEXT_USER},
        )
    )
    t2_events = s.until_terminal("t2")
    t2, done = t2_events[0].chat_result, t2_events[1].done
    expected = (
        list(t1.prompt_token_ids) + list(t1.choices[0].token_ids) + list(done.suffix_token_ids)
    )
    assert list(t2.prompt_token_ids) == expected == list(done.prompt_token_ids)
    # The fake template is ChatML: after EOS comes "\n", then the new turn and the opener.
    assert fake_engine.decode(list(done.suffix_token_ids)) == (
        "\n<|im_start|>user\nAnd Germany?<|im_end|>\n<|im_start|>assistant\n"
    )
    # ... which is exactly what rendering the whole conversation gives here.
    full = fake_stub.Tokenize(tokenize_pb2.TokenizeRequest(messages=[
        chat_pb2.ChatMessage(role="user",
                             content={"string_value": "What is the capital of France?"}),
        chat_pb2.ChatMessage(role="assistant",
                             content={"string_value": t1.choices[0].message.content}),
        chat_pb2.ChatMessage(role="user", content={"string_value": "And Germany?"}),
    ]), timeout=10).tokens
    assert list(t2.prompt_token_ids) == list(full)
    # Turn 3 continues turn 2, with raw suffix ids.
    s.send(
        start_chat(
            "t3",
            return_token_ids=True,
            continuation={"previous_request_id": "t2", "suffix_token_ids": [1, 50, 51]},
        )
    )
    t3_events = s.until_terminal("t3")
    t3 = t3_events[0].chat_result
    assert list(t3.prompt_token_ids) == list(t2.prompt_token_ids) + list(
        t2.choices[0].token_ids
    ) + [1, 50, 51]
    assert list(t3_events[1].done.suffix_token_ids) == [1, 50, 51]
    s.close()


def test_continuation_without_suffix_continues_as_is_and_generate(fake_stub, fake_engine) -> None:
    s = RawSession(fake_stub)
    s.send(
        start_generate(
            "g1", token_ids=[1, 40, 41], sampling_params={"max_tokens": 5}, cache_salt="salty"
        )
    )
    g1 = s.until_terminal("g1")[0].generate_result
    s.send(
        start_generate(
            "g2",
            continuation={"previous_request_id": "g1"},
            sampling_params={"max_tokens": 2},
            return_token_ids=True,
        )
    )
    g2 = s.until_terminal("g2")[0].generate_result
    assert list(g2.prompt_token_ids) == [1, 40, 41, *g1.choices[0].token_ids]
    assert fake_engine.requests[-1].cache_salt == "salty", "the salt carries over when not given"
    s.send(start_generate("g3", continuation={"previous_request_id": "g2"}, cache_salt="other"))
    s.until_terminal("g3")
    assert fake_engine.requests[-1].cache_salt == "other"
    s.close()


@pytest.mark.parametrize(
    ("continuation", "fields", "code", "param", "reason"),
    [
        ({"previous_request_id": "nope"}, {}, "NOT_FOUND", "continuation.previous_request_id",
         "CONTINUATION_NOT_FOUND"),
        ({"choice_index": 0}, {}, "INVALID_ARGUMENT", "continuation.previous_request_id",
         "FIELD_REQUIRED"),
        ({"previous_request_id": "base", "choice_index": 1}, {}, "INVALID_ARGUMENT",
         "continuation.choice_index", "VALUE_OUT_OF_RANGE"),
        ({"previous_request_id": "base", "suffix_token_ids": [1], "messages": NEXT_USER}, {},
         "INVALID_ARGUMENT", "continuation", "FIELDS_CONFLICT"),
        ({"previous_request_id": "base", "suffix_token_ids": [100000]}, {}, "INVALID_ARGUMENT",
         "continuation.suffix_token_ids", "TOKEN_ID_OUT_OF_VOCAB"),
        ({"previous_request_id": "base", "messages": [{"role": "robot", "content": "x"}]}, {},
         "INVALID_ARGUMENT", "continuation.messages[0].role", "VALUE_NOT_ALLOWED"),
        ({"previous_request_id": "base"}, {"messages": NEXT_USER}, "INVALID_ARGUMENT", "messages",
         "FIELDS_CONFLICT"),
        ({"previous_request_id": "base"}, {"tokens": [1, 2]}, "INVALID_ARGUMENT", "messages",
         "FIELDS_CONFLICT"),
        ({"previous_request_id": "base", "suffix_token_ids": [5] * 600}, {}, "INVALID_ARGUMENT",
         "continuation", "PROMPT_TOO_LONG"),
        ({"previous_request_id": "failed"}, {}, "NOT_FOUND", "continuation.previous_request_id",
         "CONTINUATION_NOT_FOUND"),
    ],
    ids=["unknown", "no-id", "choice", "both-suffixes", "bad-id", "bad-role", "messages-too",
         "tokens-too", "too-long", "failed-request"],
)
def test_continuation_errors(fake_stub, continuation, fields, code, param, reason) -> None:
    s = RawSession(fake_stub)
    s.send(start_chat("base", max_tokens=3), start_chat("failed", max_tokens=-1))
    s.until_terminal("base"), s.until_terminal("failed")
    s.send(start_chat("next", continuation=continuation, **fields))
    ev = s.until_terminal("next")
    assert kinds(ev) == ["error"], ev
    e = ev[0].error
    assert (code_pb2.Code.Name(e.code), e.param, e.reason) == (code, param, reason)
    s.send(start_chat("after", max_tokens=2))
    assert kinds(s.until_terminal("after")) == ["chat_result", "done"]
    s.close()


def test_continuing_a_running_request_is_failed_precondition(slow_stub) -> None:
    s = RawSession(slow_stub)
    s.send(start_chat("long", ignore_eos=True, max_tokens=200, stream=True),
           start_chat("next", continuation={"previous_request_id": "long"}))
    e = s.until_terminal("next")[0].error
    assert (
        e.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
        and e.reason == "CONTINUATION_NOT_FINISHED"
    )
    s.send(close())
    s.drain()


def test_store_evicts_least_recently_used_with_clear_errors(slow_stub) -> None:
    s = RawSession(slow_stub)
    for i in range(4):  # the server keeps 3 finished requests per session
        s.send(start_chat(f"e{i}", max_tokens=4))
        s.until_terminal(f"e{i}")
    s.send(start_chat("x", continuation={"previous_request_id": "e0"}, max_tokens=2))
    e = s.until_terminal("x")[0].error
    assert e.code == grpc.StatusCode.NOT_FOUND.value[0] and e.reason == "CONTINUATION_EVICTED"
    assert "evicted" in e.message and "token ids" in e.message
    s.send(start_chat("y", continuation={"previous_request_id": "e1"}, max_tokens=2))
    assert kinds(s.until_terminal("y")) == ["chat_result", "done"]
    stats = slow_stub.GetStats(models_pb2.GetStatsRequest(), timeout=5)
    assert 0 < stats.continuation_tokens <= 2000
    # Too large to keep at all (2000 tokens per session here): not continuable.
    s.send(start_generate("huge", token_ids=[7] * 500, sampling_params={"max_tokens": 1}))
    s.send(
        start_generate(
            "huge2", continuation={"previous_request_id": "huge"}, sampling_params={"max_tokens": 1}
        )
    )
    s.until_terminal("huge2")
    s.close()
    assert wait_idle(slow_stub).continuation_tokens == 0, "a session's entries go with it"


def test_speculative_prefill_warms_the_exact_next_prefix(fake_stub, fake_engine) -> None:
    hint = {"agent_hints": {"speculative_prefill": True}}
    s = RawSession(fake_stub)
    s.send(start_chat("p1", return_token_ids=True, cache_salt="tenant-p", nvext=hint))
    ev = s.until_terminal("p1")
    t1, done = ev[0].chat_result, ev[1].done
    assert done.speculative_prefill
    wait_idle_engine(fake_engine)
    prefill = next(r for r in reversed(fake_engine.requests) if r.request_id.startswith("prefill-"))
    prefix = (
        list(t1.prompt_token_ids)
        + list(t1.choices[0].token_ids)
        + [fake_engine.encode("\n", False)[0]]
    )
    assert prefill.prompt_token_ids == prefix
    assert (
        prefill.cache_salt == "tenant-p"
        and prefill.params.max_tokens == 1
        and prefill.priority == 10
    )
    s.send(start_chat("p2", continuation={"previous_request_id": "p1", "messages": NEXT_USER}))
    t2 = s.until_terminal("p2")[0].chat_result
    cached = t2.usage.prompt_tokens_details.cached_tokens
    assert cached == len(prefix) // fake_engine.block_size * fake_engine.block_size
    s.close()


def test_speculative_prefill_on_unary_and_stream_calls(fake_stub, fake_engine) -> None:
    from tests.rpc import chat_request

    before = len(fake_engine.requests)
    fake_stub.CreateChatCompletion(
        chat_request(nvext={"agent_hints": {"speculative_prefill": True}}), timeout=10
    )
    list(
        fake_stub.StreamChatCompletion(
            chat_request(nvext={"agent_hints": {"speculative_prefill": True}}), timeout=10
        )
    )
    fake_stub.CreateChatCompletion(chat_request(), timeout=10)  # no hint, no prefill
    wait_idle_engine(fake_engine)
    started = [r.request_id.split("-")[0] for r in fake_engine.requests[before:]]
    assert started.count("prefill") == 2


def wait_idle_engine(engine: FakeEngine, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while engine.running and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert not engine.running


def test_store_limits_per_session_and_global() -> None:
    from tokenwire.server.core.errors import NotFound
    from tokenwire.server.inference.continuation_store import ContinuationStore, StoredTurn

    store = ContinuationStore(max_tokens=100, session_max_tokens=60, session_max_requests=10)
    turn = StoredTurn.of([1] * 15, [[2] * 5], None)  # 20 tokens
    for i in range(3):
        assert store.put("s1", f"r{i}", turn)
    assert store.tokens == 60
    store.get("s1", "r0")  # touch: r1 is now the least recently used
    assert store.put("s1", "r3", turn)  # the session's 60 tokens: evicts r1
    with pytest.raises(NotFound) as exc_info:
        store.get("s1", "r1")
    assert exc_info.value.reason == "CONTINUATION_EVICTED"
    for i in range(3):
        store.put("s2", f"q{i}", turn)
    assert store.tokens == 100
    store.put("s2", "q3", turn)  # over the global 100: the largest session (s2) gives one up
    assert store.tokens == 100
    with pytest.raises(NotFound) as exc_info:
        store.get("s1", "r2")
    assert "server-wide" in exc_info.value.message
    assert not store.put("s3", "big", StoredTurn.of([1] * 61, [[]], None))
    store.drop_session("s1")
    store.drop_session("s2")
    assert store.tokens == 0 and len(store) == 0
    with pytest.raises(NotFound) as exc_info:
        store.get("s1", "r0")
    assert exc_info.value.reason == "CONTINUATION_NOT_FOUND"


def test_one_id_per_conversation_continues_itself(fake_stub) -> None:
    s = RawSession(fake_stub)
    s.send(start_chat("conv", return_token_ids=True))
    prompts = [list(s.until_terminal("conv")[0].chat_result.prompt_token_ids)]
    completions = []
    for q in ("Two?", "Three?"):
        s.send(
            start_chat(
                "conv",
                return_token_ids=True,
                continuation={
                    "previous_request_id": "conv",
                    "messages": [{"role": "user", "content": q}],
                },
            )
        )
        evs = s.until_terminal("conv")
        assert kinds(evs) == ["chat_result", "done"], evs
        prompts.append(list(evs[0].chat_result.prompt_token_ids))
        completions.append(list(evs[0].chat_result.choices[0].token_ids))
    assert prompts[2][: len(prompts[1]) + len(completions[0])] == prompts[1] + completions[0]
    s.close()


def test_completion_in_a_session_streams_and_continues(fake_stub, fake_engine) -> None:
    s = RawSession(fake_stub)
    s.send(start_completion("c1", prompt=[70, 71, 72], max_tokens=4, return_token_ids=True,
                            stream=True))
    events = s.until_terminal("c1")
    chunks = [e.completion_chunk for e in events if e.HasField("completion_chunk")]
    ids = [t for c in chunks for ch in c.choices for t in ch.token_ids]
    assert len(ids) == 4 and events[-1].done.continuable
    s.send(
        start_completion(
            "c2",
            continuation={"previous_request_id": "c1", "suffix_token_ids": [73]},
            max_tokens=2,
            return_token_ids=True,
        )
    )
    c2 = s.until_terminal("c2")[0].completion_result
    assert list(c2.choices[0].prompt_token_ids) == [70, 71, 72, *ids, 73]
    s.send(start_completion("c3", continuation={"previous_request_id": "c2"}, prompt="x"))
    err = s.until_terminal("c3")[-1].error
    assert (err.param, err.reason) == ("prompt", "FIELDS_CONFLICT")
    s.send(start_completion("batch", prompt=[[70], [71]], max_tokens=2))
    events = s.until_terminal("batch")
    assert len(events[0].completion_result.choices) == 2
    assert not events[-1].done.continuable  # a batch is not one turn
    s.close()
