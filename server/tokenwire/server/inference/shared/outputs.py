"""From engine outputs to messages, the steps every kind's run takes: a
unary run's one final output, and a stream's chunk maker."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TypeVar

from google.protobuf.message import Message

from tokenwire.server.core.domain import Engine, EngineOutput, EngineRequest, RunOutcome
from tokenwire.server.core.errors import Internal, Unavailable
from tokenwire.server.core.media_inputs import keeping_tensors

M = TypeVar("M", bound=Message)


async def final_output(
    engine: Engine, request: EngineRequest, outcome: RunOutcome | None,
    outputs: AsyncIterator[EngineOutput] | None = None,
) -> EngineOutput:
    """Run one unary request to its final output (INTERNAL if the engine ends
    it unfinished) and fill `outcome` with what it consumed and produced.
    `outputs`: the request's outputs when the kind starts them itself."""
    final: EngineOutput | None = None
    async for out in (outputs if outputs is not None else engine.generate(request)):
        final = out
    if final is None or not final.finished:
        raise Internal("the engine ended the request without a final output",
                       reason="ENGINE_OUTPUT_INCOMPLETE")
    if outcome is not None:
        outcome.fill(final.prompt_token_ids or request.prompt_token_ids,
                     {c.index: c.token_ids for c in final.choices})
    return final


def media_outputs(engine: Engine, request: EngineRequest,
                  again: Callable[[], Awaitable[None]] | None) -> AsyncIterator[EngineOutput]:
    """The outputs of `request`; with `again` (a prompt whose images the
    engine may have prepared as references to vLLM's processor cache), once
    more when vLLM failed it before any output with its retryable error
    (ENGINE_REQUEST_FAILED: its frontend's cache had drifted from the
    engine core's, and the frontend has dropped the drifted items):
    `again` prepares the media anew, every item's tensors kept. Without
    `again`: the engine's own iterator, no extra layer."""
    if again is None:
        return engine.generate(request)
    return _once_more(engine, request, again)


async def _once_more(engine: Engine, request: EngineRequest,
                     again: Callable[[], Awaitable[None]]) -> AsyncIterator[EngineOutput]:
    outputs = engine.generate(request)
    try:
        try:
            first = await anext(outputs, None)
        except Unavailable as exc:
            if exc.reason != "ENGINE_REQUEST_FAILED":
                raise
            await outputs.aclose()  # type: ignore[attr-defined]
            with keeping_tensors():
                await again()
            outputs = engine.generate(request)
            first = await anext(outputs, None)
        if first is None:
            return
        yield first
        async for out in outputs:
            yield out
    finally:
        await outputs.aclose()  # type: ignore[attr-defined]


def chunk_maker(header: M) -> Callable[[], M]:
    """A stream's chunk maker: each chunk starts as `header` (the fields
    every chunk of the stream repeats), serialized once and parsed back per
    chunk, which costs half of setting the fields each time (issue #27)."""
    data, parse = header.SerializeToString(), type(header).FromString
    return lambda: parse(data)
