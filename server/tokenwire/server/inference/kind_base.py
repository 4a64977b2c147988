"""The fronts that generate, and the steps their plans take, run once here.

A `RequestKind` (chat/kind.py, completion/kind.py, generate/kind.py,
generate/sglang.py) is a `Front` (inference/front.py) that builds its own
engine requests: `build` (its own request.py or service.py, all
validation), `run`, `stream` (its own chunk generator, returned as is),
`after` (chat's speculative prefill), and the `SessionFace` a Session needs
(its prompt replaced by ids, a continuation's conflicts).

`RequestKind.plan` is the same for every kind: build the plan (off the
event loop when the preparation is heavy: inference/offload.py), stamp the
weight version, refuse a response too large for a message, and route the
engine requests (data-parallel rank, session, tenant, weight bound, salting
by version). Where the kinds differ in these steps, the kind says so in
class attributes (`routing_prefix`, `dp_rank_field`, `max_tokens_param`,
`stamps_weight_version`, `offloads_preparation`), read here.

A `ChatBackedKind` (the Messages and Responses APIs) runs as a chat: its
plan is the chat kind's plan of the chat request it converts to, wrapped
with the request (`ChatBackedPlan`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, ClassVar, Protocol, TypeVar

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import Caller, EngineRequest, RenderOptions, RunOutcome
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.weight_bounds import EXACT, LAG, WeightBound, bound_from, pick_bound
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.front import Front
from tokenwire.server.inference.offload import OFFLOAD_CHARS
from tokenwire.server.inference.shared.identity import pick_dp_rank, pick_session_id
from tokenwire.server.inference.shared.prompt_chars import weighs_over

Req = TypeVar("Req")
P = TypeVar("P")
R = TypeVar("R")
C = TypeVar("C")


class SessionFace:
    """What a Session needs of a kind (api/session.py): its prompt replaced
    by ids, a continuation's conflicts and render options, the characters
    a continuation adds."""

    def with_prompt(self, req: Any, prompt: list[int]) -> Any:
        """A copy of `req` whose prompt is the given ids (nvext.token_data)."""
        copy = type(req)()
        copy.MergeFrom(req)
        copy.nvext.token_data.extend(prompt)  # (chat, completion)
        return copy

    def continuation_options(self, req: Any, *, trust_template: bool) -> RenderOptions:
        """Refuse a continuation request that also carries a prompt
        (FIELDS_CONFLICT); the render options of its next turn."""
        return RenderOptions()

    def continuation_chars(self, req: Any) -> int:
        """The characters `req` adds when a continuation's messages render."""
        return 0


class RequestKind(Front[Req, P, R, C], SessionFace):
    """A front that generates from its own engine requests (chat,
    completion, generate, SGLang's generate)."""

    # Where the request's routing fields (data-parallel rank, session id,
    # weight bound, salt_cache_by_version) sit: "nvext." (the request's
    # nvext message) or "" (the request's root); errors name them so.
    routing_prefix: ClassVar[str] = "nvext."
    dp_rank_field: ClassVar[str] = "dp_rank"  # the body's data-parallel rank field
    max_tokens_param: ClassVar[str] = "max_tokens"  # named when a response would not fit
    # Whether the plan carries the weight version current when it was planned
    # (its system_fingerprint); a plan without a fingerprint does not.
    stamps_weight_version: ClassVar[bool] = True
    # Whether building the plan may leave the event loop (templates, large
    # prompts: inference/offload.py); a kind that only reads ids builds inline.
    offloads_preparation: ClassVar[bool] = True

    # -- plan (proto -> validated domain) --------------------------------
    def build(self, plane: DataPlane, req: Req, *, caller: Caller, stream: bool) -> P:
        """The kind's own plan of `req`, every field validated (its
        request.py or service.py); `plan` adds the steps all kinds take."""
        raise NotImplementedError

    def engine_requests(self, plan: P) -> list[EngineRequest]:
        """The engine requests of `plan` (one, unless the kind batches)."""
        return [plan.request]  # type: ignore[attr-defined]  # (every plan has one)

    async def plan(self, plane: DataPlane, req: Req, *, caller: Caller, stream: bool,
                   dp_rank: str | None = None, session_id: str | None = None) -> P:
        """The validated plan of `req`, routed (`dp_rank`, `session_id`: the
        call's metadata, which the body's fields override)."""
        if self.offloads_preparation:
            plan = await plane.offload.prepare(
                req, lambda: self.build(plane, req, caller=caller, stream=stream))
        else:
            plan = self.build(plane, req, caller=caller, stream=stream)
        if self.stamps_weight_version:
            plan.weight_version = plane.state.weight_version  # type: ignore[attr-defined]
        requests = self.engine_requests(plan)
        _response_fits(plane, requests, self.max_tokens_param,
                       plan.extra_fields)  # type: ignore[attr-defined]  # (every plan)
        self._route(plane, requests, req, caller=caller, dp_rank=dp_rank, session_id=session_id)
        return plan

    def _route(self, plane: DataPlane, requests: list[EngineRequest], req: Any, *,
               caller: Caller, dp_rank: str | None, session_id: str | None) -> None:
        """What every kind's engine requests take from the call and from the
        body (its fields under `routing_prefix`): data-parallel rank,
        session id, tenant, weight bound, salting by version."""
        prefix = self.routing_prefix
        fields = getattr(req, prefix.rstrip(".")) if prefix else req
        rank_field = self.dp_rank_field
        body = getattr(fields, rank_field) if fields.HasField(rank_field) else None
        rank = _dp_rank(plane, body, prefix + rank_field, dp_rank)
        session = pick_session_id(_field(req, "session_id") or "", session_id)
        bound = _weight_bound(fields, prefix, caller)
        salt = _salt_by_version(fields)
        for request in requests:
            request.data_parallel_rank = rank
            request.session_id = session
            request.tenant = caller.tenant
            request.weight_bound = bound
            request.salt_by_version = salt

    async def render(self, plane: DataPlane, req: Req, *, caller: Caller) -> Any:
        """What `req` runs as, without generating (vLLM's /render of this
        API: Generate request(s)): the kinds with a render route define it."""
        raise NotImplementedError


AnyKind = RequestKind[Any, Any, Any, Any]


@dataclasses.dataclass
class ChatBackedPlan:
    """The chat plan a request of a chat-backed kind runs as, and the request."""

    chat: Any  # the chat kind's plan
    req: Any

    @property
    def request(self) -> EngineRequest:
        return self.chat.request  # type: ignore[no-any-return]


class Conversion(Protocol):
    """A chat-backed kind's request module: its request as the chat request
    it runs as, and chat's field names as its own."""

    def to_chat(self, req: Any, *, stream: bool, images: dict[str, str]) -> Any:
        """The chat request `req` runs as; `images` gets each image part's
        chat field -> this request's field."""

    def chat_param(self, param: str) -> str:
        """This kind's name of a chat request's field (an error's param)."""

    def image_param(self, param: str, images: dict[str, str]) -> str:
        """This kind's name of a chat field, its image parts' included."""

    def text_chars(self, req: Any) -> int:
        """The characters of text `req` holds at least, counted without
        converting it (never more than the chat it converts to counts)."""


class ChatBackedKind(Front[Req, ChatBackedPlan, R, C]):
    """A kind that runs as a chat (the Responses and Messages APIs): the
    chat kind, handed in by inference/fronts.py (kinds never import one
    another), plans, runs and streams it, so rendering, admission, limits,
    tenancy, weight bounds, cancellation, metrics and the next turn's
    prefill are chat's. The kind's request module (`conversion`) converts
    its request to chat's and names its own field for a chat field, so a
    chat error names what the caller sent; the kind converts chat's
    outputs back. The conversion is
    preparation too (`converted`): a large body converts off the event
    loop, its length refused first, as chat's is."""

    conversion: ClassVar[Conversion]

    def __init__(self, chat: AnyKind):
        self.chat = chat

    async def plan(self, plane: DataPlane, req: Req, *, caller: Caller, stream: bool,
                   dp_rank: str | None = None, session_id: str | None = None
                   ) -> ChatBackedPlan:
        """The chat plan of the chat request `req` converts to (its errors
        name this kind's fields, its image parts' included)."""
        images: dict[str, str] = {}  # chat's image part -> this request's field
        chat_req = await self.converted(
            plane, req, lambda: self.conversion.to_chat(req, stream=stream, images=images))
        chat = await self.plan_chat(plane, chat_req, caller=caller, stream=stream,
                                    dp_rank=dp_rank, session_id=session_id,
                                    rename=lambda param: self.conversion.image_param(param, images))
        return ChatBackedPlan(chat, req)

    async def plan_chat(self, plane: DataPlane, chat_req: Any, *, caller: Caller, stream: bool,
                        dp_rank: str | None = None, session_id: str | None = None,
                        rename: Callable[[str], str] | None = None) -> Any:
        """The chat kind's plan of `chat_req`; its INVALID_ARGUMENT names
        this kind's field (`rename`: this request's own naming, e.g. of its
        image parts; else the conversion's `chat_param`)."""
        try:
            return await self.chat.plan(plane, chat_req, caller=caller, stream=stream,
                                        dp_rank=dp_rank, session_id=session_id)
        except InvalidArgument as exc:
            self._rename(exc, rename)
            raise

    async def converted(self, plane: DataPlane, req: Any, convert: Callable[[], Any]) -> Any:
        """The chat request `req` runs as (`convert`: the kind's to_chat),
        converted where the body's weight says (inference/offload.py: a
        large body on the prompt thread), its length refused first by the
        text it holds at least (as the chat it converts to would be, under
        chat's name for the field), before any conversion."""
        engine = plane.engine

        def prepare() -> Any:
            v.text_fits(self.conversion.chat_param("messages"), self.conversion.text_chars(req),
                        engine.max_model_len, engine.max_token_chars)
            return convert()

        return await plane.offload.run(prepare, own_template=False,
                                       heavy=weighs_over((req,), OFFLOAD_CHARS))

    async def render(self, plane: DataPlane, req: Req, *, caller: Caller) -> Any:
        """The Generate request `req` runs as: the chat kind's render of the
        chat it converts to (vLLM's /render of this API); errors name this
        kind's fields."""
        images: dict[str, str] = {}
        chat_req = await self.converted(
            plane, req, lambda: self.conversion.to_chat(req, stream=False, images=images))
        try:
            return await self.chat.render(plane, chat_req, caller=caller)
        except InvalidArgument as exc:
            self._rename(exc, lambda param: self.conversion.image_param(param, images))
            raise

    def _rename(self, exc: InvalidArgument, rename: Callable[[str], str] | None) -> None:
        """A chat error's field as this kind names it (in place)."""
        if exc.param:
            name = (rename or self.conversion.chat_param)(exc.param)
            if name != exc.param:
                exc.message = exc.message.replace(exc.param, name)
                exc.param = name

    def call_outcome(self) -> RunOutcome | None:
        return self.chat.call_outcome()

    def after(self, plane: DataPlane, plan: Any, outcome: RunOutcome | None) -> bool:
        return self.chat.after(plane, plan.chat, outcome)


def _response_fits(plane: DataPlane, requests: list[EngineRequest], param: str,
                   extra_fields: frozenset[str]) -> None:
    """Refuse up front a response estimated over the message limit: a
    unary one (one or a batch of engine requests with the same options:
    one message), or a stream's largest message (validation.stream_fits;
    the prompts of a batch stream apart)."""
    p = requests[0].params
    limit = plane.settings.max_message_bytes
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


def _dp_rank(plane: DataPlane, body: int | None, param: str, header: str | None) -> int | None:
    if body is None and header is None:
        return None
    size = int(plane.engine.config_report().get("data_parallel_size") or 1)
    return pick_dp_rank(body, param, header, size)


def _weight_bound(msg: Any, prefix: str, caller: Caller) -> WeightBound | None:
    """The weight bound of a request: its body fields (exact_weight_version,
    max_weight_lag on `msg`) win over its call's metadata (core/weight_bounds.py)."""
    body = bound_from(
        _field(msg, EXACT), _field(msg, LAG),
        exact_param=prefix + EXACT, lag_param=prefix + LAG,
    )
    return pick_bound(body, caller.weight_bound)


def _salt_by_version(msg: Any) -> bool | None:
    """A request's own salt_cache_by_version (None: the server's --salt-cache-by-version)."""
    salt = _field(msg, "salt_cache_by_version")
    return None if salt is None else bool(salt)


def _field(msg: Any, name: str) -> Any:
    """Field `name` of `msg` when its message has it and it is set, else
    None (a foreign request, e.g. VllmEngine's, has no routing fields: its
    bound and session come from the call's metadata)."""
    if name not in msg.DESCRIPTOR.fields_by_name:
        return None
    field = msg.DESCRIPTOR.fields_by_name[name]
    if field.has_presence:
        return getattr(msg, name) if msg.HasField(name) else None
    return getattr(msg, name)
