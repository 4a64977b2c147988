"""The Anthropic Messages kind (CreateMessage, StreamMessageEvents,
CountMessageTokens): a Messages request becomes the chat request it runs
as (request.py), which the chat kind — handed in by inference/kinds.py, as
kinds never import one another — plans, runs and streams: rendering,
admission, limits, tenancy, weight bounds, cancellation, metrics, the
next turn's prefill and images (chat's image path) are chat's (a chat error's field renamed to the
Messages field). Its outputs become Anthropic's Message and
events (response.py). Routing fields come from the call's metadata."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.inference.anthropic.request import (
    chat_param,
    count_to_chat,
    image_param,
    text_chars,
    to_chat,
)
from tokenwire.server.inference.anthropic.response import Event, MessageEvents, build_message
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import ChatBackedKind
from tokenwire.v1 import anthropic_pb2


@dataclasses.dataclass
class MessagePlan:
    """The chat plan a Messages request runs as."""

    chat: Any  # the chat kind's plan
    input_tokens: int

    @property
    def request(self) -> Any:
        return self.chat.request


class AnthropicKind(ChatBackedKind[anthropic_pb2.CreateMessageRequest, MessagePlan,
                                anthropic_pb2.CreateMessageResponse, Event]):
    name = "anthropic"
    routing_prefix = ""
    max_tokens_param = "max_tokens"

    chat_param = staticmethod(chat_param)
    to_chat = staticmethod(to_chat)  # (render: vLLM's /v1/messages/render)
    image_param = staticmethod(image_param)
    text_chars = staticmethod(text_chars)

    async def plan(self, plane: DataPlane, req: anthropic_pb2.CreateMessageRequest, *,
                   caller: Caller, stream: bool, dp_rank: str | None = None,
                   session_id: str | None = None) -> MessagePlan:
        images: dict[str, str] = {}  # chat's image part -> its block's source (errors)
        chat_req = await self.converted(  # (errors name Messages fields)
            plane, req, lambda: to_chat(req, stream=stream, images=images))
        chat = await self.plan_chat(plane, chat_req, caller=caller, stream=stream,
                                    dp_rank=dp_rank, session_id=session_id,
                                    rename=lambda param: image_param(param, images))
        chat.continuous_usage = False  # (--enable-force-include-usage): usage ends the stream
        return MessagePlan(chat, len(chat.request.prompt_token_ids))

    async def run(self, plane: DataPlane, plan: MessagePlan, outcome: RunOutcome | None = None
                  ) -> anthropic_pb2.CreateMessageResponse:
        return build_message(await self.chat.run(plane, plan.chat, outcome))

    async def stream(self, plane: DataPlane, plan: MessagePlan,
                     outcome: RunOutcome | None = None) -> AsyncGenerator[Event]:
        events = MessageEvents(plan.input_tokens)
        async with aclosing(self.chat.stream(plane, plan.chat, outcome)) as chunks:
            async for chunk in chunks:
                for event in events.on_chunk(chunk):
                    yield event

    async def count_tokens(self, plane: DataPlane,
                           req: anthropic_pb2.CountMessageTokensRequest, *, caller: Caller,
                           ) -> anthropic_pb2.CountMessageTokensResponse:
        """The tokens of the request's rendered prompt, each image's expanded
        tokens included: the ids the engine would get (nothing is generated)."""
        images: dict[str, str] = {}
        chat_req = await self.converted(plane, req, lambda: count_to_chat(req, images))
        chat = await self.plan_chat(plane, chat_req, caller=caller, stream=False,
                                    rename=lambda param: image_param(param, images))
        return anthropic_pb2.CountMessageTokensResponse(
            input_tokens=len(chat.request.prompt_token_ids))
