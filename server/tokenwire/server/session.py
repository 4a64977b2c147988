"""The Session stream: many requests multiplexed on one bidirectional
stream, cancellable by id, continuable by id.

One reader task takes client messages; each started request runs in its
own task (so requests run concurrently in the engine) and puts its events
in an outbox; the stream handler writes the outbox. Every started request
ends with exactly one terminal event (done, or error — CANCELLED when it
was cancelled), emitted by the task's done callback so that even a request
cancelled before it ran gets one. Cancelling a task cancels its engine
generator, which aborts the engine request. Closing, half-closing or
dropping the stream ends the session (docs/session.md).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, TypeVar

from tokenwire.server import validation as v
from tokenwire.server.chat_request import build_chat_plan, messages_to_dicts
from tokenwire.server.chat_service import run_chat, stream_chat
from tokenwire.server.continuation_store import ContinuationStore, StoredTurn
from tokenwire.server.domain import Engine, RenderOptions
from tokenwire.server.errors import (
    Cancelled,
    FailedPrecondition,
    InvalidArgument,
    ResourceExhausted,
    TokenwireError,
    classify,
)
from tokenwire.server.generate_service import build_generate_plan, run_generate, stream_generate
from tokenwire.server.prefill import Prefiller
from tokenwire.server.recorder import Recorder
from tokenwire.server.settings import ServerSettings
from tokenwire.server.turns import TurnTemplates, chat_render_options
from tokenwire.v1 import chat_pb2, generate_pb2, session_pb2

if TYPE_CHECKING:
    from tokenwire.server.servicer import ServingState

log = logging.getLogger("tokenwire.session")

OUTBOX_EVENTS = 256  # data events buffered per session before producers wait
MAX_REQUEST_ID = 256


@dataclasses.dataclass
class SessionDeps:
    """What every session of a server shares."""

    engine: Engine
    settings: ServerSettings
    state: ServingState
    store: ContinuationStore
    turns: TurnTemplates
    prefiller: Prefiller
    served_model: str
    worker_id: str


@dataclasses.dataclass
class ResolvedContinuation:
    prompt: list[int]
    suffix: list[int]
    cache_salt: str | None


_END = object()


class Outbox:
    """Events waiting to be written. Data events take a slot (producers wait
    when the client reads slowly: backpressure); terminal events never wait."""

    def __init__(self, limit: int):
        self._queue: asyncio.Queue[tuple[bool, object]] = asyncio.Queue()
        self._slots = asyncio.Semaphore(limit)

    async def put_data(self, event: session_pb2.SessionResponse) -> None:
        await self._slots.acquire()
        self._queue.put_nowait((True, event))

    def put_final(self, item: object) -> None:
        self._queue.put_nowait((False, item))

    async def get(self) -> object:
        held, item = await self._queue.get()
        if held:
            self._slots.release()
        return item


def error_event(request_id: str, err: TokenwireError) -> session_pb2.SessionResponse:
    return session_pb2.SessionResponse(
        request_id=request_id,
        error=session_pb2.SessionRequestError(
            code=err.code.value[0], message=err.message, param=err.param or "", reason=err.reason
        ),
    )


class Session:
    def __init__(self, deps: SessionDeps, *, tenant: str | None):
        self.deps = deps
        self.tenant = tenant
        self.id = uuid.uuid4().hex
        self.tasks: dict[str, asyncio.Task[session_pb2.SessionRequestDone]] = {}
        self.outbox = Outbox(OUTBOX_EVENTS)
        self._closing = False

    # -- the stream -----------------------------------------------------
    async def run(
        self, requests: AsyncIterator[session_pb2.SessionRequest]
    ) -> AsyncIterator[session_pb2.SessionResponse]:
        state = self.deps.state
        state.sessions += 1
        reader = asyncio.create_task(self._read(requests))
        try:
            while True:
                item = await self.outbox.get()
                if item is _END:
                    break
                if isinstance(item, BaseException):
                    raise item  # a session-level failure: the stream ends with its status
                assert isinstance(item, session_pb2.SessionResponse)
                yield item
        finally:
            state.sessions -= 1
            reader.cancel()
            self._cancel_all("the session ended")
            await asyncio.wait([reader, *self.tasks.values()])
            self.deps.store.drop_session(self.id)

    async def _read(self, requests: AsyncIterator[session_pb2.SessionRequest]) -> None:
        try:
            async for msg in requests:
                kind = msg.WhichOneof("kind")
                if kind == "start":
                    self._start(msg.start)
                elif kind == "cancel":
                    task = self.tasks.get(msg.cancel.request_id)
                    if task is not None:
                        task.cancel("cancelled by the client")
                elif kind == "close":
                    self._cancel_all("the session was closed")
                    break
                else:
                    raise InvalidArgument(
                        "a SessionRequest must set one of start, cancel, close", param="kind"
                    )
        except Exception as exc:  # a session-level failure
            self._cancel_all("the session failed")
            if self.tasks:
                await asyncio.wait(list(self.tasks.values()))
            self.outbox.put_final(classify(exc))
            return
        if self.tasks:  # half-close: let running requests finish
            await asyncio.wait(list(self.tasks.values()))
        self.outbox.put_final(_END)

    def _cancel_all(self, why: str) -> None:
        self._closing = True
        for task in self.tasks.values():
            task.cancel(why)

    def _start(self, start: session_pb2.SessionStart) -> None:
        rid = start.request_id
        if not rid or len(rid) > MAX_REQUEST_ID:
            raise InvalidArgument(
                f"start.request_id must hold 1 to {MAX_REQUEST_ID} characters",
                param="start.request_id",
            )
        if rid in self.tasks:
            raise InvalidArgument(
                f"start.request_id '{rid}' is already running in this session",
                param="start.request_id", reason="DUPLICATE_REQUEST_ID",
            )
        if len(self.tasks) >= self.deps.settings.session_max_requests:
            self.outbox.put_final(error_event(rid, ResourceExhausted(
                f"this session already runs {len(self.tasks)} requests "
                f"(--session-max-requests {self.deps.settings.session_max_requests})",
            )))
            return
        task = asyncio.create_task(self._execute(rid, start))
        self.tasks[rid] = task
        task.add_done_callback(lambda t: self._finished(rid, t))

    def _finished(self, rid: str, task: asyncio.Task[session_pb2.SessionRequestDone]) -> None:
        if self.tasks.get(rid) is task:
            del self.tasks[rid]
        if task.cancelled():
            why = "the session was closed" if self._closing else "cancelled by the client"
            self.outbox.put_final(error_event(rid, Cancelled(f"request '{rid}': {why}")))
            return
        exc = task.exception()
        if exc is not None:
            self.outbox.put_final(error_event(rid, classify(exc)))
            return
        self.outbox.put_final(session_pb2.SessionResponse(request_id=rid, done=task.result()))

    # -- one request ----------------------------------------------------
    async def _execute(
        self, rid: str, start: session_pb2.SessionStart
    ) -> session_pb2.SessionRequestDone:
        self.deps.state.admit()
        kind = start.WhichOneof("request")
        if kind == "chat":
            return await self._chat(rid, start)
        if kind == "generate":
            return await self._generate(rid, start)
        raise InvalidArgument("start must carry a chat or a generate request", param="request")

    async def _emit(self, rid: str, **event: object) -> None:
        await self.outbox.put_data(session_pb2.SessionResponse(request_id=rid, **event))  # type: ignore[arg-type]

    async def _chat(self, rid: str, start: session_pb2.SessionStart) -> session_pb2.SessionRequestDone:
        d = self.deps
        req = start.chat
        cont = None
        if start.HasField("continuation"):
            if req.messages or req.nvext.token_data:
                raise InvalidArgument(
                    "with a continuation, chat.messages and chat.nvext.token_data must be "
                    "empty: the prompt is the earlier request's ids plus the suffix",
                    param="messages",
                )
            cont = self._continuation(rid, start.continuation, chat_render_options(req))
            req = _copy(req)
            req.nvext.token_data.extend(cont.prompt)
        plan = build_chat_plan(
            req, d.engine, d.settings, served_model=d.served_model, tenant=self.tenant
        )
        if cont is not None and plan.cache_salt is None:
            plan.cache_salt = cont.cache_salt
        rec = Recorder(d.engine)
        if req.stream:
            async for chunk in stream_chat(rec.engine, plan, worker_id=d.worker_id):
                await self._emit(rid, chat_chunk=chunk)
        else:
            resp = await run_chat(rec.engine, plan, worker_id=d.worker_id)
            await self._emit(rid, chat_result=resp)
        done = self._store(rid, rec, plan.cache_salt, cont)
        if rec.finished:
            done.speculative_prefill = d.prefiller.start(
                start.chat, plan, rec.prompt_ids, rec.completions.get(0, [])
            )
        return done

    async def _generate(
        self, rid: str, start: session_pb2.SessionStart
    ) -> session_pb2.SessionRequestDone:
        d = self.deps
        req = start.generate
        cont = None
        if start.HasField("continuation"):
            if req.token_ids:
                raise InvalidArgument(
                    "with a continuation, generate.token_ids must be empty: the prompt is the "
                    "earlier request's ids plus the suffix",
                    param="token_ids",
                )
            cont = self._continuation(rid, start.continuation, RenderOptions())
            req = _copy(req)
            req.token_ids.extend(cont.prompt)
        stream = bool(req.stream)
        plan = build_generate_plan(
            req, d.engine, d.settings, served_model=d.served_model, tenant=self.tenant,
            stream=stream,
        )
        if cont is not None and plan.request.cache_salt is None:
            plan.request.cache_salt = cont.cache_salt
        rec = Recorder(d.engine)
        if stream:
            async for chunk in stream_generate(rec.engine, plan):
                await self._emit(rid, generate_chunk=chunk)
        else:
            await self._emit(rid, generate_result=await run_generate(rec.engine, plan))
        return self._store(rid, rec, plan.request.cache_salt, cont)

    def _store(
        self, rid: str, rec: Recorder, cache_salt: str | None, cont: ResolvedContinuation | None
    ) -> session_pb2.SessionRequestDone:
        done = session_pb2.SessionRequestDone(continuable=False)
        if rec.finished:
            turn = StoredTurn.of(rec.prompt_ids, rec.completion_list(), cache_salt)
            done.continuable = self.deps.store.put(self.id, rid, turn)
        if cont is not None:
            done.prompt_token_ids.extend(cont.prompt)
            done.suffix_token_ids.extend(cont.suffix)
        return done

    def _continuation(
        self, rid: str, c: session_pb2.Continuation, options: RenderOptions
    ) -> ResolvedContinuation:
        d = self.deps
        prev = c.previous_request_id
        if not prev:
            raise InvalidArgument(
                "continuation.previous_request_id is required",
                param="continuation.previous_request_id",
            )
        if c.suffix_token_ids and c.messages:
            raise InvalidArgument(
                "give at most one of continuation.suffix_token_ids and continuation.messages",
                param="continuation",
            )
        if prev in self.tasks and prev != rid:  # a request may continue its own id
            raise FailedPrecondition(
                f"request '{prev}' is still running: continue it after its done event",
                param="continuation.previous_request_id", reason="CONTINUATION_NOT_FINISHED",
            )
        turn = d.store.get(self.id, prev)
        index = c.choice_index if c.HasField("choice_index") else 0
        if index >= len(turn.completions):
            raise InvalidArgument(
                f"continuation.choice_index {index} is out of range: request '{prev}' had "
                f"{len(turn.completions)} choice(s)",
                param="continuation.choice_index",
            )
        completion = turn.completions[index]
        suffix: list[int]
        if c.suffix_token_ids:
            suffix = v.token_ids(
                "continuation.suffix_token_ids", c.suffix_token_ids, d.engine.vocab_size
            )
        elif c.messages:
            suffix = d.turns.suffix(options, completion, _continuation_messages(c.messages))
        else:
            suffix = []
        prompt = [*turn.prompt, *completion, *suffix]
        v.prompt_fits("continuation", len(prompt), d.engine.max_model_len)
        return ResolvedContinuation(prompt, suffix, turn.cache_salt)


def _continuation_messages(messages: Sequence[chat_pb2.ChatMessage]) -> list[dict[str, object]]:
    try:
        return messages_to_dicts(messages)
    except InvalidArgument as err:  # name the field where it sits in a continuation
        raise InvalidArgument(
            f"continuation.{err.message}", param=f"continuation.{err.param}", reason=err.reason
        ) from err


M = TypeVar("M", chat_pb2.CreateChatCompletionRequest, generate_pb2.GenerateRequest)


def _copy(msg: M) -> M:
    out = type(msg)()
    out.CopyFrom(msg)
    return out
