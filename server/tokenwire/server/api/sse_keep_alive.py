"""SSE keep-alive for EventStreamService (vLLM's --sse-keep-alive-interval).

A streamed chat, completion or generate call that has sent nothing for the
interval (queued, during a long prefill, or between tokens) gets an SSE
comment line, the bytes vLLM sends (``: keep-alive\\n\\n``), so a proxy with a
short read timeout keeps the connection. ``beats`` wraps the kind's chunk
generator only when the interval is set: with the flag off (the default)
the handler iterates the chunks directly, at no cost per token.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TypeVar

T = TypeVar("T")

# vLLM's SSE_KEEP_ALIVE_COMMENT (vllm/entrypoints/serve/utils/sse_keep_alive.py).
COMMENT = b": keep-alive\n\n"


async def beats(chunks: AsyncIterator[T], interval: float) -> AsyncGenerator[T | None]:
    """The chunks of `chunks`, with None whenever none came for `interval`
    seconds. One task advances `chunks` at a time and a timeout never
    cancels it (asyncio.wait), so no chunk is lost; on close (or
    cancellation) the pending advance is cancelled and `chunks` closed."""
    pending: asyncio.Task[T] = asyncio.ensure_future(anext(chunks))
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
            pending = asyncio.ensure_future(anext(chunks))
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
