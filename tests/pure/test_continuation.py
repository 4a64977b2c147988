"""Continuation resolution: stored prompt + chosen completion + suffix."""

from __future__ import annotations

import grpc
import pytest

from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.core.errors import NotFound, TokenwireError
from tokenwire.server.engine.fake.engine import IM_END, FakeEngine
from tokenwire.server.inference.continuation import continuation_messages, resolve_continuation
from tokenwire.server.inference.continuation_store import ContinuationStore, StoredTurn
from tokenwire.server.inference.turns import TurnTemplates
from tokenwire.v1 import chat_pb2, session_pb2

ENGINE = FakeEngine(max_model_len=64)
SESSION = "s1"


def _store() -> ContinuationStore:
    store = ContinuationStore(max_tokens=10_000, session_max_tokens=10_000, session_max_requests=8)
    assert store.put(SESSION, "a", StoredTurn.of([1, 10, 11], [[20, 21, IM_END], [30]], "salt-a"))
    return store


def _resolve(c: session_pb2.Continuation, *, running: set[str] | None = None, rid: str = "b"):
    return resolve_continuation(
        c, session_id=SESSION, request_id=rid, running=running or set(), options=RenderOptions(),
        store=_store(), turns=TurnTemplates(ENGINE), engine=ENGINE,
    )


def _error(c: session_pb2.Continuation, **kw: object) -> TokenwireError:
    with pytest.raises(TokenwireError) as exc:
        _resolve(c, **kw)  # type: ignore[arg-type]
    return exc.value


def test_suffix_ids_follow_the_first_choice_and_keep_the_salt() -> None:
    r = _resolve(session_pb2.Continuation(previous_request_id="a", suffix_token_ids=[40, 41]))
    assert r.prompt == [1, 10, 11, 20, 21, IM_END, 40, 41]
    assert r.suffix == [40, 41]
    assert r.cache_salt == "salt-a"


def test_choice_index_picks_the_completion() -> None:
    r = _resolve(session_pb2.Continuation(previous_request_id="a", choice_index=1))
    assert (r.prompt, r.suffix) == ([1, 10, 11, 30], [])


def test_messages_are_rendered_after_the_completion_token_exact() -> None:
    c = session_pb2.Continuation(previous_request_id="a")
    c.messages.add(role="user").content.string_value = "more"
    r = _resolve(c)
    expected_suffix = TurnTemplates(ENGINE).suffix(
        RenderOptions(), [20, 21, IM_END], [{"role": "user", "content": "more"}]
    )
    assert r.suffix == expected_suffix and r.suffix[0] != IM_END  # EOS not repeated
    assert r.prompt == [1, 10, 11, 20, 21, IM_END, *expected_suffix]


@pytest.mark.parametrize(
    ("continuation", "code", "param"),
    [
        (session_pb2.Continuation(), grpc.StatusCode.INVALID_ARGUMENT,
         "continuation.previous_request_id"),
        (session_pb2.Continuation(previous_request_id="zz"), grpc.StatusCode.NOT_FOUND,
         "continuation.previous_request_id"),
        (session_pb2.Continuation(previous_request_id="a", choice_index=2),
         grpc.StatusCode.INVALID_ARGUMENT, "continuation.choice_index"),
        (session_pb2.Continuation(previous_request_id="a", suffix_token_ids=[999]),
         grpc.StatusCode.INVALID_ARGUMENT, "continuation.suffix_token_ids"),
        (session_pb2.Continuation(previous_request_id="a", suffix_token_ids=[5] * 60),
         grpc.StatusCode.INVALID_ARGUMENT, "continuation"),
    ],
    ids=["no-previous", "unknown", "choice-out-of-range", "suffix-beyond-vocab", "too-long"],
)
def test_bad_continuations_name_the_field(continuation, code, param) -> None:
    err = _error(continuation)
    assert (err.code, err.param) == (code, param)


def test_ids_and_messages_together_are_refused() -> None:
    c = session_pb2.Continuation(previous_request_id="a", suffix_token_ids=[5])
    c.messages.add(role="user").content.string_value = "x"
    assert _error(c).param == "continuation"


def test_a_running_request_cannot_be_continued_except_by_its_own_id() -> None:
    c = session_pb2.Continuation(previous_request_id="a")
    err = _error(c, running={"a"})
    assert err.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "still running" in err.message
    assert _resolve(c, running={"a"}, rid="a").prompt == [1, 10, 11, 20, 21, IM_END]


def test_message_errors_are_named_inside_the_continuation() -> None:
    msgs = [chat_pb2.ChatMessage(role="wizard")]
    with pytest.raises(TokenwireError) as exc:
        continuation_messages(msgs)
    assert exc.value.param == "continuation.messages[0].role"
    assert exc.value.message.startswith("continuation.messages[0].role")


def test_a_busy_session_evicts_its_own_history_first() -> None:
    store = ContinuationStore(max_tokens=100, session_max_tokens=100, session_max_requests=100)
    turn = StoredTurn.of([1] * 15, [[2] * 5], None)  # 20 tokens
    assert store.put("quiet", "q0", turn)  # the oldest entry of all
    for i in range(8):  # a busy session keeps writing past the server-wide limit
        assert store.put("busy", f"b{i}", turn)
    assert store.tokens == 100
    assert store.get("quiet", "q0") is not None  # the quiet session keeps its turn
    with pytest.raises(NotFound) as info:
        store.get("busy", "b0")
    assert info.value.reason == "CONTINUATION_EVICTED"
