"""The inference calls of every request kind (inference/kinds.py) as one
unary response and one streamed call: admitted on the serving state,
planned by the kind on the data plane, run and built (response, chunks) by
the kind's own modules, with no per-kind branch here. TokenwireService returns the
response or sends the chunks as typed messages (every streaming RPC's
handler is `stream_rpc(KIND)`); EventStreamService renders the same chunks
as SSE events (and prints the unary chat as JSON). Errors are raised here;
each servicer maps them."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, aclosing, asynccontextmanager
from typing import Any, TypeVar

import grpc

from tokenwire.server.api.call_metadata import (
    caller_of,
    dp_rank_of,
    session_of,
    with_request_id,
)
from tokenwire.server.core.errors import stream_errors
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import RequestKind

R = TypeVar("R")
C = TypeVar("C")


async def response(
    kind: RequestKind[Any, Any, R, Any], plane: DataPlane, request: Any,
    context: grpc.aio.ServicerContext,
) -> R:
    """A unary call of `kind`: its one response."""
    with plane.state.call():
        caller = with_request_id(await caller_of(plane, context), context)
        plan = await kind.plan(plane, request, caller=caller, stream=False,
                               dp_rank=dp_rank_of(context), session_id=session_of(context))
        outcome = kind.call_outcome()
        resp = await kind.run(plane, plan, outcome)
        kind.after(plane, plan, outcome)
        return resp


@asynccontextmanager
async def streamed(
    kind: RequestKind[Any, Any, Any, C], plane: DataPlane, request: Any,
    context: grpc.aio.ServicerContext,
) -> AsyncIterator[AsyncGenerator[C]]:
    """A streamed call of `kind`: admitted and planned on entry; the body
    gets the kind's own chunk generator (closed on exit) and iterates it
    directly, so each chunk passes through no layer of this module; a body
    that ends normally (the stream finished) runs the kind's after-hook."""
    with plane.state.call():
        caller = with_request_id(await caller_of(plane, context), context)
        plan = await kind.plan(plane, request, caller=caller, stream=True,
                               dp_rank=dp_rank_of(context), session_id=session_of(context))
        outcome = kind.call_outcome()
        async with aclosing(kind.stream(plane, plan, outcome)) as stream:
            yield stream
        kind.after(plane, plan, outcome)


def stream_rpc(kind: RequestKind[Any, Any, Any, C]
               ) -> Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[C]]:
    """The TokenwireService handler of a streamed call of `kind` (the
    servicer holds its data plane as `plane`): the chunks as typed
    messages, errors mapped to the call's status (stream_errors)."""

    @stream_errors
    async def handler(self: Any, request: Any, context: grpc.aio.ServicerContext
                      ) -> AsyncIterator[C]:
        call: AbstractAsyncContextManager[AsyncGenerator[C]] = streamed(
            kind, self.plane, request, context)
        async with call as stream:
            async for chunk in stream:
                yield chunk

    return handler
