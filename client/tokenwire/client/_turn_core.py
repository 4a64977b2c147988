"""The conversation's turn logic without I/O (see conversation.py): a
TurnCore builds each turn's requests and records its Turn, and plans a turn
as a generator of steps — run a session turn, tokenize, chat, stream a
chat, close the session — that a short sync or async loop (Conversation,
AsyncConversation) carries out, sending back each step's response. The
fallback of a lost session continuation to full token ids is decided here,
once."""

from __future__ import annotations

import dataclasses
from collections.abc import Generator, Mapping, Sequence
from typing import Any

from tokenwire.client._common import RequestResult, TurnTokens, as_messages
from tokenwire.client.errors import NotFoundError, TokenwireError, UnavailableError
from tokenwire.v1 import chat_pb2

MODES = ("session", "tokens")
# A session turn whose continuation or session is lost is sent again with the
# full ids, on a fresh session, up to this many attempts in all (a fresh
# session may land on a replica the gateway has not yet seen die).
FALLBACK_ATTEMPTS = 3
Message = str | Mapping[str, Any] | Sequence[Mapping[str, Any]]


# -- the steps a driver carries out -------------------------------------------


@dataclasses.dataclass
class SessionTurn:
    """Run Session.start_chat(**kwargs) on the conversation's session (opened
    on first use), handing out its chat chunks. The driver fills in the
    outcome: the result, or the error and whether chunks were streamed and
    the session had ended."""

    kwargs: dict[str, Any]
    result: RequestResult | None = None
    error: TokenwireError | None = None
    streamed: bool = False
    ended: bool = False


@dataclasses.dataclass
class Tokenize:
    """client.tokenize(body); the driver sends back the response."""

    body: dict[str, Any]


@dataclasses.dataclass
class Chat:
    """client.chat(body); the driver sends back the response."""

    body: dict[str, Any]


@dataclasses.dataclass
class StreamChat:
    """client.stream_chat(body): the driver hands out each chunk and passes
    it to `take`."""

    body: dict[str, Any]
    tokens: TurnTokens = dataclasses.field(default_factory=TurnTokens)
    request_id: str = ""

    def take(self, chunk: chat_pb2.StreamChatCompletionResponse) -> None:
        self.request_id = chunk.id
        self.tokens.add_chat_chunk(chunk)


@dataclasses.dataclass
class CloseSession:
    """Close the conversation's session (its replica is gone)."""


Step = SessionTurn | Tokenize | Chat | StreamChat | CloseSession
Plan = Generator[Step, Any, None]


def next_step(plan: Plan, reply: Any) -> Step | None:
    """Send the previous step's reply into the plan: its next step, or None
    when the turn is done (its error, if any, is raised from here)."""
    try:
        return plan.send(reply)
    except StopIteration:
        return None


@dataclasses.dataclass
class Turn:
    """One turn: the exact ids the engine consumed and produced."""

    request_id: str
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float]  # logprobs[i] belongs to completion_ids[i]
    text: str
    finish_reason: str
    cached_tokens: int
    suffix_ids: list[int]  # what this turn appended to the previous turn's ids


def image_urls(messages: list[dict[str, Any]]) -> list[str]:
    """The URLs of the image_url parts of chat messages, in order."""
    return [part["image_url"]["url"] for m in messages if isinstance(m.get("content"), list)
            for part in m["content"]
            if isinstance(part, dict) and part.get("type") == "image_url"]


class TurnCore:
    """A conversation without I/O: its turns, pending messages, request
    building and bookkeeping, and each turn's plan (`turn`), shared by
    Conversation and AsyncConversation."""

    def __init__(
        self, mode: str, system: str | None, messages: Message | None, cache_salt: str | None,
        speculative_prefill: bool, defaults: dict[str, Any],
    ):
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        self.mode = mode
        self.cache_salt = cache_salt
        self.speculative_prefill = speculative_prefill
        self.defaults = defaults
        self.turns: list[Turn] = []
        self.pending: list[dict[str, Any]] = (
            [{"role": "system", "content": system}] if system else []
        ) + as_messages(messages)
        # Every turn's image URLs so far, in order: a turn sent as token ids
        # ("tokens" mode, a session turn's fallback) sends them again as
        # nvext.content_parts, which the server places on their expanded ids
        # (a later turn's images come expanded in its suffix: Tokenize
        # next_turn, or the Session continuation's own rendering).
        self.images: list[str] = []
        self.turn_images: list[str] = []  # the turn being sent: `images` and its own

    @property
    def last(self) -> Turn | None:
        return self.turns[-1] if self.turns else None

    def body(self, overrides: Mapping[str, Any], stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {**self.defaults, **overrides}
        body["return_token_ids"] = True
        body.setdefault("logprobs", True)
        if self.cache_salt:
            body["cache_salt"] = self.cache_salt
        if self.speculative_prefill:
            nvext = dict(body.get("nvext") or {})
            nvext["agent_hints"] = {**nvext.get("agent_hints", {}), "speculative_prefill": True}
            body["nvext"] = nvext
        if stream:
            body["stream"] = True
        return body

    def take_messages(self, message: Message | None) -> list[dict[str, Any]]:
        new = self.pending + as_messages(message)
        self.pending = []
        return new

    @staticmethod
    def suffix_request(prev: Turn, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The Tokenize body that renders `messages` as the turn after
        `prev`: the server's own next-turn suffix (the same one a Session
        continuation uses), so the client never re-renders the history."""
        return {"messages": messages, "next_turn": True,
                "previous_completion_ids": list(prev.completion_ids)}

    def session_kwargs(
        self, prev: Turn | None, messages: list[dict[str, Any]],
        suffix_ids: Sequence[int] | None, body: dict[str, Any],
    ) -> dict[str, Any]:
        """Arguments of Session.start_chat for this turn."""
        if prev is None:
            return {"messages": messages, **body}
        if suffix_ids is not None:
            return {"continue_from": prev.request_id, "suffix_ids": list(suffix_ids), **body}
        return {"continue_from": prev.request_id, "messages": messages, **body}

    @staticmethod
    def may_fall_back(prev: Turn | None, exc: TokenwireError, streamed: bool,
                      session_ended: bool) -> bool:
        """Whether a failed session turn may be sent again with full ids: it
        continued an earlier turn, produced nothing, and failed because its
        continuation is gone (evicted, or its replica lost with the session)."""
        if prev is None or streamed:
            return False
        lost = isinstance(exc, NotFoundError) and exc.reason in (
            "CONTINUATION_NOT_FOUND", "CONTINUATION_EVICTED")
        return lost or session_ended or isinstance(exc, UnavailableError)

    def record_turn(self, prev: Turn | None, result: RequestResult | None,
                    fallback_suffix: list[int] | None) -> Turn:
        """Record a finished session turn: continued on the server, or (with
        `fallback_suffix`) sent again with full ids."""
        assert result is not None
        if fallback_suffix is None:
            return self.record_session(prev, result)
        return self.record(result.request_id, result.tokens, fallback_suffix)

    def record_session(self, prev: Turn | None, result: RequestResult) -> Turn:
        tokens = result.tokens
        new = list(result.done.suffix_token_ids) if prev else list(tokens.prompt_ids)
        return self.record(result.request_id, tokens, new)

    def token_body(
        self, prev: Turn | None, messages: list[dict[str, Any]], new: list[int],
        body: dict[str, Any],
    ) -> dict[str, Any]:
        """The chat body of this turn in "tokens" mode."""
        if prev is None:
            return {**body, "messages": messages}
        nvext = dict(body.get("nvext") or {})
        nvext["token_data"] = prev.prompt_ids + prev.completion_ids + new
        if self.turn_images:
            nvext["content_parts"] = [{"type": "image_url", "url": u} for u in self.turn_images]
        return {**body, "messages": [{"role": "user", "content": ""}], "nvext": nvext}

    def turn(
        self, message: Message | None, suffix_ids: Sequence[int] | None, stream: bool,
        overrides: Mapping[str, Any],
    ) -> Plan:
        """The next turn's plan: the steps a driver does (see the Step
        classes); the turn is recorded in `turns` when the plan ends, or
        its error raised out of it."""
        messages = self.take_messages(message)
        body = self.body(overrides, stream)
        prev = self.last
        images = image_urls(messages) if suffix_ids is None or prev is None else []
        self.turn_images = [*(self.images if prev is not None else []), *images]
        if self.mode == "session":
            yield from self._session_plan(prev, messages, suffix_ids, body)
        else:
            yield from self._tokens_plan(prev, messages, suffix_ids, body, stream)

    def _session_plan(
        self, prev: Turn | None, messages: list[dict[str, Any]],
        suffix_ids: Sequence[int] | None, body: dict[str, Any],
    ) -> Plan:
        """A Session continuation; when it is lost (see may_fall_back) the
        turn again with full ids on a fresh session, FALLBACK_ATTEMPTS in all."""
        step = SessionTurn(self.session_kwargs(prev, messages, suffix_ids, body))
        suffix: list[int] | None = None  # set when the turn falls back to full ids
        for attempt in range(FALLBACK_ATTEMPTS):
            yield step
            if step.error is None:
                break
            if attempt + 1 == FALLBACK_ATTEMPTS or not self.may_fall_back(
                    prev, step.error, step.streamed, step.ended):
                raise step.error
            if step.ended or isinstance(step.error, UnavailableError):  # its replica is gone
                yield CloseSession()
            if suffix is None:
                assert prev is not None
                suffix = yield from self._suffix(prev, messages, suffix_ids)
            step = SessionTurn(self.token_body(prev, messages, suffix, body))
        self.record_turn(prev, step.result, suffix)

    def _tokens_plan(
        self, prev: Turn | None, messages: list[dict[str, Any]],
        suffix_ids: Sequence[int] | None, body: dict[str, Any], stream: bool,
    ) -> Plan:
        """A plain chat call carrying the previous turns' ids."""
        new = None if prev is None else (yield from self._suffix(prev, messages, suffix_ids))
        body = self.token_body(prev, messages, new or [], body)
        if not stream:
            resp = yield Chat(body)
            self.record(resp.id, TurnTokens.from_chat(resp), new)
            return
        step = StreamChat(body)
        yield step
        self.record(step.request_id, step.tokens, new)

    def _suffix(
        self, prev: Turn, messages: list[dict[str, Any]], suffix_ids: Sequence[int] | None
    ) -> Generator[Step, Any, list[int]]:
        """The new turn's ids: given, or the server's rendering of `messages`."""
        if suffix_ids is not None:
            return list(suffix_ids)
        resp = yield Tokenize(self.suffix_request(prev, messages))
        return list(resp.tokens)

    def record(self, request_id: str, tokens: TurnTokens, suffix_ids: list[int] | None) -> Turn:
        turn = Turn(
            request_id=request_id,
            prompt_ids=tokens.prompt_ids,
            completion_ids=tokens.completion_ids,
            logprobs=tokens.logprobs,
            text=tokens.text,
            finish_reason=tokens.finish_reason,
            cached_tokens=tokens.cached_tokens,
            suffix_ids=list(tokens.prompt_ids) if suffix_ids is None else suffix_ids,
        )
        self.turns.append(turn)
        self.images = self.turn_images
        return turn
