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

from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.core.errors import (
    Cancelled,
    InvalidArgument,
    ResourceExhausted,
    TokenwireError,
    classify,
)
from tokenwire.server.core.media_inputs import keeping_tensors
from tokenwire.server.core.outbox import Outbox
from tokenwire.server.inference import session_turn
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.fronts import KINDS
from tokenwire.server.inference.shared.identity import MAX_REQUEST_ID
from tokenwire.v1 import session_pb2

log = logging.getLogger("tokenwire.session")

_END = object()


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
            try:
                reader.cancel()
                self._cancel_all("the session ended")
                await asyncio.wait([reader, *self.tasks.values()])
                self.plane.store.drop_session(self.id)
            finally:
                # Counted out last: GetStats never shows no sessions while a
                # session's requests or stored turns are still there.
                state.sessions -= 1

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
            cont = await session_turn.continuation(
                self.plane, start.continuation, kind, req, session_id=self.id, request_id=rid,
                running=self.tasks, tenant=self.caller.tenant)
            req = kind.with_prompt(req, cont.prompt)
        plane = self.plane
        with keeping_tensors():  # its media are stored for the next turn
            plan = await kind.plan(plane, req, caller=self.caller, stream=req.stream,
                                   dp_rank=self.dp_rank, session_id=self.session_id)
        if cont is not None:
            session_turn.carry_over(plan, cont)
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
        done = session_pb2.SessionRequestDone(continuable=session_turn.keep(
            plane, plan, outcome, session_id=self.id, request_id=rid))
        if cont is not None:
            done.prompt_token_ids.extend(cont.prompt)
            done.suffix_token_ids.extend(cont.suffix)
        done.speculative_prefill = kind.after(plane, plan, outcome)
        return done
