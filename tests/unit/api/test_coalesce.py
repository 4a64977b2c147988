"""api/coalesce.py's `Ready`: `take()` returns only the items one step of
the advance finishes, keeps the advance that would wait (never reading
ahead of the next `first()`), raises a stream's error after the items taken
before it, and on exit cancels a kept advance as a cancelled task would."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import pytest

from tokenwire.server.api import coalesce
from tokenwire.server.api.coalesce import NOTHING, Ready


async def _items(log: list[str], gate: asyncio.Event | None = None) -> AsyncGenerator[int]:
    """1 and 2 together, 3 after a turn of the loop, 4 with it, 5 after the gate."""
    yield 1
    yield 2
    await asyncio.sleep(0)
    log.append("woke")
    yield 3
    yield 4
    if gate is not None:
        await gate.wait()
        log.append("passed the gate")
        yield 5


def test_take_returns_only_what_one_step_finishes() -> None:
    async def run() -> list[object]:
        log: list[str] = []
        ready = Ready(_items(log))
        got: list[object] = [await ready.first(), ready.take(), ready.take()]
        assert log == [], "the advance that waits a turn is kept, not run"
        got += [await ready.first(), ready.take(), ready.take(), ready.ended]
        with pytest.raises(StopAsyncIteration):
            await ready.first()
        return got

    assert asyncio.run(run()) == [1, 2, NOTHING, 3, 4, NOTHING, True]


def test_a_kept_advance_does_not_run_until_first() -> None:
    async def run() -> list[str]:
        log: list[str] = []
        gate = asyncio.Event()
        ready = Ready(_items(log, gate))
        assert [await ready.first(), ready.take()] == [1, 2]
        assert ready.take() is NOTHING
        assert [await ready.first(), ready.take(), ready.take()] == [3, 4, NOTHING]
        gate.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert log == ["woke"], "nothing read ahead of the writer"
        assert await ready.first() == 5
        return log

    assert asyncio.run(run()) == ["woke", "passed the gate"]


def test_an_error_comes_after_the_items_taken_before_it() -> None:
    async def failing() -> AsyncGenerator[int]:
        yield 1
        yield 2
        raise ValueError("engine failed")

    async def run() -> None:
        ready = Ready(failing())
        assert [await ready.first(), ready.take(), ready.take()] == [1, 2, NOTHING]
        with pytest.raises(ValueError, match="engine failed"):
            await ready.first()

    asyncio.run(run())


def test_exit_cancels_a_kept_advance_and_its_cleanup_runs() -> None:
    async def run() -> list[str]:
        log: list[str] = []
        never = asyncio.Event()

        async def stuck() -> AsyncGenerator[int]:
            try:
                yield 1
                await never.wait()
                yield 2
            except asyncio.CancelledError:
                log.append("cancelled")
                raise
            finally:
                await asyncio.sleep(0)  # an async cleanup (an engine abort) can await
                log.append("cleaned up")

        items = stuck()
        async with Ready(items) as ready:
            assert [await ready.first(), ready.take()] == [1, NOTHING]
        await items.aclose()  # not "already running": the kept advance unwound
        return log

    assert asyncio.run(run()) == ["cancelled", "cleaned up"]


def test_cancelling_the_reader_reaches_the_kept_advance() -> None:
    async def run() -> list[str]:
        log: list[str] = []

        async def slow() -> AsyncGenerator[int]:
            try:
                yield 1
                await asyncio.sleep(30)
                yield 2
            finally:
                log.append("closed")

        ready = Ready(slow())

        async def reader() -> None:
            assert [await ready.first(), ready.take()] == [1, NOTHING]
            await ready.first()

        task = asyncio.create_task(reader())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return log

    assert asyncio.run(run()) == ["closed"]


def test_join_off_takes_nothing(monkeypatch) -> None:
    monkeypatch.setattr(coalesce, "JOIN", False)

    async def run() -> list[object]:
        ready = Ready(_items([]))
        return [await ready.first(), ready.take(), await ready.first(), ready.take()]

    assert asyncio.run(run()) == [1, NOTHING, 2, NOTHING]


def test_keep_alive_beats_pass_ready_chunks_then_break() -> None:
    """With --sse-keep-alive-interval the chunks ready together pass with no
    task each, then BREAK (the handler writes them before the next wait)."""
    from tokenwire.server.api.sse_keep_alive import BREAK, beats

    async def chunks() -> AsyncGenerator[int]:
        yield 1
        yield 2
        await asyncio.sleep(0.12)
        yield 3

    async def run() -> list[object]:
        return [x async for x in beats(chunks(), 0.05, breaks=True)]

    got = asyncio.run(run())
    assert got[:3] == [1, 2, BREAK] and got[-1] == 3
    assert got[3:-1] and all(x is None for x in got[3:-1]), "keep-alives while waiting"
