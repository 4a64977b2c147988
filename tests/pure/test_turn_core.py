"""The conversation's turn logic without I/O (_turn_core.TurnCore), driven
step by step with made-up responses: what each turn sends, how a lost
session continuation falls back to full token ids, and what is recorded.
Conversation and AsyncConversation are loops over these same steps."""

from __future__ import annotations

from typing import Any

import pytest

from tokenwire.client import InvalidArgumentError, NotFoundError, UnavailableError
from tokenwire.client._common import RequestResult
from tokenwire.client._turn_core import (
    FALLBACK_ATTEMPTS,
    Chat,
    CloseSession,
    SessionTurn,
    Step,
    StreamChat,
    Tokenize,
    TurnCore,
    next_step,
)
from tokenwire.client.errors import TokenwireError
from tokenwire.v1 import chat_pb2, session_pb2, tokenize_pb2


def _core(mode: str = "session") -> TurnCore:
    return TurnCore(mode, "Be brief.", None, None, False, {"max_tokens": 8})


def _chat(
    rid: str, prompt: list[int], completion: list[int]
) -> chat_pb2.CreateChatCompletionResponse:
    resp = chat_pb2.CreateChatCompletionResponse(id=rid, prompt_token_ids=prompt)
    choice = resp.choices.add(token_ids=completion, finish_reason="stop")
    choice.message.content = "ok"
    for i in completion:
        choice.logprobs.content.add(logprob=-0.1 * i)
    return resp


def _result(rid: str, prompt: list[int], completion: list[int],
            suffix: list[int] | None = None) -> RequestResult:
    done = session_pb2.SessionRequestDone(suffix_token_ids=suffix or [])
    return RequestResult(rid, done=done, chat=_chat(rid, prompt, completion))


def _run(plan: Any, outcomes: list[Any]) -> list[Step]:
    """Drive a plan: each SessionTurn gets the next outcome (a RequestResult,
    or (error, streamed, ended)); Tokenize / Chat get the next outcome as
    their response. The steps it asked for, in order."""
    steps: list[Step] = []
    reply: Any = None
    while (step := next_step(plan, reply)) is not None:
        steps.append(step)
        reply = None
        if isinstance(step, SessionTurn):
            outcome = outcomes.pop(0)
            if isinstance(outcome, RequestResult):
                step.result = outcome
            else:
                step.error, step.streamed, step.ended = outcome
        elif isinstance(step, (Tokenize, Chat)):
            reply = outcomes.pop(0)
        elif isinstance(step, StreamChat):
            for chunk in outcomes.pop(0):
                step.take(chunk)
    assert not outcomes, "the plan stopped before using every outcome"
    return steps


def _first_turn(core: TurnCore) -> None:
    steps = _run(core.turn("Hi", None, False, {}), [_result("r1", [1, 2, 3], [7, 8])])
    assert [type(s) for s in steps] == [SessionTurn]
    first = steps[0]
    assert isinstance(first, SessionTurn)
    assert first.kwargs["messages"] == [{"role": "system", "content": "Be brief."},
                                        {"role": "user", "content": "Hi"}]
    assert first.kwargs["return_token_ids"] is True and first.kwargs["max_tokens"] == 8


def test_session_turns_continue_by_id_and_record_the_servers_suffix() -> None:
    core = _core()
    _first_turn(core)
    assert (core.turns[0].prompt_ids, core.turns[0].completion_ids) == ([1, 2, 3], [7, 8])
    steps = _run(core.turn("More", None, False, {"max_tokens": 4}),
                 [_result("r2", [], [9], suffix=[5, 6])])
    turn = steps[0]
    assert isinstance(turn, SessionTurn)
    assert turn.kwargs["continue_from"] == "r1" and turn.kwargs["max_tokens"] == 4
    assert turn.kwargs["messages"] == [{"role": "user", "content": "More"}]
    assert core.turns[1].suffix_ids == [5, 6] and core.turns[1].request_id == "r2"


@pytest.mark.parametrize("lost", [
    NotFoundError("gone", reason="CONTINUATION_EVICTED"),
    NotFoundError("gone", reason="CONTINUATION_NOT_FOUND"),
])
def test_a_lost_continuation_is_sent_again_with_the_full_ids(lost: TokenwireError) -> None:
    core = _core()
    _first_turn(core)
    steps = _run(core.turn("More", None, False, {}), [
        (lost, False, False),
        tokenize_pb2.TokenizeResponse(tokens=[5, 6]),
        _result("r3", [1, 2, 3, 7, 8, 5, 6], [9]),
    ])
    assert [type(s) for s in steps] == [SessionTurn, Tokenize, SessionTurn]
    tok, again = steps[1], steps[2]
    assert isinstance(tok, Tokenize) and isinstance(again, SessionTurn)
    assert tok.body == {"messages": [{"role": "user", "content": "More"}], "next_turn": True,
                        "previous_completion_ids": [7, 8]}
    assert again.kwargs["nvext"]["token_data"] == [1, 2, 3, 7, 8, 5, 6]
    assert "continue_from" not in again.kwargs
    turn = core.turns[1]
    assert (turn.request_id, turn.suffix_ids, turn.completion_ids) == ("r3", [5, 6], [9])
    assert turn.prompt_ids[:5] == core.turns[0].prompt_ids + core.turns[0].completion_ids


def test_a_lost_replica_closes_the_session_first_and_given_ids_need_no_tokenize() -> None:
    core = _core()
    _first_turn(core)
    steps = _run(core.turn(None, [5], False, {}), [
        (UnavailableError("replica gone"), False, True),
        _result("r4", [1, 2, 3, 7, 8, 5], [9]),
    ])
    assert [type(s) for s in steps] == [SessionTurn, CloseSession, SessionTurn]
    assert core.turns[1].suffix_ids == [5]


@pytest.mark.parametrize(("error", "streamed", "first"), [
    (NotFoundError("gone", reason="CONTINUATION_EVICTED"), True, False),  # tokens already out
    (InvalidArgumentError("bad", param="max_tokens"), False, False),  # not a lost continuation
    (UnavailableError("down"), False, True),  # nothing to continue from
])
def test_errors_that_must_not_fall_back_are_raised(
    error: TokenwireError, streamed: bool, first: bool
) -> None:
    core = _core()
    if not first:
        _first_turn(core)
    with pytest.raises(type(error)) as exc:
        _run(core.turn("More", None, False, {}), [(error, streamed, False)])
    assert exc.value is error
    assert len(core.turns) == (0 if first else 1)


def test_the_fallback_is_bounded() -> None:
    core = _core()
    _first_turn(core)
    down = UnavailableError("still down")
    outcomes: list[Any] = [(down, False, False)] * FALLBACK_ATTEMPTS
    with pytest.raises(UnavailableError):
        _run(core.turn(None, [5], False, {}), outcomes)
    assert len(core.turns) == 1


def test_tokens_mode_sends_the_previous_ids_on_a_plain_chat() -> None:
    core = _core("tokens")
    steps = _run(core.turn("Hi", None, False, {}), [_chat("c1", [1, 2], [3])])
    assert [type(s) for s in steps] == [Chat]
    chunk = chat_pb2.StreamChatCompletionResponse(id="c2", prompt_token_ids=[1, 2, 3, 4])
    chunk.choices.add(index=0, token_ids=[5, 6], finish_reason="stop")
    steps = _run(core.turn("More", None, True, {}),
                 [tokenize_pb2.TokenizeResponse(tokens=[4]), [chunk]])
    assert [type(s) for s in steps] == [Tokenize, StreamChat]
    stream = steps[1]
    assert isinstance(stream, StreamChat)
    assert stream.body["nvext"]["token_data"] == [1, 2, 3, 4] and stream.body["stream"] is True
    turn = core.turns[1]
    assert (turn.request_id, turn.prompt_ids, turn.completion_ids, turn.suffix_ids) == \
        ("c2", [1, 2, 3, 4], [5, 6], [4])


IMAGE = "data:image/png;base64,iVBORw0KGgo="
LOOK = [{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image_url", "image_url": {"url": IMAGE}}]}]


def test_a_first_turn_with_an_image_sends_it_again_with_full_ids() -> None:
    """A conversation that starts with an image: a turn sent as token ids
    (the fallback of a lost session continuation, and every "tokens" turn)
    carries the image as nvext.content_parts, which the server places on
    its expanded ids; a session continuation needs nothing (the server
    keeps the turn's image)."""
    core = _core()
    steps = _run(core.turn(LOOK, None, False, {}), [_result("r1", [1, 2, 3], [7, 8])])
    assert steps[0].kwargs["messages"][1] == LOOK[0]  # type: ignore[attr-defined]
    steps = _run(core.turn("More", None, False, {}), [
        (NotFoundError("gone", reason="CONTINUATION_EVICTED"), False, False),
        tokenize_pb2.TokenizeResponse(tokens=[5, 6]),
        _result("r2", [1, 2, 3, 7, 8, 5, 6], [9]),
    ])
    first, again = steps[0], steps[2]
    assert isinstance(first, SessionTurn) and "nvext" not in first.kwargs
    assert isinstance(again, SessionTurn)
    assert again.kwargs["nvext"]["content_parts"] == [{"type": "image_url", "url": IMAGE}]
    tokens = _core("tokens")
    _run(tokens.turn(LOOK, None, False, {}), [_chat("c1", [1, 2], [3])])
    steps = _run(tokens.turn("More", None, False, {}),
                 [tokenize_pb2.TokenizeResponse(tokens=[4]), _chat("c2", [1, 2, 3, 4], [5])])
    chat = steps[1]
    assert isinstance(chat, Chat)
    assert chat.body["nvext"]["content_parts"] == [{"type": "image_url", "url": IMAGE}]
    assert chat.body["nvext"]["token_data"] == [1, 2, 3, 4]
