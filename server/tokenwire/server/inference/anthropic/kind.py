"""The Anthropic Messages kind (CreateMessage, StreamMessage,
StreamMessageEvents, CountMessageTokens, RenderMessage): a Messages request
becomes the chat request it runs as (request.py), which the chat kind —
handed in by inference/fronts.py, as kinds never import one another —
plans, runs and streams: rendering, admission, limits, tenancy, weight
bounds, cancellation, metrics, the next turn's prefill and images (chat's
image path) are chat's (a chat error's field renamed to the Messages
field). Its outputs become Anthropic's Message and events (response.py),
printed and framed by wire.py. Routing fields come from the call's
metadata."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing

from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.inference.anthropic import request, wire
from tokenwire.server.inference.anthropic.response import Event, MessageEvents, build_message
from tokenwire.server.inference.anthropic.typed_events import typed_event
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import ChatBackedKind, ChatBackedPlan
from tokenwire.v1 import anthropic_pb2


class AnthropicKind(ChatBackedKind[anthropic_pb2.CreateMessageRequest,
                                   anthropic_pb2.CreateMessageResponse, Event]):
    name = "anthropic"
    wire = wire.WIRE
    typed = staticmethod(typed_event)
    conversion = request  # (render too: vLLM's /v1/messages/render)

    async def plan(self, plane: DataPlane, req: anthropic_pb2.CreateMessageRequest, *,
                   caller: Caller, stream: bool, dp_rank: str | None = None,
                   session_id: str | None = None) -> ChatBackedPlan:
        plan = await super().plan(plane, req, caller=caller, stream=stream, dp_rank=dp_rank,
                                  session_id=session_id)
        plan.chat.continuous_usage = False  # (--enable-force-include-usage): usage ends it
        return plan

    async def run(self, plane: DataPlane, plan: ChatBackedPlan,
                  outcome: RunOutcome | None = None) -> anthropic_pb2.CreateMessageResponse:
        return build_message(await self.chat.run(plane, plan.chat, outcome))

    async def stream(self, plane: DataPlane, plan: ChatBackedPlan,
                     outcome: RunOutcome | None = None) -> AsyncGenerator[Event]:
        events = MessageEvents(len(plan.request.prompt_token_ids))
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
        chat_req = await self.converted(plane, req, lambda: request.count_to_chat(req, images))
        chat = await self.plan_chat(plane, chat_req, caller=caller, stream=False,
                                    rename=lambda param: request.image_param(param, images))
        return anthropic_pb2.CountMessageTokensResponse(
            input_tokens=len(chat.request.prompt_token_ids))
