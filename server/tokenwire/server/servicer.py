"""The thin gRPC servicer: proto in, plan, run, proto out."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator

import grpc

from tokenwire.server.chat_request import build_chat_plan
from tokenwire.server.chat_service import run_chat, stream_chat
from tokenwire.server.continuation_store import ContinuationStore
from tokenwire.server.domain import Engine
from tokenwire.server.errors import Unavailable, stream_errors, unary_errors
from tokenwire.server.generate_service import build_generate_plan, run_generate, stream_generate
from tokenwire.server.prefill import Prefiller
from tokenwire.server.session import Session, SessionDeps
from tokenwire.server.settings import ServerSettings
from tokenwire.server.tokenize_service import detokenize, tokenize
from tokenwire.server.turns import TurnTemplates
from tokenwire.v1 import (
    chat_pb2,
    generate_pb2,
    models_pb2,
    service_pb2_grpc,
    session_pb2,
    tokenize_pb2,
)

TENANT_HEADER = "x-tenant-id"


def tenant_of(context: grpc.aio.ServicerContext) -> str | None:
    for key, value in context.invocation_metadata() or ():
        if key == TENANT_HEADER and value:
            return str(value)
    return None


class ServingState:
    """Whether the server accepts work, and how many calls are in flight."""

    def __init__(self) -> None:
        self.serving = False
        self.active_calls = 0
        self.started = int(time.time())
        self.sessions = 0
        self.background: set[asyncio.Task[None]] = set()  # speculative prefills

    async def cancel_background(self) -> None:
        tasks = list(self.background)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def admit(self) -> None:
        if not self.serving:
            raise Unavailable("the server is not serving (starting up or shutting down)")

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Admit one generation call and count it while it runs."""
        self.admit()
        self.active_calls += 1
        try:
            yield
        finally:
            self.active_calls -= 1


class TokenwireServicer(service_pb2_grpc.TokenwireServiceServicer):
    def __init__(self, engine: Engine, settings: ServerSettings, state: ServingState):
        self.engine = engine
        self.settings = settings
        self.state = state
        self.served_model = settings.resolved_served_name()
        self.worker_id = settings.resolved_worker_id()
        self.store = ContinuationStore(
            max_tokens=settings.continuation_max_tokens,
            session_max_tokens=settings.continuation_session_max_tokens,
            session_max_requests=settings.continuation_session_max_requests,
        )
        turns = TurnTemplates(engine)
        self.prefiller = Prefiller(engine, settings, state, turns)
        self.session_deps = SessionDeps(
            engine, settings, state, self.store, turns, self.prefiller,
            self.served_model, self.worker_id,
        )

    @unary_errors
    async def CreateChatCompletion(
        self, request: chat_pb2.CreateChatCompletionRequest, context: grpc.aio.ServicerContext
    ) -> chat_pb2.CreateChatCompletionResponse:
        with self.state.call():
            plan = build_chat_plan(
                request, self.engine, self.settings,
                served_model=self.served_model, tenant=tenant_of(context),
            )
            engine = self.prefiller.watch(plan)
            resp = await run_chat(engine, plan, worker_id=self.worker_id)
            self.prefiller.after_chat(request, plan, engine)
            return resp

    @stream_errors
    async def StreamChatCompletion(
        self, request: chat_pb2.CreateChatCompletionRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[chat_pb2.StreamChatCompletionResponse]:
        with self.state.call():
            plan = build_chat_plan(
                request, self.engine, self.settings,
                served_model=self.served_model, tenant=tenant_of(context),
            )
            engine = self.prefiller.watch(plan)
            async for chunk in stream_chat(engine, plan, worker_id=self.worker_id):
                yield chunk
            self.prefiller.after_chat(request, plan, engine)

    @unary_errors
    async def Generate(
        self, request: generate_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> generate_pb2.GenerateResponse:
        with self.state.call():
            plan = build_generate_plan(
                request, self.engine, self.settings,
                served_model=self.served_model, tenant=tenant_of(context), stream=False,
            )
            return await run_generate(self.engine, plan)

    @stream_errors
    async def StreamGenerate(
        self, request: generate_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[generate_pb2.GenerateResponse]:
        with self.state.call():
            plan = build_generate_plan(
                request, self.engine, self.settings,
                served_model=self.served_model, tenant=tenant_of(context), stream=True,
            )
            async for chunk in stream_generate(self.engine, plan):
                yield chunk

    @stream_errors
    async def Session(
        self, request_iterator: AsyncIterator[session_pb2.SessionRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[session_pb2.SessionResponse]:
        with self.state.call():
            session = Session(self.session_deps, tenant=tenant_of(context))
            async for event in session.run(request_iterator):
                yield event

    @unary_errors
    async def Tokenize(
        self, request: tokenize_pb2.TokenizeRequest, context: grpc.aio.ServicerContext
    ) -> tokenize_pb2.TokenizeResponse:
        return tokenize(request, self.engine, served_model=self.served_model)

    @unary_errors
    async def Detokenize(
        self, request: tokenize_pb2.DetokenizeRequest, context: grpc.aio.ServicerContext
    ) -> tokenize_pb2.DetokenizeResponse:
        return detokenize(request, self.engine, served_model=self.served_model)

    @unary_errors
    async def ListModels(
        self, request: models_pb2.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> models_pb2.ListModelsResponse:
        resp = models_pb2.ListModelsResponse(object="list")
        resp.data.add(
            id=self.served_model,
            object="model",
            created=self.state.started,
            owned_by="tokenwire",
            root=self.engine.model_path,
            max_model_len=self.engine.max_model_len,
        )
        return resp

    @unary_errors
    async def GetHealth(
        self, request: models_pb2.GetHealthRequest, context: grpc.aio.ServicerContext
    ) -> models_pb2.GetHealthResponse:
        self.state.admit()
        await self.engine.check_health()
        return models_pb2.GetHealthResponse(status="SERVING")

    @unary_errors
    async def GetStats(
        self, request: models_pb2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> models_pb2.GetStatsResponse:
        return models_pb2.GetStatsResponse(
            engine_requests=self.engine.num_unfinished_requests(),
            active_calls=self.state.active_calls,
            worker_id=self.worker_id,
            model=self.served_model,
            serving=self.state.serving,
            sessions=self.state.sessions,
            speculative_prefills=len(self.state.background),
            continuation_tokens=self.store.tokens,
        )
