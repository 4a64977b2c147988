"""The generic adapters: every front of the registry (inference/fronts.py)
served the same way, on both services.

Each call, whatever its front, is admitted on the serving state, its
caller read with its credentials and `x-request-id`, planned by the front
(off the event loop where the front's preparation is heavy), run, and its
errors mapped to the call's status (core/errors.py), here and nowhere else:

- `unary(front)`: TokenwireService's one response;
- `stream(front)`: TokenwireService's typed stream (the front's chunks, or
  its `typed` message of each);
- `events(front)`: EventStreamService's Server-Sent Events, framed by the
  front's wire (an HttpBody a chunk, so the gateway passes bytes through),
  with `--sse-keep-alive-interval` comments, an error event when a started
  stream fails, and the front's end bytes;
- `json(front)`: EventStreamService's unary JSON, printed by the front's wire.

`handlers(service)` is the table a servicer class is built from.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing, asynccontextmanager
from typing import Any

import grpc
from google.api.httpbody_pb2 import HttpBody

from tokenwire.server.api import coalesce, sse_keep_alive
from tokenwire.server.api.call_metadata import caller_of, dp_rank_of, session_of, with_request_id
from tokenwire.server.core.errors import abort_with, classify, stream_errors, unary_errors
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.front import AnyFront, Entry
from tokenwire.server.inference.fronts import FRONTS

SSE = "text/event-stream"
TOKENWIRE_SERVICE = "tokenwire.v1.TokenwireService"
EVENT_STREAM_SERVICE = "tokenwire.v1.EventStreamService"
VLLM_ENGINE_SERVICE = "vllm.grpc.engine.VllmEngine"  # smg-grpc-proto's, smg's router speaks it

Handler = Callable[..., Any]


async def _plan(front: AnyFront, plane: DataPlane, request: Any,
                context: grpc.aio.ServicerContext, *, stream: bool) -> Any:
    caller = with_request_id(await caller_of(plane, context), context)
    return await front.plan(plane, request, caller=caller, stream=stream,
                            dp_rank=dp_rank_of(context), session_id=session_of(context))


async def response(front: AnyFront, plane: DataPlane, request: Any,
                   context: grpc.aio.ServicerContext) -> Any:
    """A unary call of `front`: its one response."""
    with plane.state.call():
        plan = await _plan(front, plane, request, context, stream=False)
        outcome = front.call_outcome()
        resp = await front.run(plane, plan, outcome)
        front.after(plane, plan, outcome)
        return resp


@asynccontextmanager
async def streamed(front: AnyFront, plane: DataPlane, request: Any,
                   context: grpc.aio.ServicerContext) -> AsyncIterator[AsyncGenerator[Any]]:
    """A streamed call of `front`: admitted and planned on entry; the body
    gets the front's own chunk generator (closed on exit) and iterates it
    directly, so a chunk passes through no layer here; a body that ends
    normally (the stream finished) runs the front's after-hook."""
    with plane.state.call():
        plan = await _plan(front, plane, request, context, stream=True)
        outcome = front.call_outcome()
        async with aclosing(front.stream(plane, plan, outcome)) as chunks:
            yield chunks
        front.after(plane, plan, outcome)


def unary(front: AnyFront) -> Handler:
    @unary_errors
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> Any:
        return await response(front, self.plane, request, context)
    return handler


def stream(front: AnyFront) -> Handler:
    typed = front.typed

    @stream_errors
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext
                      ) -> AsyncIterator[Any]:
        async with streamed(front, self.plane, request, context) as chunks:
            if typed is None:
                async for chunk in chunks:
                    yield chunk
            else:
                async for chunk in chunks:
                    yield typed(chunk)
    return handler


def json(front: AnyFront) -> Handler:
    wire = front.wire
    assert wire is not None, f"{front.name}: a JSON RPC needs the front's wire"

    @unary_errors
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext) -> HttpBody:
        resp = await response(front, self.plane, request, context)
        return HttpBody(content_type="application/json", data=wire.json(resp))
    return handler


def _body(data: bytes, first: bool) -> HttpBody:
    """One response message; the first names the content type."""
    return HttpBody(content_type=SSE, data=data) if first else HttpBody(data=data)


def events(front: AnyFront) -> Handler:
    """An error before the first event ends the call with its status (the
    gateway answers the API's own error body); after it (a keep-alive
    counts: vLLM likewise), the front's error event, and the call still
    ends with the error's status. Events ready together (several chunks of
    one engine output, the last ones and the end bytes) go out as one
    HttpBody, the same bytes in fewer messages (api/coalesce.py)."""
    wire = front.wire
    assert wire is not None, f"{front.name}: an SSE RPC needs the front's wire"

    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext
                      ) -> AsyncGenerator[HttpBody]:
        plane: DataPlane = self.plane
        interval = plane.settings.sse_keep_alive_interval
        cap = plane.settings.max_message_bytes // 2  # what a chunk is kept under
        started, last, data = False, None, b""
        try:
            async with streamed(front, plane, request, context) as chunks:
                # --sse-keep-alive-interval (api/sse_keep_alive.py): None a beat
                items = sse_keep_alive.beats(chunks, interval, breaks=True) if interval else chunks
                async with aclosing(items), coalesce.Ready(items) as ready:
                    while True:
                        try:
                            item = await ready.first()
                        except StopAsyncIteration:
                            break
                        if item is sse_keep_alive.BREAK:
                            continue
                        while True:
                            if item is None:
                                event = sse_keep_alive.COMMENT
                            else:
                                event, last = wire.event(item), item
                            if data and len(data) + len(event) > cap:
                                yield _body(data, not started)
                                started, data = True, b""
                            data += event
                            item = ready.take()
                            if item is coalesce.NOTHING or item is sse_keep_alive.BREAK:
                                break
                        if ready.ended:  # the end bytes go with the last events
                            break
                        yield _body(data, not started)
                        started, data = True, b""
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            err = classify(exc)
            if started or data:
                yield _body(data + wire.error_event(err, last), not started)
            await abort_with(context, err)
            return
        if wire.done or data:
            yield _body(data + wire.done, not started)

    return handler


def _rpcs(entry: Entry, service: str) -> list[tuple[str, Callable[[AnyFront], Handler]]]:
    if service == TOKENWIRE_SERVICE:
        pairs = ((entry.unary, unary), (entry.stream, stream))
    elif service == VLLM_ENGINE_SERVICE:
        pairs = ((entry.engine_unary, unary), (entry.engine_stream, stream))
    else:
        pairs = ((entry.events, events), (entry.json, json))
    return [(name, adapter) for name, adapter in pairs if name]


def handlers(service: str) -> dict[str, Handler]:
    """Every front's RPC handler on `service` (by method name)."""
    return {name: adapter(entry.front)
            for entry in FRONTS for name, adapter in _rpcs(entry, service)}


def serves(service: str) -> Callable[[type], type]:
    """A class decorator: the servicer class of `service` with every front's
    handler installed."""
    def install(cls: type) -> type:
        for name, handler in handlers(service).items():
            setattr(cls, name, handler)
        return cls
    return install
