"""The generate kind (Generate, StreamGenerate, a Session's generate; the
SGLang shim runs through it: sglang.py): token ids in, its plan, run and
stream in service.py. The steps every kind's plan takes are
inference/kind_base.py's; generate's routing fields sit at the request's
root, its plan carries no weight version, and it is built inline (ids
only); a prompt's media is prepared after (inference/shared/token_media.py)."""

from __future__ import annotations

from collections.abc import AsyncGenerator

from tokenwire.server.core.domain import Caller, RenderOptions, RunOutcome
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.generate.service import (
    GeneratePlan,
    build_generate_plan,
    run_generate,
    stream_generate,
)
from tokenwire.server.inference.kind_base import RequestKind
from tokenwire.server.inference.shared.openai_wire import WIRE
from tokenwire.server.inference.shared.token_media import prepare
from tokenwire.v1 import generate_pb2


class GenerateKind(RequestKind[generate_pb2.GenerateRequest, GeneratePlan,
                               generate_pb2.GenerateResponse, generate_pb2.GenerateResponse]):
    name = "generate"
    wire = WIRE  # (inference/shared/openai_wire.py)
    routing_prefix = ""  # exact_weight_version, data_parallel_rank, ... at the root
    dp_rank_field = "data_parallel_rank"
    max_tokens_param = "sampling_params.max_tokens"
    stamps_weight_version = False  # a GenerateResponse has no system_fingerprint
    offloads_preparation = False  # ids in: built inline

    async def plan(self, plane: DataPlane, req: generate_pb2.GenerateRequest, *, caller: Caller,
                   stream: bool, dp_rank: str | None = None, session_id: str | None = None
                   ) -> GeneratePlan:
        """The steps every kind takes, then a prompt's media prepared (the
        engine's processor or feature checks, admitted, off the event loop)
        into the expanded prompt."""
        plan = await super().plan(plane, req, caller=caller, stream=stream, dp_rank=dp_rank,
                                  session_id=session_id)
        if plan.media is not None:
            await prepare(plane.engine, plan.request, plan.media,
                          max_tokens_param=self.max_tokens_param,
                          max_tokens=plan.max_tokens_asked)
        return plan

    def build(self, plane: DataPlane, req: generate_pb2.GenerateRequest, *, caller: Caller,
              stream: bool) -> GeneratePlan:
        return build_generate_plan(req, plane.engine, plane.settings,
                                   served_model=plane.served_model, caller=caller, stream=stream)

    async def run(self, plane: DataPlane, plan: GeneratePlan, outcome: RunOutcome | None = None
                  ) -> generate_pb2.GenerateResponse:
        return await run_generate(plane.engine, plan, outcome=outcome)

    def stream(self, plane: DataPlane, plan: GeneratePlan, outcome: RunOutcome | None = None
               ) -> AsyncGenerator[generate_pb2.GenerateResponse]:
        return stream_generate(plane.engine, plan, outcome=outcome,
                               message_limit=plane.settings.max_message_bytes)

    def with_prompt(self, req: generate_pb2.GenerateRequest, prompt: list[int]
                    ) -> generate_pb2.GenerateRequest:
        gen = generate_pb2.GenerateRequest()
        gen.CopyFrom(req)
        gen.token_ids.extend(prompt)
        return gen

    def continuation_options(self, req: generate_pb2.GenerateRequest, *,
                             trust_template: bool) -> RenderOptions:
        if req.token_ids:
            raise InvalidArgument(
                "with a continuation, generate.token_ids must be empty: the prompt is the "
                "earlier request's ids plus the suffix",
                param="token_ids", reason="FIELDS_CONFLICT",
            )
        return RenderOptions()


GENERATE = GenerateKind()
