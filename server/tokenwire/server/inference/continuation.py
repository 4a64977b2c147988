"""Continuation resolution for the Session stream: a finished request's
stored prompt and completion plus a suffix (given ids, or next messages
rendered token-exact by the turn templates) become the next prompt. Next
messages with images are rendered by the engine after the turn templates'
placeholder conversation; their images join the stored turn's."""

from __future__ import annotations

import dataclasses
from collections.abc import Container, Sequence
from typing import Any

from tokenwire.server.core import multimodal
from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Engine, RenderOptions
from tokenwire.server.core.errors import FailedPrecondition, InvalidArgument
from tokenwire.server.core.media_inputs import MultimodalPrompt
from tokenwire.server.inference.continuation_store import ContinuationStore, StoredTurn
from tokenwire.server.inference.shared.messages import messages_to_dicts
from tokenwire.server.inference.turns import TurnTemplate, TurnTemplates
from tokenwire.v1 import chat_pb2, session_pb2


@dataclasses.dataclass
class ResolvedContinuation:
    prompt: list[int]  # earlier prompt + chosen completion + suffix
    suffix: list[int]
    cache_salt: str | None  # the earlier request's salt
    media: MultimodalPrompt | None = None  # the earlier turn's images, under `prompt`


def resolve_continuation(
    c: session_pb2.Continuation,
    *,
    session_id: str,
    request_id: str,
    running: Container[str],
    options: RenderOptions,
    store: ContinuationStore,
    turns: TurnTemplates,
    engine: Engine,
) -> ResolvedContinuation:
    """The prompt of request `request_id` continuing `c.previous_request_id`
    of session `session_id`; `running` holds the session's running ids."""
    completion, turn = chosen_turn(c, session_id=session_id, request_id=request_id,
                                   running=running, store=store)
    return continue_turn(c, turn, completion, options=options, turns=turns, engine=engine)


def chosen_turn(
    c: session_pb2.Continuation, *, session_id: str, request_id: str, running: Container[str],
    store: ContinuationStore,
) -> tuple[list[int], StoredTurn]:
    """The completion `c` continues and its stored turn (checks and the
    store's lookup: on the event loop, where the store lives)."""
    prev = c.previous_request_id
    if not prev:
        raise InvalidArgument(
            "continuation.previous_request_id is required",
            param="continuation.previous_request_id", reason="FIELD_REQUIRED",
        )
    if c.suffix_token_ids and c.messages:
        raise InvalidArgument(
            "give at most one of continuation.suffix_token_ids and continuation.messages",
            param="continuation", reason="FIELDS_CONFLICT",
        )
    if prev in running and prev != request_id:  # a request may continue its own id
        raise FailedPrecondition(
            f"request '{prev}' is still running: continue it after its done event",
            param="continuation.previous_request_id", reason="CONTINUATION_NOT_FINISHED",
        )
    turn = store.get(session_id, prev)
    index = c.choice_index if c.HasField("choice_index") else 0
    if index >= len(turn.completions):
        raise InvalidArgument(
            f"continuation.choice_index {index} is out of range: request '{prev}' had "
            f"{len(turn.completions)} choice(s)",
            param="continuation.choice_index", reason="VALUE_OUT_OF_RANGE",
        )
    return turn.completions[index], turn


def continue_turn(
    c: session_pb2.Continuation, turn: StoredTurn, completion: list[int], *,
    options: RenderOptions, turns: TurnTemplates, engine: Engine,
) -> ResolvedContinuation:
    """The next prompt: `turn`'s prompt, `completion`, and the suffix (given
    ids, or `c.messages` rendered: the chat template runs, so the Session
    runs this where the request's rendering runs, inference/offload.py)."""
    suffix: list[int]
    if c.suffix_token_ids:
        suffix = v.token_ids("continuation.suffix_token_ids", c.suffix_token_ids, engine.vocab_size)
    elif c.messages:
        # (text only: messages_to_dicts refuses image parts here)
        suffix = turns.suffix(options, completion, continuation_messages(c.messages))
    else:
        suffix = []
    prompt = [*turn.prompt, *completion, *suffix]
    v.prompt_fits("continuation", len(prompt), engine.max_model_len)
    media = turn.media.extended(prompt) if turn.media is not None else None
    return ResolvedContinuation(prompt, suffix, turn.cache_salt, media)


def continuation_messages(messages: Sequence[chat_pb2.ChatMessage],
                          media: bool = False) -> list[dict[str, Any]]:
    try:
        return messages_to_dicts(messages, media=media)
    except InvalidArgument as err:  # name the field where it sits in a continuation
        raise InvalidArgument(
            f"continuation.{err.message}", param=f"continuation.{err.param}", reason=err.reason
        ) from err


def media_messages(c: session_pb2.Continuation) -> list[dict[str, Any]] | None:
    """`c.messages` as template-ready dicts when they hold images (a next
    turn with a new screenshot); None when they are text only."""
    if not c.messages:
        return None
    messages = continuation_messages(c.messages, media=True)
    return messages if any(True for _ in multimodal.image_parts(messages)) else None


def continue_turn_with_media(
    turn: StoredTurn, completion: list[int], template: TurnTemplate, rendered: MultimodalPrompt,
    *, engine: Engine,
) -> ResolvedContinuation:
    """The next prompt when the next messages hold images: `rendered` is
    the engine's rendering of the turn templates' placeholder conversation
    followed by them (images expanded and prepared); the part after the
    placeholder follows `completion`, and its images join the stored
    turn's, moved to where they now sit."""
    param = "continuation.messages"
    suffix = template.following(rendered.prompt_token_ids, completion, param)
    prompt = [*turn.prompt, *completion, *suffix]
    v.prompt_fits("continuation", len(prompt), engine.max_model_len)
    shift = len(prompt) - len(rendered.prompt_token_ids)  # both end with the new messages
    media = engine.join_media(turn.media, rendered, prompt, shift)
    return ResolvedContinuation(prompt, suffix, turn.cache_salt, media)
