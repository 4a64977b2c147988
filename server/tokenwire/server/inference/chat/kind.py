"""The chat kind (CreateChatCompletion, StreamChatCompletion, a Session's
chat): its plan (request.py), run and stream (service.py over
response.py), the speculative prefill of the next turn after a run
(inference/prefill.py), a continuation's render options, and the render
RPC (RenderChatCompletion). The steps every kind's plan takes are
inference/kind_base.py's; chat's routing fields are in nvext; messages
with images are rendered after them (chat/media.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from tokenwire.server.core.domain import Caller, RenderOptions, RunOutcome
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.media_inputs import keeping_tensors
from tokenwire.server.inference.chat.media import render_media
from tokenwire.server.inference.chat.request import ChatPlan, build_chat_plan
from tokenwire.server.inference.chat.service import run_chat, stream_chat
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import RequestKind
from tokenwire.server.inference.shared.messages import render_options
from tokenwire.server.inference.shared.openai_wire import CHAT_WIRE
from tokenwire.server.inference.shared.prompt_chars import rendered_chars
from tokenwire.server.inference.shared.render import as_generate_request
from tokenwire.server.inference.shared.token_media import prepare
from tokenwire.v1 import chat_pb2, generate_pb2


class ChatKind(RequestKind[chat_pb2.CreateChatCompletionRequest, ChatPlan,
                           chat_pb2.CreateChatCompletionResponse,
                           chat_pb2.StreamChatCompletionResponse]):
    name = "chat"
    wire = CHAT_WIRE  # (inference/shared/openai_wire.py)
    routing_prefix = "nvext."
    dp_rank_field = "dp_rank"
    max_tokens_param = "max_tokens"
    stamps_weight_version = True  # system_fingerprint
    offloads_preparation = True  # templates, large conversations

    async def plan(self, plane: DataPlane, req: chat_pb2.CreateChatCompletionRequest, *,
                   caller: Caller, stream: bool, dp_rank: str | None = None,
                   session_id: str | None = None) -> ChatPlan:
        """The steps every kind takes, then messages with images rendered by
        the engine (admitted, off the event loop) into the expanded prompt."""
        plan = await super().plan(plane, req, caller=caller, stream=stream, dp_rank=dp_rank,
                                  session_id=session_id)
        if plan.media is not None:
            await render_media(plane.engine, plan)
        if plan.token_media is not None:  # token ids with their images (nvext)
            param, asked = plan.max_tokens_asked
            await prepare(plane.engine, plan.request, plan.token_media,
                          max_tokens_param=param, max_tokens=asked)
            if plan.parsing is not None:
                plan.request.reasoning_ended, plan.request.reasoning_kwargs = (
                    plan.parsing.engine_reasoning(plan.request.prompt_token_ids))
        return plan

    def build(self, plane: DataPlane, req: chat_pb2.CreateChatCompletionRequest, *,
              caller: Caller, stream: bool) -> ChatPlan:
        return build_chat_plan(req, plane.engine, plane.settings,
                               served_model=plane.served_model, caller=caller, stream=stream)

    async def run(self, plane: DataPlane, plan: ChatPlan, outcome: RunOutcome | None = None
                  ) -> chat_pb2.CreateChatCompletionResponse:
        return await run_chat(plane.engine, plan, worker_id=plane.worker_id, outcome=outcome)

    def stream(self, plane: DataPlane, plan: ChatPlan, outcome: RunOutcome | None = None
               ) -> AsyncGenerator[chat_pb2.StreamChatCompletionResponse]:
        return stream_chat(plane.engine, plan, worker_id=plane.worker_id, outcome=outcome,
                           message_limit=plane.settings.max_message_bytes)

    def call_outcome(self) -> RunOutcome | None:
        return RunOutcome()  # the speculative prefill of the next turn reads it

    def after(self, plane: DataPlane, plan: ChatPlan, outcome: RunOutcome | None) -> bool:
        if outcome is None:
            return False
        first = outcome.completions[0] if outcome.completions else []
        # The next turn's prefill (its template probe where the request's rendering ran).
        return plane.prefiller.start(plan, outcome.prompt_ids, first, plane.offload)

    def continuation_options(self, req: chat_pb2.CreateChatCompletionRequest, *,
                             trust_template: bool) -> RenderOptions:
        if req.messages or req.nvext.token_data or req.tokens:
            raise InvalidArgument(
                "with a continuation, chat.messages, chat.tokens and chat.nvext.token_data "
                "must be empty: the prompt is the earlier request's ids plus the suffix",
                param="messages", reason="FIELDS_CONFLICT",
            )
        return render_options(req, trust_template=trust_template)

    def continuation_chars(self, req: chat_pb2.CreateChatCompletionRequest) -> int:
        return rendered_chars(req)[1]  # its tools render too

    async def render(self, plane: DataPlane, req: chat_pb2.CreateChatCompletionRequest, *,
                     caller: Caller) -> generate_pb2.GenerateRequest:
        """The Generate request `req` would run as (nothing is generated);
        with images, its expanded ids and vLLM's `features` of them, as
        vLLM's /v1/chat/completions/render answers."""
        with keeping_tensors():  # its features leave with the request
            plan = await self.plan(plane, req, caller=caller, stream=False)
        if plan.request.params.structured is not None:
            raise InvalidArgument(
                "response_format cannot be rendered into a Generate request (Generate has no "
                "structured outputs); render without it", param="response_format",
                reason="FEATURE_DISABLED",
            )
        out = as_generate_request(plan.model, plan.request,
                                  req.nvext.cache_salt or req.cache_salt)
        if plan.request.multimodal is not None:  # images: the expanded ids and their features
            out.features.update(await plane.engine.media_features(plan.request.multimodal))
        return out


CHAT = ChatKind()
