"""Running a validated completion plan on the engine: unary and streaming.

One prompt runs as the engine's own stream (no extra layer, as chat). A
batch runs its prompts concurrently, one engine request each, merged in the
order their outputs arrive; if one fails, the others are aborted and the
call fails with that error.

The merge is bounded: a prompt whose output cannot be queued stops pulling
from its engine stream, so a caller that stops reading holds at most two
outputs per prompt of the batch here (a queue as long as the batch, and
one output waiting per prompt), whatever n and max_tokens are.
Back-pressure reaches the engine: vLLM merges the deltas of a request
nobody pulls into one output (ids concatenated, never dropped)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator

from tokenwire.server.core.domain import Engine, EngineOutput, RunOutcome
from tokenwire.server.core.errors import Internal
from tokenwire.server.inference.chunk_bounds import DEFAULT_MESSAGE_LIMIT, ChunkBounds
from tokenwire.server.inference.completion.request import CompletionPlan
from tokenwire.server.inference.completion.response import (
    CompletionStreamBuilder,
    build_completion_response,
)
from tokenwire.v1 import completion_pb2

_DONE = object()


async def _single(engine: Engine, plan: CompletionPlan) -> AsyncGenerator[tuple[int, EngineOutput]]:
    async with contextlib.aclosing(engine.generate(plan.requests[0])) as outputs:
        async for out in outputs:
            yield 0, out


async def _merged(engine: Engine, plan: CompletionPlan) -> AsyncGenerator[tuple[int, EngineOutput]]:
    """Every prompt's outputs as (prompt index, output), as they arrive."""
    queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue(maxsize=len(plan.requests))

    async def pump(index: int) -> None:
        try:
            async with contextlib.aclosing(engine.generate(plan.requests[index])) as outputs:
                async for out in outputs:
                    await queue.put((index, out))  # waits while the consumer lags
            await queue.put((index, _DONE))
        except asyncio.CancelledError:
            raise  # the call ended: the merge is being torn down
        except Exception as exc:  # handed to the consumer, who raises it
            await queue.put((index, exc))

    tasks = [asyncio.create_task(pump(i)) for i in range(len(plan.requests))]
    try:
        running = len(tasks)
        while running:
            index, item = await queue.get()
            if item is _DONE:
                running -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                assert isinstance(item, EngineOutput)
                yield index, item
    finally:  # abort whatever still runs (a failed sibling, a gone client)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _outputs(engine: Engine, plan: CompletionPlan) -> AsyncGenerator[tuple[int, EngineOutput]]:
    return _single(engine, plan) if len(plan.requests) == 1 else _merged(engine, plan)


async def run_completion(
    engine: Engine, plan: CompletionPlan, *, worker_id: str, outcome: RunOutcome | None = None,
) -> completion_pb2.CreateCompletionResponse:
    finals: list[EngineOutput | None] = [None] * len(plan.requests)
    async with contextlib.aclosing(_outputs(engine, plan)) as outputs:
        async for index, out in outputs:
            finals[index] = out
    done = [f for f in finals if f is not None and f.finished]
    if len(done) != len(finals):
        raise Internal("the engine ended a request without a final output",
                       reason="ENGINE_OUTPUT_INCOMPLETE")
    if outcome is not None and len(done) == 1:  # a batch is not one turn
        outcome.fill(done[0].prompt_token_ids or plan.request.prompt_token_ids,
                     {c.index: [] if plan.echo_only else c.token_ids for c in done[0].choices})
    return build_completion_response(plan, engine, done, worker_id=worker_id)


async def stream_completion(
    engine: Engine, plan: CompletionPlan, *, worker_id: str, outcome: RunOutcome | None = None,
    message_limit: int = DEFAULT_MESSAGE_LIMIT,
) -> AsyncIterator[completion_pb2.StreamCompletionResponse]:
    builder = CompletionStreamBuilder(plan, engine, worker_id=worker_id)
    pieces = ChunkBounds(engine, plan.request.params.logprobs, message_limit).pieces
    finished = 0
    # Nothing is sent before the first output: errors at start (admission,
    # engine validation) fail the call before its first message.
    async with contextlib.aclosing(_outputs(engine, plan)) as outputs:
        async for index, out in outputs:
            if out.finished:
                finished += 1
            for piece in pieces(out):  # (one, unless its chunk could pass the limit)
                chunk = builder.on_output(index, piece)
                if chunk is not None:
                    yield chunk
    if finished != len(plan.requests):
        raise Internal("the engine ended the stream without finishing the request",
                       reason="ENGINE_OUTPUT_INCOMPLETE")
    if outcome is not None and len(plan.requests) == 1:  # a batch is not one turn
        outcome.fill(builder.prompt_ids[0],
                     {i: s.acc.token_ids for i, s in builder.states.items()})
    if plan.include_usage:
        yield builder.usage_chunk()
