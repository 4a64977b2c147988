"""The thin ControlService servicer: proto in, control plane, proto out."""

from __future__ import annotations

import math
import re
from typing import Any, TypeAlias

import grpc
from google.protobuf import json_format

from tokenwire.server.control.plane import ControlPlane
from tokenwire.server.control.workers import PRIME_RL_UPDATE, check_raw_call
from tokenwire.server.core.errors import (
    FailedPrecondition,
    InvalidArgument,
    PermissionDenied,
    unary_errors,
)
from tokenwire.v1 import control_pb2, control_pb2_grpc

Ctx: TypeAlias = grpc.aio.ServicerContext


def _deadline(context: Ctx) -> float | None:
    remaining = context.time_remaining()
    return None if remaining is None else max(0.0, float(remaining))


def _opt(msg: object, name: str, default: bool) -> bool:
    return bool(getattr(msg, name)) if msg.HasField(name) else default  # type: ignore[attr-defined]


# Keys whose values are secrets (vLLM's model_config.hf_token; a connector's
# extra config may hold keys, passwords): GetServerInfo answers them redacted.
_SECRET_KEY = re.compile(
    r"(token|secret|password|passwd|credentials?|api_?key|access_?key(_id)?|private_?key"
    r"|authorization)$", re.IGNORECASE)
REDACTED = "<redacted>"


def redact_secrets(value: Any) -> Any:
    """`value` with every secret-like key's value (one that is set) as REDACTED."""
    if isinstance(value, dict):
        return {k: REDACTED if _SECRET_KEY.search(str(k)) and v not in (None, False, "")
                else redact_secrets(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_secrets(v) for v in value]
    return value


def _json_safe(value: Any) -> Any:
    """`value` with what a google.protobuf.Value cannot hold as a number in
    JSON (NaN, infinities) as text, as vLLM's fallback=str would print it."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


class ControlServicer(control_pb2_grpc.ControlServiceServicer):
    def __init__(self, plane: ControlPlane):
        self.plane = plane

    def _state(self) -> control_pb2.ControlState:
        s = self.plane.snapshot()
        return control_pb2.ControlState(
            paused=s.paused, pause_mode=s.pause_mode, sleeping=s.sleeping,
            weight_version=s.weight_version, lora_adapters=s.lora_adapters,
            engine_requests=s.engine_requests, updates=s.updates, last_error=s.last_error,
            weight_path=s.weight_path, generation=s.generation, load_failed=s.load_failed,
            weight_fingerprint=s.weight_fingerprint,
            requests_ended_by_bound=dict(self.plane.bounds.ended),
            bounded_requests=len(self.plane.bounds),
            announced_version=self.plane.bounds.announced,
        )

    @unary_errors
    async def AnnounceWeightVersion(
        self, request: control_pb2.AnnounceWeightVersionRequest, context: Ctx,
    ) -> control_pb2.AnnounceWeightVersionResponse:
        self.plane.announce(request.weight_version)
        return control_pb2.AnnounceWeightVersionResponse(state=self._state())

    @unary_errors
    async def Pause(
        self, request: control_pb2.PauseRequest, context: Ctx
    ) -> control_pb2.PauseResponse:
        await self.plane.pause(request.mode, _opt(request, "clear_cache", True), _deadline(context))
        return control_pb2.PauseResponse(status="paused", state=self._state())

    @unary_errors
    async def Resume(
        self, request: control_pb2.ResumeRequest, context: Ctx
    ) -> control_pb2.ResumeResponse:
        await self.plane.resume(_deadline(context), force=request.force)
        return control_pb2.ResumeResponse(status="resumed", state=self._state())

    @unary_errors
    async def IsPaused(
        self, request: control_pb2.IsPausedRequest, context: Ctx
    ) -> control_pb2.IsPausedResponse:
        return control_pb2.IsPausedResponse(is_paused=self.plane.snapshot().paused)

    @unary_errors
    async def GetControlState(
        self, request: control_pb2.GetControlStateRequest, context: Ctx
    ) -> control_pb2.GetControlStateResponse:
        return control_pb2.GetControlStateResponse(state=self._state())

    @unary_errors
    async def UpdateWeightsFromPath(
        self, request: control_pb2.UpdateWeightsFromPathRequest, context: Ctx
    ) -> control_pb2.UpdateWeightsFromPathResponse:
        result = await self.plane.update_from_path(
            request.path, request.weight_version, pause_mode=request.pause_mode,
            clear_cache=_opt(request, "clear_cache", True), deadline=_deadline(context),
            expected_fingerprint=request.expected_fingerprint,
        )
        return control_pb2.UpdateWeightsFromPathResponse(
            state=self._state(), load_ms=round(result.load_ms), paused_ms=round(result.paused_ms)
        )

    @unary_errors
    async def UpdateWeightsFromDisk(
        self, request: control_pb2.UpdateWeightsFromDiskRequest, context: Ctx
    ) -> control_pb2.UpdateWeightsFromDiskResponse:
        if request.load_format not in ("", "auto"):
            raise InvalidArgument(
                f"load_format must be 'auto'; got {request.load_format!r}", param="load_format",
                reason="VALUE_NOT_ALLOWED",
            )
        mode = "abort" if _opt(request, "abort_all_requests", False) else "keep"
        result = await self.plane.update_from_path(
            request.model_path, request.weight_version, pause_mode=mode,
            clear_cache=_opt(request, "flush_cache", True), deadline=_deadline(context),
            path_param="model_path",
        )
        return control_pb2.UpdateWeightsFromDiskResponse(
            success=True, state=self._state(),
            message=f"Succeeded to update model weights in {result.load_ms:.0f} ms.",
        )

    @unary_errors
    async def InitWeightTransfer(
        self, request: control_pb2.InitWeightTransferRequest, context: Ctx
    ) -> control_pb2.InitWeightTransferResponse:
        info = json_format.MessageToDict(request.init_info)
        await self.plane.init_transfer(info, _deadline(context))
        return control_pb2.InitWeightTransferResponse(message="Weight transfer initialized")

    @unary_errors
    async def StartWeightUpdate(
        self, request: control_pb2.StartWeightUpdateRequest, context: Ctx
    ) -> control_pb2.StartWeightUpdateResponse:
        await self.plane.start_update(_deadline(context))
        return control_pb2.StartWeightUpdateResponse(message="Weight update started")

    @unary_errors
    async def UpdateWeights(
        self, request: control_pb2.UpdateWeightsRequest, context: Ctx
    ) -> control_pb2.UpdateWeightsResponse:
        if request.weight_dir:  # prime-rl's body: reload from a checkpoint folder
            if request.HasField("update_info"):
                raise InvalidArgument("update_weights takes update_info (vLLM) or weight_dir "
                                      "(prime-rl), not both", param="weight_dir",
                                      reason="FIELDS_CONFLICT")
            # prime-rl's worker extension loads when the operator allowed it (NCCL/NIXL
            # modes), else tokenwire: either way one weight load (control/weights.py).
            worker = PRIME_RL_UPDATE if self.plane.rpc_allowed(PRIME_RL_UPDATE) else ""
            await self.plane.update_from_path(
                request.weight_dir, "", pause_mode="keep", clear_cache=True,
                deadline=_deadline(context), path_param="weight_dir", worker_method=worker)
            if worker:
                return control_pb2.UpdateWeightsResponse(
                    message=f"Weights updated by the workers' {worker}",
                    applied=f"weight_dir:{worker}", state=self._state())
            return control_pb2.UpdateWeightsResponse(
                message=f"Weights loaded from {request.weight_dir}", applied="weight_dir",
                state=self._state())
        if not request.HasField("update_info"):
            raise InvalidArgument(
                "update_weights needs update_info (vLLM) or weight_dir (prime-rl)",
                param="update_info", reason="FIELD_REQUIRED")
        info = json_format.MessageToDict(request.update_info)
        await self.plane.update_weights(info, _deadline(context))
        return control_pb2.UpdateWeightsResponse(message="Weights updated", applied="update_info")

    @unary_errors
    async def FinishWeightUpdate(
        self, request: control_pb2.FinishWeightUpdateRequest, context: Ctx
    ) -> control_pb2.FinishWeightUpdateResponse:
        await self.plane.finish_update(request.weight_version, _deadline(context))
        return control_pb2.FinishWeightUpdateResponse(message="Weight update finished",
                                                      state=self._state())

    @unary_errors
    async def SetWeightVersion(
        self, request: control_pb2.SetWeightVersionRequest, context: Ctx
    ) -> control_pb2.SetWeightVersionResponse:
        await self.plane.set_version(request.new_version, _deadline(context))
        return control_pb2.SetWeightVersionResponse(success=True, new_version=request.new_version)

    @unary_errors
    async def GetWeightInfo(
        self, request: control_pb2.GetWeightInfoRequest, context: Ctx
    ) -> control_pb2.GetWeightInfoResponse:
        return control_pb2.GetWeightInfoResponse(
            weight_version=self.plane.snapshot().weight_version)

    @unary_errors
    async def ResetPrefixCache(
        self, request: control_pb2.ResetPrefixCacheRequest, context: Ctx
    ) -> control_pb2.ResetPrefixCacheResponse:
        ok = await self.plane.reset_prefix_cache(
            _opt(request, "reset_running_requests", True), _deadline(context)
        )
        return control_pb2.ResetPrefixCacheResponse(success=ok)

    @unary_errors
    async def ResetMultimodalCache(
        self, request: control_pb2.ResetMultimodalCacheRequest, context: Ctx
    ) -> control_pb2.ResetMultimodalCacheResponse:
        await self.plane.reset_cache("mm", _deadline(context))
        return control_pb2.ResetMultimodalCacheResponse()

    @unary_errors
    async def ResetEncoderCache(
        self, request: control_pb2.ResetEncoderCacheRequest, context: Ctx
    ) -> control_pb2.ResetEncoderCacheResponse:
        await self.plane.reset_cache("encoder", _deadline(context))
        return control_pb2.ResetEncoderCacheResponse()

    @unary_errors
    async def CheckWeights(
        self, request: control_pb2.CheckWeightsRequest, context: Ctx
    ) -> control_pb2.CheckWeightsResponse:
        sums, match, differ = await self.plane.weights.check_weights(
            request.action, dict(request.baseline), _deadline(context))
        resp = control_pb2.CheckWeightsResponse(checksums=sums, status="reset"
                                                if request.action == "reset" else "")
        if match is not None:  # (a compare)
            resp.match = match
            resp.mismatches.SetInParent()
            resp.mismatches.extend(differ)
        return resp

    @unary_errors
    async def Sleep(
        self, request: control_pb2.SleepRequest, context: Ctx
    ) -> control_pb2.SleepResponse:
        level = request.level if request.HasField("level") else 1
        await self.plane.sleep(level, request.mode, _deadline(context))
        return control_pb2.SleepResponse(status="sleeping", level=level)

    @unary_errors
    async def WakeUp(
        self, request: control_pb2.WakeUpRequest, context: Ctx
    ) -> control_pb2.WakeUpResponse:
        awake = await self.plane.wake_up(list(request.tags), _deadline(context))
        return control_pb2.WakeUpResponse(status="awake" if awake else "sleeping",
                                          tags=request.tags)

    @unary_errors
    async def IsSleeping(
        self, request: control_pb2.IsSleepingRequest, context: Ctx
    ) -> control_pb2.IsSleepingResponse:
        return control_pb2.IsSleepingResponse(is_sleeping=await self.plane.is_sleeping())

    @unary_errors
    async def AbortRequests(
        self, request: control_pb2.AbortRequestsRequest, context: Ctx
    ) -> control_pb2.AbortRequestsResponse:
        n = await self.plane.abort(list(request.request_ids), _deadline(context))
        return control_pb2.AbortRequestsResponse(status="aborted", aborted=n)

    @unary_errors
    async def LoadLoraAdapter(
        self, request: control_pb2.LoadLoraAdapterRequest, context: Ctx
    ) -> control_pb2.LoadLoraAdapterResponse:
        await self.plane.load_lora(request.lora_name, request.lora_path, request.load_inplace,
                                   _deadline(context))
        return control_pb2.LoadLoraAdapterResponse(
            message=f"Success: LoRA adapter '{request.lora_name}' added successfully.",
            lora_adapters=self.plane.snapshot().lora_adapters,
        )

    @unary_errors
    async def InitBroadcaster(
        self, request: control_pb2.InitBroadcasterRequest, context: Ctx
    ) -> control_pb2.InitBroadcasterResponse:
        # prime-rl's server passes these positionally to its worker extension.
        args = [request.host, request.port, request.rank_offset, request.inference_world_size,
                request.timeout if request.HasField("timeout") else None,
                request.quantize_in_weight_transfer, request.session_id or "default"]
        try:
            await self.plane.collective_rpc("init_broadcaster", args, {}, None, _deadline(context))
        except PermissionDenied as exc:
            raise FailedPrecondition(
                "init_broadcaster needs prime-rl's worker extension: start tokenwire with vLLM's "
                "--worker-extension-cls (prime-rl's NCCL or NIXL worker; GPUs) and "
                f"--collective-rpc-allow init_broadcaster {PRIME_RL_UPDATE}",
                reason="WORKER_EXTENSION_REQUIRED") from exc
        return control_pb2.InitBroadcasterResponse(status="ok")

    @unary_errors
    async def UnsupportedWeightSync(
        self, request: control_pb2.UnsupportedWeightSyncRequest, context: Ctx
    ) -> control_pb2.UnsupportedWeightSyncResponse:
        raise FailedPrecondition(
            "this weight-sync route is SGLang's (its NCCL weight groups), which "
            "tokenwire does not speak: push weights with vLLM's weight-transfer routes "
            "(/init_weight_transfer_engine, /start_weight_update, /update_weights {update_info}, "
            "/finish_weight_update; GPUs, --weight-transfer-config) or load a checkpoint folder "
            "(/update_weights_from_disk, /update_weights {weight_dir}; works on CPU)",
            reason="WEIGHT_SYNC_UNSUPPORTED")

    @unary_errors
    async def GetWorldSize(
        self, request: control_pb2.GetWorldSizeRequest, context: Ctx
    ) -> control_pb2.GetWorldSizeResponse:
        return control_pb2.GetWorldSizeResponse(
            world_size=self.plane.engine.world_size(_opt(request, "include_dp", True)))

    @unary_errors
    async def GetServerInfo(
        self, request: control_pb2.GetServerInfoRequest, context: Ctx
    ) -> control_pb2.GetServerInfoResponse:
        fmt = request.config_format or "text"
        if fmt not in ("text", "json"):
            raise InvalidArgument(f"config_format must be 'text' or 'json'; got {fmt!r}",
                                  param="config_format", reason="VALUE_NOT_ALLOWED")
        resp = control_pb2.GetServerInfoResponse()
        config = redact_secrets(self.plane.engine.engine_config(fmt == "json"))
        json_format.ParseDict(_json_safe(config), resp.vllm_config)
        return resp

    @unary_errors
    async def CollectiveRpc(
        self, request: control_pb2.CollectiveRpcRequest, context: Ctx
    ) -> control_pb2.CollectiveRpcResponse:
        if not request.method:
            raise InvalidArgument("method is required", param="method", reason="FIELD_REQUIRED")
        timeout = request.timeout if request.HasField("timeout") else None
        if timeout is not None and not 0 < timeout < float("inf"):
            raise InvalidArgument("timeout must be a positive number of seconds", param="timeout",
                                  reason="VALUE_OUT_OF_RANGE")
        # Allowed, and an extension's or a read-only one of vLLM's (control/workers.py).
        check_raw_call(request.method, self.plane.rpc_allowed)
        args = json_format.MessageToDict(request.args) if request.HasField("args") else []
        kwargs = json_format.MessageToDict(request.kwargs) if request.HasField("kwargs") else {}
        results = await self.plane.collective_rpc(request.method, args, kwargs, timeout,
                                                  _deadline(context))
        resp = control_pb2.CollectiveRpcResponse()
        for result in results:
            json_format.ParseDict(_json_safe(result), resp.results.add())
        return resp

    @unary_errors
    async def UnloadLoraAdapter(
        self, request: control_pb2.UnloadLoraAdapterRequest, context: Ctx
    ) -> control_pb2.UnloadLoraAdapterResponse:
        await self.plane.unload_lora(request.lora_name, _deadline(context))
        return control_pb2.UnloadLoraAdapterResponse(
            message=f"Success: LoRA adapter '{request.lora_name}' removed successfully.",
            lora_adapters=self.plane.snapshot().lora_adapters,
        )
