"""The interface every public front has (a `Front`), the wire codecs a
front with REST JSON or SSE of its own brings (a `Wire`), and the record
that names a front's RPCs in the registry (an `Entry`, inference/fronts.py).

A front plans a request (`plan`: the body read and validated, prepared off
the event loop when heavy, its engine requests routed), runs the plan to
its one response (`run`) and, when it streams, yields its chunks (`stream`:
its own generator, returned as is). The api/ adapters call these, the same
way for every front: caller and request id, admission, error mapping and
keep-alive are theirs (api/fronts.py), never a front's.

Fronts that generate (chat, completion, generate, and the kinds that run as
a chat) are `RequestKind`s (inference/kind_base.py); pooling routes are
`PooledFront`s (inference/pooling/kind.py); a front whose answer is its
preparation (a render, a token count, tokenize) is a `PreparedFront`."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, ClassVar, Generic, TypeVar

from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.shared.wire import Wire

Req = TypeVar("Req")
P = TypeVar("P")
R = TypeVar("R")
C = TypeVar("C")


class Front(Generic[Req, P, R, C]):
    """One public front: `plan`, `run`, and `stream` when it streams."""

    name: str  # (a class's, or an instance's own)
    # Its REST codecs (None: the gateway's transcoder prints its answer).
    wire: ClassVar[Wire | None] = None
    # The typed gRPC message of a chunk (None: the chunk is one).
    typed: ClassVar[Callable[[Any], Any] | None] = None

    async def plan(self, plane: DataPlane, req: Req, *, caller: Caller, stream: bool,
                   dp_rank: str | None = None, session_id: str | None = None) -> P:
        """The validated plan of `req` (`dp_rank`, `session_id`: the call's
        metadata, which a body's own fields override)."""
        raise NotImplementedError

    async def run(self, plane: DataPlane, plan: P, outcome: RunOutcome | None = None) -> R:
        """`plan` run to its one response (`outcome`: filled with the ids)."""
        raise NotImplementedError

    def stream(self, plane: DataPlane, plan: P, outcome: RunOutcome | None = None
               ) -> AsyncGenerator[C]:
        """The chunks of `plan` as the engine's outputs arrive: the front's
        own generator, returned as is; close it when abandoned."""
        raise NotImplementedError

    def call_outcome(self) -> RunOutcome | None:
        """What a call keeps of its run for `after` (None: nothing)."""
        return None

    def after(self, plane: DataPlane, plan: P, outcome: RunOutcome | None) -> bool:
        """After a finished run: start what the plan asked for; True if started."""
        return False


AnyFront = Front[Any, Any, Any, Any]


class PreparedFront(Front[Req, R, R, None]):
    """A front whose answer is its preparation (`prepare`: a render, a
    token count, tokenize): planning it is all the work; running returns it."""

    def __init__(self, name: str,
                 prepare: Callable[[DataPlane, Req, Caller], Awaitable[R]]):
        self.name = name
        self._prepare = prepare

    async def plan(self, plane: DataPlane, req: Req, *, caller: Caller, stream: bool,
                   dp_rank: str | None = None, session_id: str | None = None) -> R:
        return await self._prepare(plane, req, caller)

    async def run(self, plane: DataPlane, plan: R, outcome: RunOutcome | None = None) -> R:
        return plan


@dataclasses.dataclass(frozen=True)
class Entry:
    """A front and the RPCs that serve it: TokenwireService's unary and
    typed stream, EventStreamService's SSE stream and printed JSON (the
    gateway's ":events" and ":json" bindings), and vLLM's gRPC engine
    service's (`vllm.grpc.engine.VllmEngine`, smg's router speaks it) unary
    and stream. None: no such RPC."""

    front: AnyFront
    unary: str | None = None
    stream: str | None = None
    events: str | None = None
    json: str | None = None
    engine_unary: str | None = None
    engine_stream: str | None = None
