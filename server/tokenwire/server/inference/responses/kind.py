"""The Responses kind (CreateResponse, StreamResponse, StreamResponseEvents,
RenderResponse): a Responses request becomes the chat request it runs as
(request.py), which the chat kind — handed in by inference/fronts.py, as
kinds never import one another — plans, runs and streams: rendering
(images too: chat's image path), validation, admission, limits, tenancy,
weight bounds, cancellation and metrics are chat's (a chat error's field
is renamed to the Responses field). Its outputs become the Response and
its typed events (response.py, events.py), printed and framed by wire.py. Routing
fields come from the call's metadata or `nvext`."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from tokenwire.server.core.domain import RunOutcome
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import ChatBackedKind, ChatBackedPlan
from tokenwire.server.inference.responses import request, wire
from tokenwire.server.inference.responses.events import ResponseEvents
from tokenwire.server.inference.responses.response import Event, build_response
from tokenwire.server.inference.responses.typed_events import typed_event
from tokenwire.v1 import responses_pb2


class ResponsesKind(ChatBackedKind[responses_pb2.CreateResponseRequest,
                                   responses_pb2.CreateResponseResponse, Event]):
    name = "responses"
    wire = wire.WIRE
    typed = staticmethod(typed_event)
    conversion = request  # (render too: vLLM's /v1/responses/render)

    async def run(self, plane: DataPlane, plan: ChatBackedPlan,
                  outcome: RunOutcome | None = None) -> responses_pb2.CreateResponseResponse:
        return build_response(plan.req, await self.chat.run(plane, plan.chat, outcome),
                              _harmony(plan))

    async def stream(self, plane: DataPlane, plan: ChatBackedPlan,
                     outcome: RunOutcome | None = None) -> AsyncGenerator[Event]:
        # response.created waits for the chat's first chunk, so a request the
        # engine refuses up front (full, down) fails the call with its status.
        events = ResponseEvents(plan.req, plan.chat.model, _harmony(plan))
        started = False
        async with aclosing(self.chat.stream(plane, plan.chat, outcome)) as chunks:
            async for chunk in chunks:
                if not started:
                    started = True
                    for event in events.start():
                        yield event
                for event in events.on_chunk(chunk):
                    yield event
        for event in [] if started else events.start():
            yield event
        for event in events.end():
            yield event


def _harmony(plan: ChatBackedPlan) -> bool:
    """A gpt-oss model's harmony parsing (vLLM's Responses items for it):
    the engine's request parsers say so (engine/vllm/parsers.py)."""
    return bool(getattr(plan.chat.parsing, "harmony", False))
