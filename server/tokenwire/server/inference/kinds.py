"""The request kinds — chat, completion, generate — one object each behind
one interface (`RequestKind`): plan (proto -> validated domain, on the data
plane), run (engine -> the one response), stream (engine -> the chunks: the
kind's own generator, no wrapping layer), after (what a finished run
starts: chat's speculative prefill), and what a Session needs of a kind (its
prompt replaced by ids, a continuation's conflicts). Each kind delegates
running and building to its own modules (chat/, completion/, generate/:
service.py runs, response.py or the service builds the response and chunks);
the data plane only plans and holds what runs share (engine, worker id,
prefiller).

The servicers, the event streams and the Session look a kind up — in KINDS
by name (SessionStart's `request` oneof; SessionResponse's `<name>_chunk` /
`<name>_result`) or use CHAT, COMPLETION, GENERATE — instead of branching on it.
A new kind is one subclass here and one entry in KINDS."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, ClassVar, Generic, TypeVar

from tokenwire.server.core.domain import Caller, RenderOptions, RunOutcome
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.chat.request import ChatPlan
from tokenwire.server.inference.chat.service import run_chat, stream_chat
from tokenwire.server.inference.completion.request import CompletionPlan
from tokenwire.server.inference.completion.service import run_completion, stream_completion
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.generate.service import (
    GeneratePlan,
    run_generate,
    stream_generate,
)
from tokenwire.server.inference.request_fields import render_options, rendered_chars
from tokenwire.v1 import chat_pb2, completion_pb2, generate_pb2

Req = TypeVar("Req", chat_pb2.CreateChatCompletionRequest, completion_pb2.CreateCompletionRequest,
              generate_pb2.GenerateRequest)
P = TypeVar("P")
R = TypeVar("R")
C = TypeVar("C")


class RequestKind(Generic[Req, P, R, C]):
    """One request kind behind the interface every front end uses."""

    name: ClassVar[str]

    async def plan(self, plane: DataPlane, req: Req, *, caller: Caller, stream: bool,
                   dp_rank: str | None = None, session_id: str | None = None) -> P:
        """The validated plan of `req` (the data plane's <kind>_plan)."""
        raise NotImplementedError

    async def run(self, plane: DataPlane, plan: P, outcome: RunOutcome | None = None) -> R:
        """Run `plan` on the plane's engine to the end and build the one
        response (the kind's own service and response modules: chat/,
        completion/, generate/). `outcome`: filled with the ids."""
        raise NotImplementedError

    def stream(self, plane: DataPlane, plan: P, outcome: RunOutcome | None = None) -> AsyncIterator[C]:
        """The chunks of `plan`, built as the engine's outputs arrive: the
        kind's own stream generator (e.g. chat/service.py's stream_chat over
        ChatStreamBuilder), returned as is — no wrapping layer per chunk;
        close it when abandoned. `outcome`: filled once the stream finished."""
        raise NotImplementedError

    def call_outcome(self) -> RunOutcome | None:
        """What a single call (not a Session) keeps of its run for `after`:
        nothing unless the kind starts something after a run."""
        return None

    def after(self, plane: DataPlane, plan: P, outcome: RunOutcome | None) -> bool:
        """After a finished run: start what the plan asked for; True if started."""
        return False

    def with_prompt(self, req: Req, prompt: list[int]) -> Req:
        """A copy of `req` whose prompt is the given ids (nvext.token_data)."""
        copy = type(req)()
        copy.MergeFrom(req)  # type: ignore[arg-type]  # (same type)
        copy.nvext.token_data.extend(prompt)  # type: ignore[attr-defined]  # (chat, completion)
        return copy

    def continuation_options(self, req: Req, *, trust_template: bool) -> RenderOptions:
        """Refuse a continuation request that also carries a prompt
        (FIELDS_CONFLICT); the render options of its next turn."""
        return RenderOptions()

    def continuation_chars(self, req: Req) -> int:
        """The characters `req` adds when a continuation's messages render."""
        return 0


class ChatKind(RequestKind[chat_pb2.CreateChatCompletionRequest, ChatPlan,
                           chat_pb2.CreateChatCompletionResponse,
                           chat_pb2.StreamChatCompletionResponse]):
    name = "chat"

    async def plan(self, plane: DataPlane, req: chat_pb2.CreateChatCompletionRequest, *,
                   caller: Caller, stream: bool, dp_rank: str | None = None,
                   session_id: str | None = None) -> ChatPlan:
        return await plane.chat_plan(req, caller=caller, stream=stream, dp_rank=dp_rank,
                                     session_id=session_id)

    async def run(self, plane: DataPlane, plan: ChatPlan, outcome: RunOutcome | None = None
                  ) -> chat_pb2.CreateChatCompletionResponse:
        return await run_chat(plane.engine, plan, worker_id=plane.worker_id, outcome=outcome)

    def stream(self, plane: DataPlane, plan: ChatPlan, outcome: RunOutcome | None = None
               ) -> AsyncIterator[chat_pb2.StreamChatCompletionResponse]:
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


class CompletionKind(RequestKind[completion_pb2.CreateCompletionRequest, CompletionPlan,
                                 completion_pb2.CreateCompletionResponse,
                                 completion_pb2.StreamCompletionResponse]):
    name = "completion"

    async def plan(self, plane: DataPlane, req: completion_pb2.CreateCompletionRequest, *,
                   caller: Caller, stream: bool, dp_rank: str | None = None,
                   session_id: str | None = None) -> CompletionPlan:
        return await plane.completion_plan(req, caller=caller, stream=stream, dp_rank=dp_rank,
                                           session_id=session_id)

    async def run(self, plane: DataPlane, plan: CompletionPlan, outcome: RunOutcome | None = None
                  ) -> completion_pb2.CreateCompletionResponse:
        return await run_completion(plane.engine, plan, worker_id=plane.worker_id,
                                    outcome=outcome)

    def stream(self, plane: DataPlane, plan: CompletionPlan, outcome: RunOutcome | None = None
               ) -> AsyncIterator[completion_pb2.StreamCompletionResponse]:
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


class GenerateKind(RequestKind[generate_pb2.GenerateRequest, GeneratePlan,
                               generate_pb2.GenerateResponse, generate_pb2.GenerateResponse]):
    name = "generate"

    async def plan(self, plane: DataPlane, req: generate_pb2.GenerateRequest, *, caller: Caller,
                   stream: bool, dp_rank: str | None = None,
                   session_id: str | None = None) -> GeneratePlan:
        return await plane.generate_plan(req, caller=caller, stream=stream, dp_rank=dp_rank,
                                         session_id=session_id)

    async def run(self, plane: DataPlane, plan: GeneratePlan, outcome: RunOutcome | None = None
                  ) -> generate_pb2.GenerateResponse:
        return await run_generate(plane.engine, plan, outcome=outcome)

    def stream(self, plane: DataPlane, plan: GeneratePlan, outcome: RunOutcome | None = None
               ) -> AsyncIterator[generate_pb2.GenerateResponse]:
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


CHAT = ChatKind()
COMPLETION = CompletionKind()
GENERATE = GenerateKind()
AnyKind = RequestKind[Any, Any, Any, Any]
KINDS: dict[str, AnyKind] = {kind.name: kind for kind in (CHAT, COMPLETION, GENERATE)}
