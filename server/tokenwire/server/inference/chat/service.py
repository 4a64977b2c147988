"""Running a validated chat plan on the engine: unary and streaming."""

from __future__ import annotations

from collections.abc import AsyncIterator

from tokenwire.server.core.domain import Engine, RunOutcome
from tokenwire.server.core.errors import Internal
from tokenwire.server.inference.chat.media import chat_outputs
from tokenwire.server.inference.chat.request import ChatPlan
from tokenwire.server.inference.chat.response import ChatStreamBuilder, build_chat_response
from tokenwire.server.inference.chunk_bounds import DEFAULT_MESSAGE_LIMIT, ChunkBounds
from tokenwire.server.inference.shared.outputs import final_output
from tokenwire.v1 import chat_pb2


async def run_chat(
    engine: Engine, plan: ChatPlan, *, worker_id: str, outcome: RunOutcome | None = None
) -> chat_pb2.CreateChatCompletionResponse:
    created = int(plan.received)
    final = await final_output(engine, plan.request, outcome, chat_outputs(engine, plan))
    return build_chat_response(
        plan, engine, final, created=created, worker_id=worker_id, first_seen=None
    )


async def stream_chat(
    engine: Engine, plan: ChatPlan, *, worker_id: str, outcome: RunOutcome | None = None,
    message_limit: int = DEFAULT_MESSAGE_LIMIT,
) -> AsyncIterator[chat_pb2.StreamChatCompletionResponse]:
    builder = ChatStreamBuilder(plan, engine, created=int(plan.received), worker_id=worker_id)
    pieces = ChunkBounds(engine, plan.request.params.logprobs, message_limit).pieces
    outputs = chat_outputs(engine, plan)
    try:
        # Wait for the first output before the role chunk, so that errors
        # raised at start (admission, a dead engine, engine-side validation)
        # fail the call before it has sent anything: over REST they become a
        # plain HTTP error (429/503 with retry-after), not an error event
        # after a 200. The same iterator then goes on, with no extra layer.
        out = await anext(outputs, None)
        yield builder.first_chunk(out)
        for chunk in builder.echo_chunks():
            yield chunk
        finished = False
        while out is not None:
            for piece in pieces(out):  # (one, unless its chunk could pass the limit)
                chunk = builder.on_output(piece)
                if chunk is not None:
                    yield chunk
            finished = out.finished
            out = await anext(outputs, None)
    finally:
        await outputs.aclose()  # type: ignore[attr-defined]
    if not finished:
        raise Internal("the engine ended the stream without finishing the request",
                       reason="ENGINE_OUTPUT_INCOMPLETE")
    if outcome is not None:  # the builder accumulated the ids already
        outcome.fill(builder.prompt_ids, {i: a.token_ids for i, a in builder.accs.items()})
    if plan.include_usage:
        yield builder.usage_chunk()
