"""EventStreamService: the streaming calls as OpenAI SSE bytes (sse.py).

Each method runs the same chunk stream as its TokenwireService twin
(call_streams.py) and
writes every chunk as one ``google.api.HttpBody`` holding its event, so the
gateway passes the bytes through without printing JSON or running Lua per
chunk. An error before the first event ends the call with its status (the
gateway answers an HTTP error, as for the typed stream); after it, the
stream gets an OpenAI error event and ``[DONE]``, and the call still ends
with the error's status.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing

import grpc
from google.api.httpbody_pb2 import HttpBody
from google.protobuf.message import Message

from tokenwire.server import call_streams, sse
from tokenwire.server.data_plane import DataPlane
from tokenwire.server.errors import abort_with, classify
from tokenwire.v1 import chat_pb2, completion_pb2, events_pb2_grpc, generate_pb2


async def events(chunks: AsyncGenerator[Message],
                 context: grpc.aio.ServicerContext) -> AsyncGenerator[HttpBody]:
    """`chunks` as SSE HttpBody messages, ending with ``[DONE]``."""
    started = False
    try:
        async with aclosing(chunks):
            async for chunk in chunks:
                if started:
                    yield HttpBody(data=sse.chunk_event(chunk))
                else:
                    started = True
                    yield HttpBody(content_type=sse.CONTENT_TYPE, data=sse.chunk_event(chunk))
    except (asyncio.CancelledError, grpc.aio.AbortError):
        raise
    except Exception as exc:
        err = classify(exc)
        if started:
            yield HttpBody(data=sse.error_event(err) + sse.DONE)
        await abort_with(context, err)
        return
    yield HttpBody(content_type=sse.CONTENT_TYPE, data=sse.DONE) if not started else HttpBody(data=sse.DONE)


class EventStreamServicer(events_pb2_grpc.EventStreamServiceServicer):
    def __init__(self, plane: DataPlane):
        self.plane = plane

    async def StreamChatCompletionEvents(
        self, request: chat_pb2.CreateChatCompletionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[HttpBody]:
        async with aclosing(events(call_streams.chat_chunks(self.plane, request, context), context)) as out:
            async for body in out:
                yield body

    async def StreamCompletionEvents(
        self, request: completion_pb2.CreateCompletionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[HttpBody]:
        async with aclosing(events(call_streams.completion_chunks(self.plane, request, context), context)) as out:
            async for body in out:
                yield body

    async def StreamGenerateEvents(
        self, request: generate_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[HttpBody]:
        async with aclosing(events(call_streams.generate_chunks(self.plane, request, context), context)) as out:
            async for body in out:
                yield body
