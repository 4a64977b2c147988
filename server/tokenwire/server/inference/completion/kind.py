"""The completion kind (CreateCompletion, StreamCompletion, a Session's
completion): its plan (request.py: one engine request per prompt of a
batch), run and stream (service.py over response.py), a continuation's
conflicts, and the render RPC (RenderCompletion). The steps every kind's
plan takes are inference/kind_base.py's; completion's routing fields are
in nvext."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from tokenwire.server.core.domain import Caller, EngineRequest, RenderOptions, RunOutcome
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.completion.request import CompletionPlan, build_completion_plan
from tokenwire.server.inference.completion.service import run_completion, stream_completion
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.kind_base import RequestKind
from tokenwire.server.inference.shared.openai_wire import WIRE
from tokenwire.server.inference.shared.render import as_generate_request
from tokenwire.v1 import completion_pb2


class CompletionKind(RequestKind[completion_pb2.CreateCompletionRequest, CompletionPlan,
                                 completion_pb2.CreateCompletionResponse,
                                 completion_pb2.StreamCompletionResponse]):
    name = "completion"
    wire = WIRE  # (inference/shared/openai_wire.py)
    routing_prefix = "nvext."
    dp_rank_field = "dp_rank"
    max_tokens_param = "max_tokens"
    stamps_weight_version = True  # system_fingerprint
    offloads_preparation = True  # large prompts

    def build(self, plane: DataPlane, req: completion_pb2.CreateCompletionRequest, *,
              caller: Caller, stream: bool) -> CompletionPlan:
        return build_completion_plan(req, plane.engine, plane.settings,
                                     served_model=plane.served_model, caller=caller,
                                     stream=stream)

    def engine_requests(self, plan: CompletionPlan) -> list[EngineRequest]:
        return plan.requests  # one per prompt (unary: one response for all)

    async def run(self, plane: DataPlane, plan: CompletionPlan, outcome: RunOutcome | None = None
                  ) -> completion_pb2.CreateCompletionResponse:
        return await run_completion(plane.engine, plan, worker_id=plane.worker_id,
                                    outcome=outcome)

    def stream(self, plane: DataPlane, plan: CompletionPlan, outcome: RunOutcome | None = None
               ) -> AsyncGenerator[completion_pb2.StreamCompletionResponse]:
        return stream_completion(plane.engine, plan, worker_id=plane.worker_id, outcome=outcome,
                                 message_limit=plane.settings.max_message_bytes)

    def continuation_options(self, req: completion_pb2.CreateCompletionRequest, *,
                             trust_template: bool) -> RenderOptions:
        if req.HasField("prompt") or req.nvext.token_data:
            raise InvalidArgument(
                "with a continuation, completion.prompt and completion.nvext.token_data must "
                "be empty: the prompt is the earlier request's ids plus the suffix",
                param="prompt", reason="FIELDS_CONFLICT",
            )
        return RenderOptions()

    async def render(self, plane: DataPlane, req: completion_pb2.CreateCompletionRequest, *,
                     caller: Caller) -> completion_pb2.RenderCompletionResponse:
        """The Generate requests `req` would run as, one per prompt."""
        plan = await self.plan(plane, req, caller=caller, stream=False)
        salt = req.nvext.cache_salt or req.cache_salt
        return completion_pb2.RenderCompletionResponse(
            requests=[as_generate_request(plan.model, r, salt) for r in plan.requests])


COMPLETION = CompletionKind()
