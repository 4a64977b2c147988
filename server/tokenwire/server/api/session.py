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
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.core.errors import (
    Cancelled,
    InvalidArgument,
    ResourceExhausted,
    TokenwireError,
    classify,
)
from tokenwire.server.core.media_inputs import keeping_tensors
from tokenwire.server.inference.continuation import (
    ResolvedContinuation,
    chosen_turn,
    continue_turn,
    continue_turn_with_media,
    media_messages,
)
from tokenwire.server.inference.continuation_store import StoredTurn
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.fronts import KINDS
from tokenwire.server.inference.kind_base import AnyKind
from tokenwire.server.inference.offload import OFFLOAD_CHARS
from tokenwire.server.inference.shared.identity import MAX_REQUEST_ID
from tokenwire.server.inference.shared.messages import has_request_template
from tokenwire.server.inference.shared.prompt_chars import rendered_chars
from tokenwire.server.inference.turns import PLACEHOLDER, placed_error
from tokenwire.v1 import session_pb2

log = logging.getLogger("tokenwire.session")

_END = object()


class Outbox:
    """Events waiting to be written, bounded in bytes. When the client reads
    slowly, producers of data events wait for room, and the session stops
    reading the client's messages (back-pressure through HTTP/2 flow
    control), so a client that sends but never reads cannot grow the
    server's memory. Terminal events never wait (they come from done
    callbacks): each needs a start the session read while there was room,
    so they are bounded by the running requests."""

    def __init__(self, max_bytes: int):
        self._queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()
        self.max_bytes = max_bytes
        self.bytes = 0
        self._room = asyncio.Condition()

    async def put_data(self, event: session_pb2.SessionResponse) -> None:
        size = event.ByteSize()
        if self.bytes and self.bytes + size > self.max_bytes:
            async with self._room:  # one event always fits into an empty outbox
                await self._room.wait_for(
                    lambda: not self.bytes or self.bytes + size <= self.max_bytes)
        self.bytes += size
        self._queue.put_nowait((size, event))

    def put_final(self, item: object) -> None:
        size = item.ByteSize() if isinstance(item, session_pb2.SessionResponse) else 0
        self.bytes += size
        self._queue.put_nowait((size, item))

    async def wait_for_room(self) -> None:
        """Return once the outbox is below its limit (the reader's gate)."""
        if self.bytes >= self.max_bytes:
            async with self._room:
                await self._room.wait_for(lambda: self.bytes < self.max_bytes)

    async def get(self) -> object:
        size, item = await self._queue.get()
        if size:
            self.bytes -= size
            async with self._room:
                self._room.notify_all()
        return item


def error_event(request_id: str, err: TokenwireError) -> session_pb2.SessionResponse:
    return session_pb2.SessionResponse(
        request_id=request_id,
        error=session_pb2.SessionRequestError(
            code=err.code.value[0], message=err.message, param=err.param or "", reason=err.reason
        ),
    )


class Session:
    def __init__(self, plane: DataPlane, *, caller: Caller, dp_rank: str | None = None,
                 session_id: str | None = None):
        self.plane = plane
        self.caller = caller
        self.dp_rank = dp_rank  # the stream's data-parallel rank metadata, if any
        self.session_id = session_id  # the stream's x-session-id metadata, if any
        self.id = uuid.uuid4().hex
        self.tasks: dict[str, asyncio.Task[session_pb2.SessionRequestDone]] = {}
        self.outbox = Outbox(plane.settings.session_max_buffered_bytes)
        self._closing = False

    # -- the stream -----------------------------------------------------
    async def run(
        self, requests: AsyncIterator[session_pb2.SessionRequest]
    ) -> AsyncIterator[session_pb2.SessionResponse]:
        state = self.plane.state
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
            self.plane.store.drop_session(self.id)

    async def _read(self, requests: AsyncIterator[session_pb2.SessionRequest]) -> None:
        try:
            async for msg in requests:
                await self.outbox.wait_for_room()  # a client that does not read stops being read
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
                        "a SessionRequest must set one of start, cancel, close", param="kind",
                        reason="FIELD_REQUIRED",
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
                param="start.request_id", reason="INVALID_REQUEST_ID",
            )
        if rid in self.tasks:
            raise InvalidArgument(
                f"start.request_id '{rid}' is already running in this session",
                param="start.request_id", reason="DUPLICATE_REQUEST_ID",
            )
        if len(self.tasks) >= self.plane.settings.session_max_requests:
            self.outbox.put_final(error_event(rid, ResourceExhausted(
                f"this session already runs {len(self.tasks)} requests "
                f"(--session-max-requests {self.plane.settings.session_max_requests})",
                reason="SESSION_FULL",
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
            self.outbox.put_final(error_event(rid, Cancelled(f"request '{rid}': {why}",
                                                             reason="REQUEST_CANCELLED")))
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
        self.plane.state.admit()
        name = start.WhichOneof("request")
        kind = KINDS.get(name or "")
        if kind is None:
            raise InvalidArgument("start must carry a chat, generate or completion request",
                                  param="request", reason="FIELD_REQUIRED")
        req = getattr(start, kind.name)
        cont = None
        if start.HasField("continuation"):
            cont = await self._continuation(rid, start.continuation, kind, req)
            req = kind.with_prompt(req, cont.prompt)
        plane = self.plane
        with keeping_tensors():  # its media are stored for the next turn
            plan = await kind.plan(plane, req, caller=self.caller, stream=req.stream,
                                   dp_rank=self.dp_rank, session_id=self.session_id)
        if cont is not None and plan.request.cache_salt is None:
            plan.request.cache_salt = cont.cache_salt
        if cont is not None and cont.media is not None:
            # The earlier turn's images run again under the longer prompt.
            if plan.request.multimodal is not None:
                raise InvalidArgument(
                    "a continuation of a turn with images keeps its images: give no "
                    "content_parts or features with it", param="continuation",
                    reason="FIELDS_CONFLICT")
            plan.request.multimodal = cont.media.extended(list(plan.request.prompt_token_ids))
        outcome = RunOutcome()
        outbox = self.outbox
        if req.stream:
            chunk_field = f"{kind.name}_chunk"
            # Closed here, also when the task is cancelled while it waits for
            # room in the outbox: the engine requests end before the request's
            # terminal event, not when the garbage collector finds the stream.
            async with contextlib.aclosing(kind.stream(plane, plan, outcome)) as chunks:
                async for chunk in chunks:
                    await outbox.put_data(
                        session_pb2.SessionResponse(request_id=rid, **{chunk_field: chunk})
                    )
        else:
            result = await kind.run(plane, plan, outcome)
            event = session_pb2.SessionResponse(request_id=rid, **{f"{kind.name}_result": result})
            limit = plane.settings.max_message_bytes
            if event.ByteSize() > limit:  # this request fails; the stream goes on
                raise ResourceExhausted(
                    f"request '{rid}': its result is {event.ByteSize()} bytes, more than the "
                    f"{limit}-byte message limit; stream it, or ask for less",
                    reason="RESPONSE_TOO_LARGE",
                )
            await outbox.put_data(event)
        done = session_pb2.SessionRequestDone(continuable=False)
        # (A completion batch is not one turn: not stored. A turn with images
        # is stored with them, as the engine prepared them.)
        media = plan.request.multimodal
        if outcome.prompt_ids and (media is None
                                   or list(outcome.prompt_ids) == media.prompt_token_ids):
            turn = StoredTurn.of(outcome.prompt_ids, outcome.completions, plan.request.cache_salt,
                                 media)
            done.continuable = plane.store.put(self.id, rid, turn)
        if cont is not None:
            done.prompt_token_ids.extend(cont.prompt)
            done.suffix_token_ids.extend(cont.suffix)
        done.speculative_prefill = kind.after(plane, plan, outcome)
        return done

    async def _continuation(
        self, rid: str, c: session_pb2.Continuation, kind: AnyKind, req: Any,
    ) -> ResolvedContinuation:
        """The continuation's prompt: the stored turn looked up here; the
        next messages rendered where the request's own rendering would run
        (inference/offload.py: the template thread, within its time bound,
        for a request's own template; the prompt thread when large; both
        with their queue limits; inline when small)."""
        plane = self.plane
        engine = plane.engine
        chars = rendered_chars(c)[1] + kind.continuation_chars(req)  # counted, not converted
        if c.messages:  # rendered: the cheap length limit first, as for a chat request
            v.text_fits("continuation.messages", chars, engine.max_model_len,
                        engine.max_token_chars)
        completion, turn = chosen_turn(c, session_id=self.id, request_id=rid, running=self.tasks,
                                       store=plane.store)
        trust = plane.settings.trust_request_chat_template
        messages = media_messages(c)
        if messages is not None:  # next messages with images: the engine renders them
            options = kind.continuation_options(req, trust_template=trust)
            template = await plane.offload.run(lambda: plane.turns.get(options),
                                               own_template=has_request_template(req), heavy=False)
            try:
                with keeping_tensors():  # stored with the turn for the next one
                    rendered = await engine.render_chat_media([*PLACEHOLDER, *messages], options,
                                                              tenant=self.caller.tenant)
            except InvalidArgument as err:
                raise placed_error(err, "continuation.") from err
            return continue_turn_with_media(turn, completion, template, rendered, engine=engine)

        def resolve() -> ResolvedContinuation:
            options = kind.continuation_options(req, trust_template=trust)
            return continue_turn(c, turn, completion, options=options, turns=plane.turns,
                                 engine=engine)

        return await plane.offload.run(
            resolve, own_template=bool(c.messages) and has_request_template(req),
            heavy=chars > OFFLOAD_CHARS)
