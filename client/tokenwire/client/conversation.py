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

The turn logic lives once, without I/O, in _turn_core.TurnCore; the two
classes here are the loops that carry out its steps, blocking or asyncio.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Generator, Sequence
from typing import TYPE_CHECKING, Any

from tokenwire.client._turn_core import (
    Chat,
    CloseSession,
    Message,
    SessionTurn,
    StreamChat,
    Tokenize,
    Turn,
    TurnCore,
    next_step,
)
from tokenwire.client.errors import TokenwireError
from tokenwire.v1 import chat_pb2

if TYPE_CHECKING:
    from tokenwire.client.async_client import AsyncClient
    from tokenwire.client.session import AsyncSession, Session
    from tokenwire.client.sync_client import Client

__all__ = ["AsyncConversation", "Conversation", "Turn"]


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
        self._core = TurnCore(mode, system, messages, cache_salt, speculative_prefill, defaults)
        self._session: Session | None = None

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
        plan = self._core.turn(message, suffix_ids, _stream, overrides)
        reply: Any = None
        while (step := next_step(plan, reply)) is not None:
            reply = None
            if isinstance(step, SessionTurn):
                try:
                    for chunk in self._session_turn(step):
                        step.streamed = True
                        yield chunk
                except TokenwireError as exc:
                    step.error, step.ended = exc, self._session is not None and self._session.ended
            elif isinstance(step, StreamChat):
                for chunk in self.client.stream_chat(step.body):
                    step.take(chunk)
                    yield chunk
            elif isinstance(step, Tokenize):
                reply = self.client.tokenize(step.body)
            elif isinstance(step, Chat):
                reply = self.client.chat(step.body)
            elif isinstance(step, CloseSession):
                self.close()

    def _session_turn(
        self, step: SessionTurn
    ) -> Generator[chat_pb2.StreamChatCompletionResponse, None, None]:
        """One chat request on the session (opened on first use): its chunks;
        its result in step.result. Abandoned or failed: stopped in the engine."""
        if self._session is not None and self._session.ended:  # its server went away
            self.close()
        if self._session is None:
            self._session = self.client.session()
        handle = self._session.start_chat(**step.kwargs)
        done = False
        try:
            for event in handle:
                if event.WhichOneof("event") == "chat_chunk":
                    yield event.chat_chunk
            step.result = handle.result()
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
        self._core = TurnCore(mode, system, messages, cache_salt, speculative_prefill, defaults)
        self._session: AsyncSession | None = None

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
        plan = self._core.turn(message, suffix_ids, _stream, overrides)
        reply: Any = None
        while (step := next_step(plan, reply)) is not None:
            reply = None
            if isinstance(step, SessionTurn):
                try:
                    async for chunk in self._session_turn(step):
                        step.streamed = True
                        yield chunk
                except TokenwireError as exc:
                    step.error, step.ended = exc, self._session is not None and self._session.ended
            elif isinstance(step, StreamChat):
                async for chunk in self.client.stream_chat(step.body):
                    step.take(chunk)
                    yield chunk
            elif isinstance(step, Tokenize):
                reply = await self.client.tokenize(step.body)
            elif isinstance(step, Chat):
                reply = await self.client.chat(step.body)
            elif isinstance(step, CloseSession):
                await self.close()

    async def _session_turn(
        self, step: SessionTurn
    ) -> AsyncGenerator[chat_pb2.StreamChatCompletionResponse, None]:
        """One chat request on the session (opened on first use): its chunks;
        its result in step.result. Abandoned or failed: stopped in the engine."""
        if self._session is not None and self._session.ended:  # its server went away
            await self.close()
        if self._session is None:
            self._session = await self.client.session().open()
        handle = await self._session.start_chat(**step.kwargs)
        done = False
        try:
            async for event in handle:
                if event.WhichOneof("event") == "chat_chunk":
                    yield event.chat_chunk
            step.result = await handle.result()
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
