"""SSE keep-alive for EventStreamService (vLLM's --sse-keep-alive-interval).

A streamed chat, completion or generate call that has sent nothing for the
interval (queued, during a long prefill, or between tokens) gets an SSE
comment line, the bytes vLLM sends (``: keep-alive\\n\\n``), so a proxy with a
short read timeout keeps the connection. ``beats`` wraps the kind's chunk
generator only when the interval is set: with the flag off (the default)
the handler iterates the chunks directly, at no cost per token.

The chunks ready together (one engine output's several chunks, the last
ones) pass without a task each (api/coalesce.py), followed by `BREAK`: the
handler joins them into one message and writes it before the next advance
starts (and with it the interval), as it did for one chunk.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Final, TypeVar

from tokenwire.server.api import coalesce

T = TypeVar("T")

# vLLM's SSE_KEEP_ALIVE_COMMENT (vllm/entrypoints/serve/utils/sse_keep_alive.py).
COMMENT = b": keep-alive\n\n"


class _Break:
    __slots__ = ()


BREAK: Final = _Break()  # the chunks ready together were yielded


async def beats(chunks: AsyncIterator[T], interval: float, *, breaks: bool = False
                ) -> AsyncGenerator[T | _Break | None]:
    """The chunks of `chunks`, with None whenever none came for `interval`
    seconds (`breaks`: and BREAK after each run of chunks ready together,
    taken without a task each). One task
    advances `chunks` at a time and a timeout never cancels it
    (asyncio.wait), so no chunk is lost; on close (or cancellation) the
    pending advance is cancelled and `chunks` closed."""
    ready = coalesce.Ready(chunks)
    pending: asyncio.Task[T] = asyncio.ensure_future(ready.first())
    try:
        while True:
            done, _ = await asyncio.wait((pending,), timeout=interval)
            if not done:
                yield None
                continue
            try:
                chunk = pending.result()
            except StopAsyncIteration:
                return
            yield chunk
            if breaks:
                while (more := ready.take()) is not coalesce.NOTHING:
                    yield more
                if ready.ended:
                    return
                yield BREAK
            pending = asyncio.ensure_future(ready.first())
    finally:
        if not pending.done():
            pending.cancel()
            # Wait for the advance to unwind (the generator's own cleanup, the
            # engine request's abort); a cancellation of this task propagates.
            await asyncio.wait((pending,))
        if not pending.cancelled():
            pending.exception()  # retrieved: its outcome was handled or is moot
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
