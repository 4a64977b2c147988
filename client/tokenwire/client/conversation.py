"""Multi-turn token-in/token-out conversations for RL rollouts.

A Conversation keeps the exact token ids of every turn; turn N+1 is sent as
``prompt_ids[N] + completion_ids[N] + suffix`` — never a re-rendering of the
history — either as a Session continuation (mode "session", the default:
only the new messages travel, the server renders them as the next-turn
suffix) or as explicit token ids (mode "tokens": ``nvext.token_data`` on a
plain chat call, the suffix rendered through Tokenize). Either way
``turns[n+1].prompt_ids`` starts with ``turns[n].prompt_ids +
turns[n].completion_ids``, and each turn carries what a trainer needs:
``prompt_ids``, ``completion_ids`` and ``logprobs`` (from the same engine
output as the ids).

In a fleet, a session turn whose continuation is unknown where it lands
(the replica that held it was lost, or evicted it) is sent again with the
full token ids on a fresh session, so the rollout goes on with the same ids.
A turn that already streamed tokens is never re-sent (its error is raised).
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tokenwire.client._common import RequestResult, TurnTokens, as_messages
from tokenwire.client.errors import NotFoundError, TokenwireError, UnavailableError
from tokenwire.v1 import chat_pb2

if TYPE_CHECKING:
    from tokenwire.client.async_client import AsyncClient
    from tokenwire.client.session import AsyncSession, Session
    from tokenwire.client.sync_client import Client

MODES = ("session", "tokens")
# A session turn whose continuation or session is lost is sent again with the
# full ids, on a fresh session, up to this many attempts in all (a fresh
# session may land on a replica the gateway has not yet seen die).
FALLBACK_ATTEMPTS = 3
Message = str | Mapping[str, Any] | Sequence[Mapping[str, Any]]


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


class _Core:
    """Request building and bookkeeping shared by both conversation classes."""

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
        return {**body, "messages": [{"role": "user", "content": ""}], "nvext": nvext}

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
        return turn


class Conversation:
    """A blocking multi-turn conversation (see the module docstring).

        conv = Conversation(client, max_tokens=64, temperature=0.7)
        t1 = conv.send("What is the capital of France?")
        t2 = conv.send("And of Germany?")   # sent as turn-1 ids + the new turn
        t2.prompt_ids, t2.completion_ids, t2.logprobs

    Keyword arguments are chat request fields used on every turn (override
    them per turn in send()). ``cache_salt`` salts every turn;
    ``speculative_prefill`` asks the server to warm the next turn's prefix.
    """

    def __init__(
        self, client: Client, *, mode: str = "session", system: str | None = None,
        messages: Message | None = None, cache_salt: str | None = None,
        speculative_prefill: bool = False, **defaults: Any,
    ):
        self.client = client
        self._core = _Core(mode, system, messages, cache_salt, speculative_prefill, defaults)
        self._session: Session | None = None
        self._result: RequestResult | None = None

    @property
    def turns(self) -> list[Turn]:
        return self._core.turns

    def send(self, message: Message | None = None, *, suffix_ids: Sequence[int] | None = None,
             **overrides: Any) -> Turn:
        """Send the next turn (new messages, or raw suffix ids) and wait for it."""
        for _ in self.stream(message, suffix_ids=suffix_ids, _stream=False, **overrides):
            pass
        return self._core.turns[-1]

    def stream(
        self, message: Message | None = None, *, suffix_ids: Sequence[int] | None = None,
        _stream: bool = True, **overrides: Any,
    ) -> Generator[chat_pb2.StreamChatCompletionResponse, None, None]:
        """Send the next turn, yielding its chunks as they arrive; the Turn is
        in ``turns[-1]`` afterwards."""
        core = self._core
        messages = core.take_messages(message)
        body = core.body(overrides, _stream)
        prev = core.last
        if core.mode == "session":
            kwargs = core.session_kwargs(prev, messages, suffix_ids, body)
            suffix: list[int] | None = None  # set when the turn falls back to full ids
            for attempt in range(FALLBACK_ATTEMPTS):
                streamed = False
                try:
                    for chunk in self._session_turn(kwargs):
                        streamed = True
                        yield chunk
                    break
                except TokenwireError as exc:
                    ended = self._session is not None and self._session.ended
                    if attempt + 1 == FALLBACK_ATTEMPTS or not core.may_fall_back(
                            prev, exc, streamed, ended):
                        raise
                    if ended or isinstance(exc, UnavailableError):  # the session's replica is gone
                        self.close()
                if suffix is None:
                    assert prev is not None
                    suffix = list(suffix_ids) if suffix_ids is not None else list(
                        self.client.tokenize(core.suffix_request(prev, messages)).tokens)
                    kwargs = core.token_body(prev, messages, suffix, body)
            core.record_turn(prev, self._result, suffix)
            return
        new = None
        if prev is not None:
            if suffix_ids is not None:
                new = list(suffix_ids)
            else:
                new = list(self.client.tokenize(core.suffix_request(prev, messages)).tokens)
        body = core.token_body(prev, messages, new or [], body)
        if not _stream:
            resp = self.client.chat(body)
            core.record(resp.id, TurnTokens.from_chat(resp), new)
            return
        tokens, rid = TurnTokens(), ""
        for chunk in self.client.stream_chat(body):
            rid = chunk.id
            tokens.add_chat_chunk(chunk)
            yield chunk
        core.record(rid, tokens, new)

    def _session_turn(
        self, kwargs: dict[str, Any]
    ) -> Generator[chat_pb2.StreamChatCompletionResponse, None, None]:
        """One chat request on the session (opened on first use): its chunks;
        its result in self._result. Abandoned or failed: stopped in the engine."""
        if self._session is not None and self._session.ended:  # its server went away
            self.close()
        if self._session is None:
            self._session = self.client.session()
        handle = self._session.start_chat(**kwargs)
        done = False
        try:
            for event in handle:
                if event.WhichOneof("event") == "chat_chunk":
                    yield event.chat_chunk
            self._result = handle.result()
            done = True
        finally:
            if not done and self._session is not None:
                self._session.cancel(handle.request_id)

    def close(self) -> None:
        if self._session is not None:
            try:
                self._session.close()
            except TokenwireError:
                pass  # a session whose stream already failed
            self._session = None

    def __enter__(self) -> Conversation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncConversation:
    """The asyncio Conversation (same arguments, awaitable send/stream)."""

    def __init__(
        self, client: AsyncClient, *, mode: str = "session", system: str | None = None,
        messages: Message | None = None, cache_salt: str | None = None,
        speculative_prefill: bool = False, **defaults: Any,
    ):
        self.client = client
        self._core = _Core(mode, system, messages, cache_salt, speculative_prefill, defaults)
        self._session: AsyncSession | None = None
        self._result: RequestResult | None = None

    @property
    def turns(self) -> list[Turn]:
        return self._core.turns

    async def send(self, message: Message | None = None, *,
                   suffix_ids: Sequence[int] | None = None, **overrides: Any) -> Turn:
        async for _ in self.stream(message, suffix_ids=suffix_ids, _stream=False, **overrides):
            pass
        return self._core.turns[-1]

    async def stream(
        self, message: Message | None = None, *, suffix_ids: Sequence[int] | None = None,
        _stream: bool = True, **overrides: Any,
    ) -> AsyncGenerator[chat_pb2.StreamChatCompletionResponse, None]:
        core = self._core
        messages = core.take_messages(message)
        body = core.body(overrides, _stream)
        prev = core.last
        if core.mode == "session":
            kwargs = core.session_kwargs(prev, messages, suffix_ids, body)
            suffix: list[int] | None = None  # set when the turn falls back to full ids
            for attempt in range(FALLBACK_ATTEMPTS):
                streamed = False
                try:
                    async for chunk in self._session_turn(kwargs):
                        streamed = True
                        yield chunk
                    break
                except TokenwireError as exc:
                    ended = self._session is not None and self._session.ended
                    if attempt + 1 == FALLBACK_ATTEMPTS or not core.may_fall_back(
                            prev, exc, streamed, ended):
                        raise
                    if ended or isinstance(exc, UnavailableError):  # the session's replica is gone
                        await self.close()
                if suffix is None:
                    assert prev is not None
                    suffix = list(suffix_ids) if suffix_ids is not None else list(
                        (await self.client.tokenize(core.suffix_request(prev, messages))).tokens)
                    kwargs = core.token_body(prev, messages, suffix, body)
            core.record_turn(prev, self._result, suffix)
            return
        new = None
        if prev is not None:
            if suffix_ids is not None:
                new = list(suffix_ids)
            else:
                new = list((await self.client.tokenize(core.suffix_request(prev, messages))).tokens)
        body = core.token_body(prev, messages, new or [], body)
        if not _stream:
            resp = await self.client.chat(body)
            core.record(resp.id, TurnTokens.from_chat(resp), new)
            return
        tokens, rid = TurnTokens(), ""
        async for chunk in self.client.stream_chat(body):
            rid = chunk.id
            tokens.add_chat_chunk(chunk)
            yield chunk
        core.record(rid, tokens, new)

    async def _session_turn(
        self, kwargs: dict[str, Any]
    ) -> AsyncGenerator[chat_pb2.StreamChatCompletionResponse, None]:
        """One chat request on the session (opened on first use): its chunks;
        its result in self._result. Abandoned or failed: stopped in the engine."""
        if self._session is not None and self._session.ended:  # its server went away
            await self.close()
        if self._session is None:
            self._session = await self.client.session().open()
        handle = await self._session.start_chat(**kwargs)
        done = False
        try:
            async for event in handle:
                if event.WhichOneof("event") == "chat_chunk":
                    yield event.chat_chunk
            self._result = await handle.result()
            done = True
        finally:
            if not done and self._session is not None:
                await self._session.cancel(handle.request_id)

    async def close(self) -> None:
        if self._session is not None:
            try:
                await self._session.close()
            except TokenwireError:
                pass  # a session whose stream already failed
            self._session = None

    async def __aenter__(self) -> AsyncConversation:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
