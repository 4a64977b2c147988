"""Taking a stream's items that are ready now, without waiting for any
(issue #46 item 4): EventStreamService joins an event stream's ready SSE
events into one HttpBody, so a write (and Envoy's DATA frame) carries them
all, with the bytes a client reads unchanged.

`Ready` wraps an async iterator: `first()` awaits its next item as usual;
`take()` then runs the next advance one step, synchronously, and returns
its item when that step finished it (the front yielded several chunks for
one engine output, or the stream ended), else `NOTHING`. The advance that
would have waited is kept as it is, suspended on what it awaits, and the
next `first()` goes on with it: nothing is read ahead of the writer (vLLM
keeps merging what the reader has not taken), no timer delays an item, and
an item that would wait is never waited for before a write.

`JOIN = False` turns `take()` off (bench/coalesce.py compares both).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Generator
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

JOIN = True  # bench/coalesce.py's switch: False, and take() never steps


class _Nothing:
    __slots__ = ()


NOTHING: Final = _Nothing()


class _Resume:
    """The rest of an advance whose first step was run by hand and
    suspended (yielding `yielded`, a future or None, to the task that runs
    it): awaited, it hands the task what the advance awaits, as `await`
    would have, and forwards what the task sends or throws."""

    __slots__ = ("_cancel", "_it", "_yielded")

    def __init__(self, it: Any, yielded: Any) -> None:
        self._it, self._yielded, self._cancel = it, yielded, False

    def __await__(self) -> Generator[Any, Any, Any]:
        it, yielded = self._it, self._yielded
        if self._cancel:  # what a cancelled task does to what it awaits
            if isinstance(yielded, asyncio.Future):
                yielded.cancel()
            try:
                yielded = it.throw(asyncio.CancelledError())
            except StopIteration as stop:
                return stop.value
        while True:
            try:
                sent = yield yielded
            except GeneratorExit:
                it.close()
                raise
            except BaseException as exc:
                try:
                    yielded = it.throw(exc)
                except StopIteration as stop:
                    return stop.value
            else:
                try:
                    yielded = it.send(sent)
                except StopIteration as stop:
                    return stop.value


class Ready(Generic[T]):
    """`items` read one advance at a time: `first()` waits, `take()` never.
    Use as an async context: on exit a kept advance is cancelled (as a
    cancelled task's would be: the iterator's own cleanup runs), so the
    iterator can then be closed."""

    def __init__(self, items: AsyncIterator[T]) -> None:
        self._next = items.__anext__
        self._pending: _Resume | None = None
        self._error: Exception | None = None
        self.ended = False  # the iterator ended during a take()

    async def first(self) -> T:
        """The next item, waiting for it (StopAsyncIteration at the end; an
        error a take() met is raised here, after the items taken before it)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            item: T = await pending
            return item
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self.ended:
            raise StopAsyncIteration
        return await self._next()

    def take(self) -> T | _Nothing:
        """The next item if one step of the advance finishes it, else NOTHING."""
        if not JOIN or self._pending is not None or self._error is not None or self.ended:
            return NOTHING
        it = self._next().__await__()
        try:
            yielded = it.send(None)
        except StopIteration as stop:
            item: T = stop.value
            return item
        except StopAsyncIteration:
            self.ended = True
            return NOTHING
        except Exception as exc:
            self._error = exc
            return NOTHING
        self._pending = _Resume(it, yielded)
        return NOTHING

    async def __aenter__(self) -> Ready[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        task = asyncio.current_task()
        before = task.cancelling() if task is not None else 0
        pending._cancel = True
        try:
            await pending
        except (asyncio.CancelledError, StopAsyncIteration, Exception):
            # The advance's own outcome is moot; this task's cancellation is not.
            if task is not None and task.cancelling() > before:
                raise
