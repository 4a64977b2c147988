"""The VllmEngine fronts (inference/fronts.py names their RPCs): `ENGINE`,
Generate (token ids in, ids and logprobs out, streamed or not: service.py),
and `ENGINE_EMBED`, Embed. Every step every kind's plan takes is
RequestKind's: off-loop preparation, admission and the tenant's caps, the
`x-request-id`, the data-parallel rank (the request's own field), the
session (`x-session-id`), and the weight bound from the call's metadata
(`x-exact-weight-version`, `x-max-weight-lag`: the proto has no field for
them).

`Abort` (api/vllm_engine.py) ends a running Generate by the request id the
router gave it: the calls running now are kept by (tenant, request id), so
a caller ends only its own tenant's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterator
from contextlib import aclosing, contextmanager
from typing import Any

from smg_grpc_proto.generated import vllm_engine_pb2 as pb

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.core.errors import Cancelled, FailedPrecondition, Internal, InvalidArgument
from tokenwire.server.core.pooling import PoolRequest
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.front import PreparedFront
from tokenwire.server.inference.kind_base import RequestKind
from tokenwire.server.inference.shared.identity import new_request_id
from tokenwire.server.inference.vllm_grpc.request import EnginePlan, build_plan
from tokenwire.server.inference.vllm_grpc.service import run_generate, stream_generate

Running = dict[tuple[str | None, str], asyncio.Task[Any]]


class EngineKind(RequestKind[pb.GenerateRequest, EnginePlan, list[pb.GenerateResponse],
                             pb.GenerateResponse]):
    name = "vllm_engine"
    routing_prefix = ""  # data_parallel_rank at the request's root
    dp_rank_field = "data_parallel_rank"
    max_tokens_param = "sampling_params.max_tokens"
    stamps_weight_version = False  # a GenerateResponse carries no version
    offloads_preparation = False  # ids in: built inline

    def __init__(self) -> None:
        self._running: dict[int, Running] = {}  # by data plane (a process may hold several)
        self._aborted: set[tuple[str | None, str]] = set()  # cancelled by Abort

    def build(self, plane: DataPlane, req: pb.GenerateRequest, *, caller: Caller,
              stream: bool) -> EnginePlan:
        return build_plan(req, plane.engine, plane.settings, caller=caller)

    async def run(self, plane: DataPlane, plan: EnginePlan, outcome: RunOutcome | None = None
                  ) -> list[pb.GenerateResponse]:
        return await run_generate(plane.engine, plan)

    async def stream(self, plane: DataPlane, plan: EnginePlan,  # type: ignore[override]
                     outcome: RunOutcome | None = None) -> AsyncGenerator[pb.GenerateResponse]:
        with self._kept(plane, plan) as key:
            try:
                async with aclosing(stream_generate(plane.engine, plan)) as chunks:
                    async for chunk in chunks:
                        yield chunk
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is None or key not in self._aborted:
                    raise  # the client went, or the server stops
                task.uncancel()  # Abort's cancellation, answered as a status
                raise Cancelled(f"request {key[1]!r} was aborted (VllmEngine Abort)",
                                reason="REQUEST_CANCELLED") from None

    @contextmanager
    def _kept(self, plane: DataPlane, plan: EnginePlan) -> Iterator[tuple[str | None, str]]:
        """The call's task, kept by its tenant and request id while it runs."""
        running = self._running.setdefault(id(plane), {})
        key = (plan.request.tenant, plan.request.request_id)
        task = asyncio.current_task()
        if task is None or key in running:
            if key in running:
                raise InvalidArgument(
                    f"request_id {key[1]!r} is already running: ids of running requests must "
                    "differ (Abort names them)", param="request_id", reason="DUPLICATE_REQUEST_ID")
            raise Internal("a Generate call runs outside a task", reason="INTERNAL")
        running[key] = task
        try:
            yield key
        finally:
            self._aborted.discard(key)
            if running.get(key) is task:
                del running[key]

    def abort(self, plane: DataPlane, tenant: str | None, request_ids: list[str]) -> int:
        """Cancel the running Generate calls of `tenant` named by
        `request_ids` (their engine requests are freed as any cancelled
        call's); how many were running."""
        running = self._running.get(id(plane), {})
        found = 0
        for rid in request_ids:
            task = running.get((tenant, rid))
            if task is not None:
                self._aborted.add((tenant, rid))
                task.cancel()
                found += 1
        return found


async def _embed_plan(plane: DataPlane, req: pb.EmbedRequest, caller: Caller) -> PoolRequest:
    engine = plane.engine
    if not engine.pooling:
        raise FailedPrecondition(
            "the served model generates: Embed needs a pooling model (start the server with "
            "--runner pooling)", reason="MODEL_DOES_NOT_POOL")
    if not req.HasField("tokenized") or not req.tokenized.input_ids:
        raise InvalidArgument("tokenized.input_ids is required (at least one id)",
                              param="tokenized.input_ids", reason="PROMPT_EMPTY")
    v.prompt_fits("tokenized.input_ids", len(req.tokenized.input_ids), engine.max_model_len)
    ids = v.token_ids("tokenized.input_ids", req.tokenized.input_ids, engine.vocab_size)
    return PoolRequest(request_id=new_request_id("embd", req.request_id, caller.request_id),
                       prompt_token_ids=ids, task="embed", tenant=caller.tenant)


class EmbedFront(PreparedFront[pb.EmbedRequest, Any]):
    """Embed: one input's embedding (vLLM's `embed` task)."""

    def __init__(self) -> None:
        super().__init__("vllm_engine_embed", _embed_plan)

    async def run(self, plane: DataPlane, plan: Any, outcome: RunOutcome | None = None
                  ) -> pb.EmbedResponse:
        found = await plane.engine.pool(plan)
        return pb.EmbedResponse(embedding=found.data, prompt_tokens=len(plan.prompt_token_ids),
                                embedding_dim=len(found.data))


ENGINE = EngineKind()
ENGINE_EMBED = EmbedFront()
