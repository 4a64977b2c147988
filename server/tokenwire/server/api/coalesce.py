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
import types
from collections.abc import AsyncIterator, Awaitable, Generator
from typing import Any, Final, Generic, TypeVar

T = TypeVar("T")

JOIN = True  # bench/coalesce.py's switch: False, and take() never steps


class _Nothing:
    __slots__ = ()


NOTHING: Final = _Nothing()


@types.coroutine
def _resume(it: Any, yielded: Any, cancel: bool = False) -> Generator[Any, Any, Any]:
    """The rest of an advance whose first step was run by hand and suspended
    (yielding `yielded`, a future or None, to the task that runs it): hands
    the task what the advance awaits, as `await` would have, forwards what
    the task sends or throws back, then delegates the rest to the advance
    (`yield from`: no frame of its own per step). `cancel`: first do what a
    cancelled task does to what it awaits."""
    if cancel:
        if isinstance(yielded, asyncio.Future):
            yielded.cancel()
        exc: BaseException = asyncio.CancelledError()
    else:
        try:
            yield yielded  # an asyncio task resumes it with None: `yield from` sends it
        except GeneratorExit:
            it.close()
            raise
        except BaseException as thrown:
            exc = thrown
        else:
            return (yield from it)
    try:
        yielded = it.throw(exc)
    except StopIteration as stop:
        return stop.value
    return (yield from _resume(it, yielded))


class Ready(Generic[T]):
    """`items` read one advance at a time: `first()` waits, `take()` never.
    Use as an async context: on exit a kept advance is cancelled (as a
    cancelled task's would be: the iterator's own cleanup runs), so the
    iterator can then be closed."""

    __slots__ = ("_error", "_hold", "_next", "_pending", "ended")

    def __init__(self, items: AsyncIterator[T]) -> None:
        self._next = items.__anext__
        self._pending: tuple[Any, Any] | None = None  # a kept advance, what it awaits
        self._error: Exception | None = None
        self.ended = False  # the iterator ended during a take()
        self._hold = not JOIN  # take() steps nothing (one test per call on the hot path)

    def first(self) -> Awaitable[T]:
        """The next item, to await (StopAsyncIteration at the end; an error a
        take() met is raised here, after the items taken before it)."""
        pending = self._pending
        if pending is not None:
            self._pending, self._hold = None, False
            return _resume(*pending)  # type: ignore[no-any-return]
        if self._hold and (self._error is not None or self.ended):
            return self._failed()
        return self._next()

    async def _failed(self) -> T:
        error, self._error = self._error, None
        raise error if error is not None else StopAsyncIteration

    def take(self) -> T | _Nothing:
        """The next item if one step of the advance finishes it, else NOTHING."""
        if self._hold:  # JOIN off, a kept advance, an error met or the end
            return NOTHING
        it = self._next().__await__()
        try:
            yielded = it.send(None)
        except StopIteration as stop:
            item: T = stop.value
            return item
        except StopAsyncIteration:
            self.ended = self._hold = True
            return NOTHING
        except Exception as exc:
            self._error, self._hold = exc, True
            return NOTHING
        self._pending, self._hold = (it, yielded), True
        return NOTHING

    async def __aenter__(self) -> Ready[T]:
        return self

    async def __aexit__(self, *exc: object) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        task = asyncio.current_task()
        before = task.cancelling() if task is not None else 0
        try:
            await _resume(*pending, cancel=True)
        except (asyncio.CancelledError, StopAsyncIteration, Exception):
            # The advance's own outcome is moot; this task's cancellation is not.
            if task is not None and task.cancelling() > before:
                raise
