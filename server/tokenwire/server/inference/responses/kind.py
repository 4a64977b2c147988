"""The Responses kind (CreateResponse, CreateResponseJson,
StreamResponseEvents): a Responses request becomes the chat request it
runs as (request.py), which the chat kind — handed in by
inference/kinds.py, as kinds never import one another — plans, runs and
streams: rendering (images too: chat's image path), validation,
admission, limits, tenancy, weight bounds, cancellation and metrics are
chat's (a chat error's field is renamed to
the Responses field). Its outputs become the Response and its typed events
(response.py). Routing fields come from the call's metadata or `nvext`."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import ChatBackedKind
from tokenwire.server.inference.responses.request import (
    chat_param,
    image_param,
    text_chars,
    to_chat,
)
from tokenwire.server.inference.responses.response import Event, ResponseEvents, build_response
from tokenwire.v1 import responses_pb2


@dataclasses.dataclass
class ResponsePlan:
    """The chat plan a Responses request runs as, and the request (echoed)."""

    chat: Any  # the chat kind's plan
    req: responses_pb2.CreateResponseRequest

    @property
    def request(self) -> Any:
        return self.chat.request


class ResponsesKind(ChatBackedKind[responses_pb2.CreateResponseRequest, ResponsePlan,
                                responses_pb2.CreateResponseResponse, Event]):
    name = "responses"
    routing_prefix = "nvext."
    max_tokens_param = "max_output_tokens"

    chat_param = staticmethod(chat_param)
    to_chat = staticmethod(to_chat)  # (render: vLLM's /v1/responses/render)
    image_param = staticmethod(image_param)
    text_chars = staticmethod(text_chars)

    async def plan(self, plane: DataPlane, req: responses_pb2.CreateResponseRequest, *,
                   caller: Caller, stream: bool, dp_rank: str | None = None,
                   session_id: str | None = None) -> ResponsePlan:
        images: dict[str, str] = {}  # chat's image part -> its input_image (errors)
        chat_req = await self.converted(
            plane, req, lambda: to_chat(req, stream=stream, images=images))
        chat = await self.plan_chat(plane, chat_req, caller=caller, stream=stream,
                                    dp_rank=dp_rank, session_id=session_id,
                                    rename=lambda param: image_param(param, images))
        return ResponsePlan(chat, req)

    async def run(self, plane: DataPlane, plan: ResponsePlan, outcome: RunOutcome | None = None
                  ) -> responses_pb2.CreateResponseResponse:
        return build_response(plan.req, await self.chat.run(plane, plan.chat, outcome))

    async def stream(self, plane: DataPlane, plan: ResponsePlan,
                     outcome: RunOutcome | None = None) -> AsyncGenerator[Event]:
        # response.created waits for the chat's first chunk, so a request the
        # engine refuses up front (full, down) fails the call with its status.
        events = ResponseEvents(plan.req, plan.chat.model)
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

