"""EventStreamService: the streaming calls as OpenAI SSE bytes (api/sse.py).

Each method runs the same chunk stream as its TokenwireService twin
(api/call_streams.py) and
writes every chunk as one ``google.api.HttpBody`` holding its event, so the
gateway passes the bytes through without printing JSON or running Lua per
chunk. An error before the first event ends the call with its status (the
gateway answers an HTTP error, as for the typed stream); after it, the
stream gets an OpenAI error event and ``[DONE]``, and the call still ends
with the error's status.

With --sse-keep-alive-interval (vLLM's flag), a chat, completion or
generate stream idle that long gets an SSE comment (api/sse_keep_alive.py),
as vLLM sends one, from the time the call is admitted: an engine error
after a keep-alive went out is then an error event in the stream (as in
vLLM), not an HTTP status; bad input is still refused before any byte.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

import grpc
from google.api.httpbody_pb2 import HttpBody
from google.protobuf.message import Message

from tokenwire.server.api import anthropic_sse, call_streams, responses_sse, sse, sse_keep_alive
from tokenwire.server.api.proto_json import encode_json
from tokenwire.server.core.errors import abort_with, classify, unary_errors
from tokenwire.server.inference.anthropic.response import message_object
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import RequestKind
from tokenwire.server.inference.kinds import ANTHROPIC, CHAT, COMPLETION, GENERATE, RESPONSES
from tokenwire.server.inference.responses.response import response_object
from tokenwire.v1 import (
    anthropic_pb2,
    chat_pb2,
    completion_pb2,
    events_pb2_grpc,
    generate_pb2,
    responses_pb2,
)


def _body(data: bytes, first: bool) -> HttpBody:
    """One response message; the first names the content type."""
    return HttpBody(content_type=sse.CONTENT_TYPE, data=data) if first else HttpBody(data=data)


def _events(kind: RequestKind[Any, Any, Any, Any],
            render: Callable[[Message], bytes] = sse.chunk_event
            ) -> Callable[..., AsyncGenerator[HttpBody]]:
    """The handler streaming the chunks of a `kind` call as SSE HttpBody
    messages, ending with ``[DONE]``."""

    async def handler(self: EventStreamServicer, request: Any,
                      context: grpc.aio.ServicerContext) -> AsyncGenerator[HttpBody]:
        started = False
        try:
            async with call_streams.streamed(kind, self.plane, request, context) as chunks:
                if self.keep_alive:  # --sse-keep-alive-interval (api/sse_keep_alive.py)
                    async with aclosing(sse_keep_alive.beats(chunks, self.keep_alive)) as beats:
                        async for beat in beats:
                            yield _body(sse_keep_alive.COMMENT if beat is None else render(beat),
                                        not started)
                            started = True
                else:
                    async for chunk in chunks:
                        yield _body(render(chunk), not started)
                        started = True
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            err = classify(exc)
            if started:
                yield _body(sse.error_event(err) + sse.DONE, False)
            await abort_with(context, err)
            return
        yield _body(sse.DONE, not started)

    return handler


class EventStreamServicer(events_pb2_grpc.EventStreamServiceServicer):
    def __init__(self, plane: DataPlane):
        self.plane = plane
        # Seconds of silence before an SSE keep-alive comment (0: none).
        self.keep_alive = plane.settings.sse_keep_alive_interval

    StreamChatCompletionEvents = _events(CHAT, sse.chat_chunk_event)

    @unary_errors
    async def CreateChatCompletionJson(self, request: chat_pb2.CreateChatCompletionRequest,
                                       context: grpc.aio.ServicerContext) -> HttpBody:
        """A unary chat as the JSON body vLLM sends (every required key,
        top_logprobs on every entry: sse.response_json)."""
        resp = await call_streams.response(CHAT, self.plane, request, context)
        return HttpBody(content_type="application/json", data=sse.response_json(resp))

    @unary_errors
    async def CreateCompletionJson(self, request: completion_pb2.CreateCompletionRequest,
                                   context: grpc.aio.ServicerContext) -> HttpBody:
        """A unary completion as the JSON body vLLM sends (sse.response_json)."""
        resp = await call_streams.response(COMPLETION, self.plane, request, context)
        return HttpBody(content_type="application/json", data=sse.response_json(resp))

    StreamCompletionEvents = _events(COMPLETION)
    StreamGenerateEvents = _events(GENERATE)

    @unary_errors
    async def GenerateJson(self, request: generate_pb2.GenerateRequest,
                           context: grpc.aio.ServicerContext) -> HttpBody:
        """A unary generate as the JSON body vLLM sends (sse.response_json)."""
        resp = await call_streams.response(GENERATE, self.plane, request, context)
        return HttpBody(content_type="application/json", data=sse.response_json(resp))

    @unary_errors
    async def CreateMessageJson(self, request: anthropic_pb2.CreateMessageRequest,
                                context: grpc.aio.ServicerContext) -> HttpBody:
        """A unary Messages call as Anthropic's Message JSON (every field it requires)."""
        resp = await call_streams.response(ANTHROPIC, self.plane, request, context)
        return HttpBody(content_type="application/json", data=encode_json(message_object(resp)))

    async def StreamMessageEvents(self, request: anthropic_pb2.CreateMessageRequest,
                                  context: grpc.aio.ServicerContext) -> AsyncGenerator[HttpBody]:
        """A streamed Messages call as Anthropic's events (api/anthropic_sse.py):
        an error before the first event ends the call with its status (the
        gateway answers Anthropic's error body); after it, an error event."""
        started = False
        try:
            async with call_streams.streamed(ANTHROPIC, self.plane, request, context) as events:
                async for body in events:
                    yield _body(anthropic_sse.event(body), not started)
                    started = True
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            err = classify(exc)
            if started:
                yield _body(anthropic_sse.error_event(err), False)
            await abort_with(context, err)

    @unary_errors
    async def CreateResponseJson(self, request: responses_pb2.CreateResponseRequest,
                                 context: grpc.aio.ServicerContext) -> HttpBody:
        """A unary Responses call as OpenAI's Response JSON (every field it requires)."""
        resp = await call_streams.response(RESPONSES, self.plane, request, context)
        return HttpBody(content_type="application/json", data=encode_json(response_object(resp)))

    async def StreamResponseEvents(self, request: responses_pb2.CreateResponseRequest,
                                   context: grpc.aio.ServicerContext
                                   ) -> AsyncGenerator[HttpBody]:
        """A streamed Responses call as OpenAI's typed events
        (api/responses_sse.py): an error before the first event ends the
        call with its status (the gateway answers OpenAI's error body);
        after it, an `error` event."""
        started, seq = False, 0
        try:
            async with call_streams.streamed(RESPONSES, self.plane, request, context) as events:
                async for body in events:
                    yield _body(responses_sse.event(body), not started)
                    started, seq = True, body["sequence_number"] + 1
        except (asyncio.CancelledError, grpc.aio.AbortError):
            raise
        except Exception as exc:
            err = classify(exc)
            if started:
                yield _body(responses_sse.event({"type": "error", "sequence_number": seq,
                                                 **responses_sse.error_fields(err)}), False)
            await abort_with(context, err)
