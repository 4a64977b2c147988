"""The ControlService from the client: `client.control` (sync) and
`async_client.control` (async), with the same methods and signatures, and
`client.paused(mode)` which always resumes.

Control calls send the admin key (``admin_api_key=``, default
$TOKENWIRE_ADMIN_API_KEY) instead of the inference key, and are never
retried (pausing twice is harmless, but a retried update is not a no-op).
Requests are built once in `_Requests`; the two classes only do the I/O.
"""
# The async methods take a gRPC deadline (`timeout`), like the sync ones.
# ruff: noqa: ASYNC109

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import grpc
from google.protobuf import json_format, struct_pb2

from tokenwire.client.errors import from_rpc_error
from tokenwire.v1 import control_pb2, control_pb2_grpc

Metadata = tuple[tuple[str, str], ...]


def _struct(info: Mapping[str, Any] | None) -> struct_pb2.Struct:
    msg = struct_pb2.Struct()
    json_format.ParseDict(dict(info or {}), msg)
    return msg


class _Requests:
    """Request messages for each control method (no I/O)."""

    @staticmethod
    def pause(mode: str, clear_cache: bool) -> control_pb2.PauseRequest:
        return control_pb2.PauseRequest(mode=mode, clear_cache=clear_cache)

    @staticmethod
    def resume(force: bool) -> control_pb2.ResumeRequest:
        return control_pb2.ResumeRequest(force=True) if force else control_pb2.ResumeRequest()

    @staticmethod
    def update_from_path(path: str, version: str, pause_mode: str,
                         clear_cache: bool) -> control_pb2.UpdateWeightsFromPathRequest:
        return control_pb2.UpdateWeightsFromPathRequest(
            path=path, weight_version=version, pause_mode=pause_mode, clear_cache=clear_cache)


class ControlClient:
    """Blocking ControlService calls on the client's channel."""

    def __init__(self, channel: grpc.Channel, metadata: Metadata, timeout: float | None):
        self.stub = control_pb2_grpc.ControlServiceStub(channel)
        self._md = metadata
        self.timeout = timeout

    def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        try:
            return method(request, timeout=self.timeout if timeout is None else timeout,
                          metadata=self._md)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    def pause(self, mode: str = "abort", *, clear_cache: bool = True,
              timeout: float | None = None) -> control_pb2.ControlState:
        """Pause generation: "abort", "wait" or "keep" in-flight requests."""
        return self._call(self.stub.Pause, _Requests.pause(mode, clear_cache), timeout).state

    def resume(self, *, force: bool = False,
               timeout: float | None = None) -> control_pb2.ControlState:
        """Resume generation. After a failed weight load the server refuses
        (FAILED_PRECONDITION, WEIGHTS_FAILED_LOAD) unless `force`: the
        weights may be mixed (their tokens carry the "+failed-load" version)."""
        return self._call(self.stub.Resume, _Requests.resume(force), timeout).state

    def state(self, *, timeout: float | None = None) -> control_pb2.ControlState:
        return self._call(self.stub.GetControlState, control_pb2.GetControlStateRequest(),
                          timeout).state

    def update_weights_from_path(
        self, path: str, version: str = "", *, pause_mode: str = "keep", clear_cache: bool = True,
        timeout: float | None = None,
    ) -> control_pb2.UpdateWeightsFromPathResponse:
        """Reload weights in place from a checkpoint folder on the server."""
        return self._call(self.stub.UpdateWeightsFromPath,
                          _Requests.update_from_path(path, version, pause_mode, clear_cache), timeout)

    def set_weight_version(self, version: str, *, timeout: float | None = None) -> None:
        self._call(self.stub.SetWeightVersion,
                   control_pb2.SetWeightVersionRequest(new_version=version), timeout)

    def reset_prefix_cache(self, *, reset_running_requests: bool = True,
                           timeout: float | None = None) -> bool:
        req = control_pb2.ResetPrefixCacheRequest(reset_running_requests=reset_running_requests)
        return bool(self._call(self.stub.ResetPrefixCache, req, timeout).success)

    def abort_requests(self, request_ids: Sequence[str] = (), *, timeout: float | None = None) -> int:
        """Abort these requests (none given: every request in flight)."""
        req = control_pb2.AbortRequestsRequest(request_ids=list(request_ids))
        return int(self._call(self.stub.AbortRequests, req, timeout).aborted)

    def load_lora_adapter(self, name: str, path: str, *, load_inplace: bool = False,
                          timeout: float | None = None) -> list[str]:
        req = control_pb2.LoadLoraAdapterRequest(lora_name=name, lora_path=path, load_inplace=load_inplace)
        return list(self._call(self.stub.LoadLoraAdapter, req, timeout).lora_adapters)

    def unload_lora_adapter(self, name: str, *, timeout: float | None = None) -> list[str]:
        req = control_pb2.UnloadLoraAdapterRequest(lora_name=name)
        return list(self._call(self.stub.UnloadLoraAdapter, req, timeout).lora_adapters)

    def sleep(self, level: int = 1, *, timeout: float | None = None) -> None:
        self._call(self.stub.Sleep, control_pb2.SleepRequest(level=level), timeout)

    def wake_up(self, tags: Sequence[str] = (), *, timeout: float | None = None) -> bool:
        resp = self._call(self.stub.WakeUp, control_pb2.WakeUpRequest(tags=list(tags)), timeout)
        return resp.status == "awake"

    def init_weight_transfer(self, init_info: Mapping[str, Any], *, timeout: float | None = None) -> None:
        req = control_pb2.InitWeightTransferRequest(init_info=_struct(init_info))
        self._call(self.stub.InitWeightTransfer, req, timeout)

    def start_weight_update(self, *, timeout: float | None = None) -> None:
        self._call(self.stub.StartWeightUpdate, control_pb2.StartWeightUpdateRequest(), timeout)

    def update_weights(self, update_info: Mapping[str, Any], *, timeout: float | None = None) -> None:
        req = control_pb2.UpdateWeightsRequest(update_info=_struct(update_info))
        self._call(self.stub.UpdateWeights, req, timeout)

    def finish_weight_update(self, version: str = "", *, timeout: float | None = None) -> None:
        req = control_pb2.FinishWeightUpdateRequest(weight_version=version)
        self._call(self.stub.FinishWeightUpdate, req, timeout)

    @contextlib.contextmanager
    def paused(self, mode: str = "keep", *, clear_cache: bool = True,
               timeout: float | None = None) -> Iterator[control_pb2.ControlState]:
        """Pause for the block and always resume after it, errors included."""
        state = self.pause(mode, clear_cache=clear_cache, timeout=timeout)
        try:
            yield state
        finally:
            self.resume(timeout=timeout)


class AsyncControlClient:
    """The same calls on an asyncio channel."""

    def __init__(self, channel: grpc.aio.Channel, metadata: Metadata, timeout: float | None):
        self.stub = control_pb2_grpc.ControlServiceStub(channel)
        self._md = metadata
        self.timeout = timeout

    async def _call(self, method: Any, request: Any, timeout: float | None) -> Any:
        try:
            return await method(request, timeout=self.timeout if timeout is None else timeout,
                                metadata=self._md)
        except grpc.RpcError as exc:
            raise from_rpc_error(exc) from None

    async def pause(self, mode: str = "abort", *, clear_cache: bool = True,
                    timeout: float | None = None) -> control_pb2.ControlState:
        """Pause generation: "abort", "wait" or "keep" in-flight requests."""
        return (await self._call(self.stub.Pause, _Requests.pause(mode, clear_cache), timeout)).state

    async def resume(self, *, force: bool = False,
                     timeout: float | None = None) -> control_pb2.ControlState:
        """Resume generation (`force`: even after a failed weight load)."""
        return (await self._call(self.stub.Resume, _Requests.resume(force), timeout)).state

    async def state(self, *, timeout: float | None = None) -> control_pb2.ControlState:
        return (await self._call(self.stub.GetControlState, control_pb2.GetControlStateRequest(),
                                 timeout)).state

    async def update_weights_from_path(
        self, path: str, version: str = "", *, pause_mode: str = "keep", clear_cache: bool = True,
        timeout: float | None = None,
    ) -> control_pb2.UpdateWeightsFromPathResponse:
        """Reload weights in place from a checkpoint folder on the server."""
        return await self._call(self.stub.UpdateWeightsFromPath,
                                _Requests.update_from_path(path, version, pause_mode, clear_cache),
                                timeout)

    async def set_weight_version(self, version: str, *, timeout: float | None = None) -> None:
        await self._call(self.stub.SetWeightVersion,
                         control_pb2.SetWeightVersionRequest(new_version=version), timeout)

    async def reset_prefix_cache(self, *, reset_running_requests: bool = True,
                                 timeout: float | None = None) -> bool:
        req = control_pb2.ResetPrefixCacheRequest(reset_running_requests=reset_running_requests)
        return bool((await self._call(self.stub.ResetPrefixCache, req, timeout)).success)

    async def abort_requests(self, request_ids: Sequence[str] = (), *,
                             timeout: float | None = None) -> int:
        """Abort these requests (none given: every request in flight)."""
        req = control_pb2.AbortRequestsRequest(request_ids=list(request_ids))
        return int((await self._call(self.stub.AbortRequests, req, timeout)).aborted)

    async def load_lora_adapter(self, name: str, path: str, *, load_inplace: bool = False,
                                timeout: float | None = None) -> list[str]:
        req = control_pb2.LoadLoraAdapterRequest(lora_name=name, lora_path=path, load_inplace=load_inplace)
        return list((await self._call(self.stub.LoadLoraAdapter, req, timeout)).lora_adapters)

    async def unload_lora_adapter(self, name: str, *, timeout: float | None = None) -> list[str]:
        req = control_pb2.UnloadLoraAdapterRequest(lora_name=name)
        return list((await self._call(self.stub.UnloadLoraAdapter, req, timeout)).lora_adapters)

    async def sleep(self, level: int = 1, *, timeout: float | None = None) -> None:
        await self._call(self.stub.Sleep, control_pb2.SleepRequest(level=level), timeout)

    async def wake_up(self, tags: Sequence[str] = (), *, timeout: float | None = None) -> bool:
        resp = await self._call(self.stub.WakeUp, control_pb2.WakeUpRequest(tags=list(tags)), timeout)
        return resp.status == "awake"

    async def init_weight_transfer(self, init_info: Mapping[str, Any], *,
                                   timeout: float | None = None) -> None:
        req = control_pb2.InitWeightTransferRequest(init_info=_struct(init_info))
        await self._call(self.stub.InitWeightTransfer, req, timeout)

    async def start_weight_update(self, *, timeout: float | None = None) -> None:
        await self._call(self.stub.StartWeightUpdate, control_pb2.StartWeightUpdateRequest(), timeout)

    async def update_weights(self, update_info: Mapping[str, Any], *,
                             timeout: float | None = None) -> None:
        req = control_pb2.UpdateWeightsRequest(update_info=_struct(update_info))
        await self._call(self.stub.UpdateWeights, req, timeout)

    async def finish_weight_update(self, version: str = "", *, timeout: float | None = None) -> None:
        req = control_pb2.FinishWeightUpdateRequest(weight_version=version)
        await self._call(self.stub.FinishWeightUpdate, req, timeout)

    @contextlib.asynccontextmanager
    async def paused(self, mode: str = "keep", *, clear_cache: bool = True,
                     timeout: float | None = None) -> AsyncIterator[control_pb2.ControlState]:
        """Pause for the block and always resume after it, errors included."""
        state = await self.pause(mode, clear_cache=clear_cache, timeout=timeout)
        try:
            yield state
        finally:
            await self.resume(timeout=timeout)
