"""core/rpc_handlers.py: wrap_handler keeps a handler's cardinality and
(de)serializers, runs each call between start and finish, and closes the
inner stream however the call ends (here: its consumer stops early)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from tokenwire.server.core.rpc_handlers import wrap_handler

KINDS = ("unary_unary", "unary_stream", "stream_unary", "stream_stream")


def _serialize(x: Any) -> bytes:
    return b""


def _deserialize(x: bytes) -> Any:
    return x


class _Inner:
    """A handler of one cardinality that notes what became of its call."""

    def __init__(self, kind: str):
        self.kind = kind
        self.started, self.closed = asyncio.Event(), False
        self.gate = asyncio.Event()  # a unary call waits on it (never set: cancelled)

    async def unary(self, request: Any, context: Any) -> str:
        self.started.set()
        try:
            await self.gate.wait()
            return "done"
        finally:
            self.closed = True

    async def stream(self, request: Any, context: Any) -> AsyncIterator[int]:
        self.started.set()
        try:
            for i in range(100):
                yield i
        finally:
            self.closed = True

    def handler(self) -> grpc.RpcMethodHandler:
        make = getattr(grpc, f"{self.kind}_rpc_method_handler")
        behavior = self.stream if self.kind.endswith("_stream") else self.unary
        return make(behavior, request_deserializer=_deserialize, response_serializer=_serialize)


class _Log:
    def __init__(self) -> None:
        self.ended: list[BaseException | None] = []

    async def start(self, request: Any, context: Any) -> Any:
        return self.ended.append


@pytest.mark.parametrize("kind", KINDS)
async def test_the_inner_call_is_closed_when_it_ends_early(kind: str) -> None:
    inner, log = _Inner(kind), _Log()
    wrapped = wrap_handler(inner.handler(), log.start)
    assert [k for k in KINDS if getattr(wrapped, k)] == [kind]
    assert (wrapped.request_deserializer, wrapped.response_serializer) == (
        _deserialize, _serialize)
    behavior = getattr(wrapped, kind)
    if kind.endswith("_stream"):  # the consumer takes two items and stops
        items = behavior(None, None)
        assert [await anext(items), await anext(items)] == [0, 1]
        assert not inner.closed
        await items.aclose()
        assert inner.closed
        assert [type(e) for e in log.ended] == [GeneratorExit]
    else:  # the call is cancelled while the inner handler waits
        call = asyncio.ensure_future(behavior(None, None))
        await inner.started.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert inner.closed
        assert [type(e) for e in log.ended] == [asyncio.CancelledError]


@pytest.mark.parametrize("kind", KINDS)
async def test_finish_sees_a_call_that_ran_to_its_end(kind: str) -> None:
    inner, log = _Inner(kind), _Log()
    inner.gate.set()
    behavior = getattr(wrap_handler(inner.handler(), log.start), kind)
    if kind.endswith("_stream"):
        assert [i async for i in behavior(None, None)] == list(range(100))
    else:
        assert await behavior(None, None) == "done"
    assert inner.closed
    assert log.ended == [None]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_start_that_raises_refuses_the_call(kind: str) -> None:
    inner = _Inner(kind)

    async def refuse(request: Any, context: Any) -> None:
        raise PermissionError("refused")

    behavior = getattr(wrap_handler(inner.handler(), refuse), kind)
    with pytest.raises(PermissionError):
        if kind.endswith("_stream"):
            await anext(behavior(None, None))
        else:
            await behavior(None, None)
    assert not inner.started.is_set()
