"""The data plane: every inference operation, once, for every front end.

The gRPC servicer (unary and streaming RPCs) and the Session stream both
call this object; it is built once at start-up (app.build_data_plane) with
the objects every call shares (engine, worker id, prefiller, tenancy).
Plans are proto -> domain (validated) here; runs (domain -> engine -> proto:
the response or the chunks) are the request kinds' own (inference/kinds.py:
one object per kind, one interface, each delegating to its chat/,
completion/ or generate/ modules). Front ends go through the kinds:

    plan = await CHAT.plan(plane, request, caller=..., stream=True)
    outcome = RunOutcome()
    async for chunk in CHAT.stream(plane, plan, outcome): ...
    CHAT.after(plane, plan, outcome)   # speculative prefill of the next turn

A kind's stream returns its own async generator (no wrapping layer), so the
per-token path is exactly chat/service.py's stream_chat (ChatStreamBuilder),
completion's stream_completion, generate's stream_generate.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, Engine, EngineRequest
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.core.weight_bounds import EXACT, LAG, WeightBound, bound_from, pick_bound
from tokenwire.server.inference.chat.request import ChatPlan, build_chat_plan
from tokenwire.server.inference.completion.request import CompletionPlan, build_completion_plan
from tokenwire.server.inference.continuation_store import ContinuationStore
from tokenwire.server.inference.generate.service import GeneratePlan, build_generate_plan
from tokenwire.server.inference.offload import OFFLOAD_CHARS, Offload
from tokenwire.server.inference.prefill import Prefiller
from tokenwire.server.inference.render_service import generate_request, generate_requests
from tokenwire.server.inference.request_fields import (
    has_request_template,
    pick_dp_rank,
    pick_session_id,
    request_chars,
)
from tokenwire.server.inference.tokenize_service import detokenize, tokenize
from tokenwire.server.inference.turns import TurnTemplates
from tokenwire.server.security.tenancy import Tenancy
from tokenwire.v1 import chat_pb2, completion_pb2, generate_pb2, tokenize_pb2

P = TypeVar("P")


class DataPlane:
    def __init__(
        self,
        engine: Engine,
        settings: ServerSettings,
        state: ServingState,
        *,
        store: ContinuationStore,
        turns: TurnTemplates,
        prefiller: Prefiller,
        tenancy: Tenancy,
    ):
        self.engine = engine
        self.settings = settings
        self.state = state
        self.store = store
        self.turns = turns
        self.prefiller = prefiller
        self.tenancy = tenancy
        self.offload = Offload(settings.request_template_timeout_seconds,
                               settings.max_offload_queue)
        self.served_model = settings.resolved_served_name()
        self.worker_id = settings.resolved_worker_id()

    # -- plans (proto -> validated domain) --------------------------------
    async def _prepare(self, req: Any, fn: Callable[[], P]) -> P:
        """Run a request's preparation (validation, rendering, tokenizing)
        inline, or off the event loop when it is heavy (inference/offload.py)."""
        if has_request_template(req):
            return await self.offload.template(fn)
        if request_chars(req) > OFFLOAD_CHARS:
            return await self.offload.prompt(fn)
        return fn()

    async def chat_plan(
        self, req: chat_pb2.CreateChatCompletionRequest, *, caller: Caller, stream: bool,
        dp_rank: str | None = None, session_id: str | None = None,
    ) -> ChatPlan:
        plan = await self._prepare(req, lambda: build_chat_plan(
            req, self.engine, self.settings,
            served_model=self.served_model, caller=caller, stream=stream,
        ))
        plan.weight_version = self.state.weight_version
        self._response_fits([plan.request], "max_tokens", plan.extra_fields)
        self._route([plan.request], req, req.nvext, "nvext.", "dp_rank", caller=caller,
                    dp_rank=dp_rank, session_id=session_id)
        return plan

    async def generate_plan(
        self, req: generate_pb2.GenerateRequest, *, caller: Caller, stream: bool,
        dp_rank: str | None = None, session_id: str | None = None,
    ) -> GeneratePlan:
        plan = build_generate_plan(
            req, self.engine, self.settings,
            served_model=self.served_model, caller=caller, stream=stream,
        )
        self._response_fits([plan.request], "sampling_params.max_tokens")
        self._route([plan.request], req, req, "", "data_parallel_rank", caller=caller,
                    dp_rank=dp_rank, session_id=session_id)
        return plan

    async def completion_plan(
        self, req: completion_pb2.CreateCompletionRequest, *, caller: Caller, stream: bool,
        dp_rank: str | None = None, session_id: str | None = None,
    ) -> CompletionPlan:
        plan = await self._prepare(req, lambda: build_completion_plan(
            req, self.engine, self.settings,
            served_model=self.served_model, caller=caller, stream=stream,
        ))
        plan.weight_version = self.state.weight_version
        self._response_fits(plan.requests, "max_tokens", plan.extra_fields)  # unary: one response
        self._route(plan.requests, req, req.nvext, "nvext.", "dp_rank", caller=caller,
                    dp_rank=dp_rank, session_id=session_id)
        return plan

    def _route(self, requests: list[EngineRequest], req: Any, fields: Any, prefix: str,
               rank_field: str, *, caller: Caller, dp_rank: str | None,
               session_id: str | None) -> None:
        """What every kind's engine requests take from the call and from the
        body (`fields`: chat's and completion's nvext, generate's root, whose
        names get `prefix`): data-parallel rank, session id, tenant, weight
        bound, salting by version."""
        body = getattr(fields, rank_field) if fields.HasField(rank_field) else None
        rank = self._dp_rank(body, prefix + rank_field, dp_rank)
        session = pick_session_id(req.session_id, session_id)
        bound = _weight_bound(fields, prefix, caller)
        salt = _salt_by_version(fields)
        for request in requests:
            request.data_parallel_rank = rank
            request.session_id = session
            request.tenant = caller.tenant
            request.weight_bound = bound
            request.salt_by_version = salt

    def _response_fits(self, requests: list[EngineRequest], param: str,
                       extra_fields: frozenset[str] = frozenset()) -> None:
        """Refuse up front a response estimated over the message limit: a
        unary one (one or a batch of engine requests with the same options:
        one message), or a stream's largest message (validation.stream_fits;
        the prompts of a batch stream apart)."""
        p = requests[0].params
        limit = self.settings.max_message_bytes
        if not requests[0].stream:
            v.response_fits(param, n=sum(r.params.n for r in requests),
                            max_tokens=max(r.params.max_tokens for r in requests),
                            logprobs=p.logprobs,
                            prompt_len=sum(len(r.prompt_token_ids) for r in requests),
                            prompt_logprobs=p.prompt_logprobs, limit=limit)
            return
        whole = bool(extra_fields & {"completion_token_ids", "engine_data"})
        for r in requests:
            v.stream_fits(param, n=r.params.n, max_tokens=r.params.max_tokens,
                          prompt_len=len(r.prompt_token_ids), prompt_logprobs=p.prompt_logprobs,
                          whole=whole, limit=limit, logprobs=p.logprobs)

    def _dp_rank(self, body: int | None, param: str, header: str | None) -> int | None:
        if body is None and header is None:
            return None
        size = int(self.engine.config_report().get("data_parallel_size") or 1)
        return pick_dp_rank(body, param, header, size)

    async def render_chat(
        self, req: chat_pb2.CreateChatCompletionRequest, *, caller: Caller,
    ) -> generate_pb2.GenerateRequest:
        """The Generate request `req` would run as (nothing is generated)."""
        plan = await self.chat_plan(req, caller=caller, stream=False)
        return generate_request(plan, req)

    async def render_completion(
        self, req: completion_pb2.CreateCompletionRequest, *, caller: Caller,
    ) -> completion_pb2.RenderCompletionResponse:
        """The Generate requests `req` would run as, one per prompt."""
        plan = await self.completion_plan(req, caller=caller, stream=False)
        return generate_requests(plan, req)

    # -- tokenizer -------------------------------------------------------
    async def tokenize(self, req: tokenize_pb2.TokenizeRequest) -> tokenize_pb2.TokenizeResponse:
        return await self._prepare(req, lambda: tokenize(
            req, self.engine, self.turns, served_model=self.served_model,
            trust_template=self.settings.trust_request_chat_template,
        ))

    def detokenize(self, req: tokenize_pb2.DetokenizeRequest) -> tokenize_pb2.DetokenizeResponse:
        return detokenize(req, self.engine, served_model=self.served_model)


def _weight_bound(msg: Any, prefix: str, caller: Caller) -> WeightBound | None:
    """The weight bound of a request: its body fields (exact_weight_version,
    max_weight_lag on `msg`) win over its call's metadata (core/weight_bounds.py)."""
    body = bound_from(
        msg.exact_weight_version if msg.HasField(EXACT) else None,
        msg.max_weight_lag if msg.HasField(LAG) else None,
        exact_param=prefix + EXACT, lag_param=prefix + LAG,
    )
    return pick_bound(body, caller.weight_bound)


def _salt_by_version(msg: Any) -> bool | None:
    """A request's own salt_cache_by_version (None: the server's --salt-cache-by-version)."""
    return bool(msg.salt_cache_by_version) if msg.HasField("salt_cache_by_version") else None
