"""The streamed inference calls as chunk generators (and the unary chat
that EventStreamService also prints): admitted on the
serving state, planned and run by the data plane. TokenwireService sends
the chunks as typed messages; EventStreamService renders the same chunks as
SSE events. Errors are raised here; each servicer maps them."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import grpc

from tokenwire.server.api.call_metadata import caller_of, dp_rank_of, session_of
from tokenwire.server.core.domain import RunOutcome
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.v1 import chat_pb2, completion_pb2, generate_pb2


async def chat_response(
    plane: DataPlane, request: chat_pb2.CreateChatCompletionRequest,
    context: grpc.aio.ServicerContext,
) -> chat_pb2.CreateChatCompletionResponse:
    """A unary chat (TokenwireService's message; EventStreamService's JSON)."""
    with plane.state.call():
        plan = await plane.chat_plan(request, caller=await caller_of(plane, context), stream=False,
                                     dp_rank=dp_rank_of(context), session_id=session_of(context))
        outcome = RunOutcome()
        resp = await plane.run_chat(plan, outcome)
        plane.after(plan, outcome)
        return resp


async def chat_chunks(
    plane: DataPlane, request: chat_pb2.CreateChatCompletionRequest,
    context: grpc.aio.ServicerContext,
) -> AsyncGenerator[chat_pb2.StreamChatCompletionResponse]:
    """The chunks of a streamed chat."""
    with plane.state.call():
        plan = await plane.chat_plan(request, caller=await caller_of(plane, context), stream=True,
                                     dp_rank=dp_rank_of(context), session_id=session_of(context))
        outcome = RunOutcome()
        async for chunk in plane.stream_chat(plan, outcome):
            yield chunk
        plane.after(plan, outcome)


async def completion_chunks(
    plane: DataPlane, request: completion_pb2.CreateCompletionRequest,
    context: grpc.aio.ServicerContext,
) -> AsyncGenerator[completion_pb2.StreamCompletionResponse]:
    """The chunks of a streamed completion."""
    with plane.state.call():
        plan = await plane.completion_plan(request, caller=await caller_of(plane, context), stream=True,
                                           dp_rank=dp_rank_of(context),
                                           session_id=session_of(context))
        async for chunk in plane.stream_completion(plan):
            yield chunk


async def generate_chunks(
    plane: DataPlane, request: generate_pb2.GenerateRequest, context: grpc.aio.ServicerContext,
) -> AsyncGenerator[generate_pb2.GenerateResponse]:
    """The chunks of a streamed generate."""
    with plane.state.call():
        plan = await plane.generate_plan(request, caller=await caller_of(plane, context), stream=True,
                                         dp_rank=dp_rank_of(context), session_id=session_of(context))
        async for chunk in plane.stream_generate(plan):
            yield chunk
