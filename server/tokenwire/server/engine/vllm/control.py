"""The engine adapter's control half: vLLM's own control APIs behind the
domain `EngineControl` protocol. Part of the engine adapter (with
the rest of engine/vllm/, the only package importing vLLM).

Everything here calls AsyncLLM methods or the workers' methods through
`collective_rpc`; nothing re-implements them:
pause_generation / resume_generation / is_paused, reset_prefix_cache,
collective_rpc("reload_weights"), init_weight_transfer_engine /
start_weight_update / update_weights / finish_weight_update,
update_weight_version / get_weight_version, sleep / wake_up / is_sleeping,
add_lora / remove_lora, abort.
"""

from __future__ import annotations

import itertools
from typing import Any

from tokenwire.server.core import errors


class VllmControl:
    """Mixed into VllmEngine; `_llm` is its AsyncLLM."""

    _llm: Any
    _loras: dict[str, Any]  # name -> LoRARequest
    _replaced_loras: list[Any]  # loads a reload replaced, not yet removed
    _lora_ids = itertools.count(1)
    weight_files = "*.safetensors"  # what a load may read (never pickled .bin/.pt)

    async def pause(self, mode: str, clear_cache: bool) -> None:
        await self._llm.pause_generation(mode=mode, clear_cache=clear_cache)

    async def resume(self) -> None:
        await self._llm.resume_generation()

    async def is_paused(self) -> bool:
        return bool(await self._llm.is_paused())

    async def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        return bool(await self._llm.reset_prefix_cache(
            reset_running_requests=reset_running_requests))

    async def reset_mm_cache(self) -> None:
        await self._llm.reset_mm_cache()

    async def reset_encoder_cache(self) -> None:
        await self._llm.reset_encoder_cache()

    async def weight_checksums(self) -> dict[str, str]:
        merged: dict[str, str] = {}
        for worker in await self._llm.compute_weight_checksums():
            if same := merged.keys() & worker.keys():
                raise errors.FailedPrecondition(
                    f"two workers digest the same parameters: {sorted(same)[:5]}",
                    reason="ENGINE_REQUEST_FAILED")
            merged.update(worker)
        return merged

    async def zero_weights(self) -> None:
        await self._llm.collective_rpc("reset_weights")

    async def reload_weights(self, path: str) -> None:
        try:  # (the folder was checked by the control plane)
            await self._llm.collective_rpc(
                "reload_weights", kwargs={"weights_path": path, "is_checkpoint_format": True}
            )
        except Exception as exc:
            raise _failed(exc, f"reloading weights from {path!r}", "WEIGHT_LOAD_FAILED",
                          param="path") from exc

    async def weight_version(self) -> str:
        return str(await self._llm.get_weight_version())

    async def set_weight_version(self, version: str) -> None:
        await self._llm.update_weight_version(version)

    async def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferInitRequest

        await self._transfer(self._llm.init_weight_transfer_engine(
            WeightTransferInitRequest(init_info=init_info)))

    async def start_weight_update(self) -> None:
        await self._transfer(self._llm.start_weight_update())

    async def update_weights(self, update_info: dict[str, Any]) -> None:
        from vllm.distributed.weight_transfer.base import WeightTransferUpdateRequest

        await self._transfer(self._llm.update_weights(
            WeightTransferUpdateRequest(update_info=update_info)))

    async def finish_weight_update(self) -> None:
        await self._transfer(self._llm.finish_weight_update())

    async def _transfer(self, call: Any) -> None:
        """Weight-transfer calls fail where no --weight-transfer-config was
        given (and on CPU, where its backends are GPU ones)."""
        try:
            await call
        except errors.TokenwireError:
            raise
        except Exception as exc:
            raise _failed(exc, "weight transfer", "WEIGHT_TRANSFER_FAILED",
                          hint=" (the transfer backends (nccl, ipc, ...) need GPUs and the "
                               "engine flag --weight-transfer-config)") from exc

    def _sleep_check(self) -> None:
        from vllm.platforms import current_platform

        if not current_platform.is_sleep_mode_available():
            raise errors.FailedPrecondition(
                f"sleep mode is not available on the {current_platform.device_type} platform "
                "(vLLM supports it on CUDA, ROCm and XPU GPUs)",
                reason="SLEEP_UNSUPPORTED",
            )
        if not getattr(self._llm.vllm_config.model_config, "enable_sleep_mode", False):
            raise errors.FailedPrecondition(
                "sleep mode is off: start the server with --enable-sleep-mode",
                reason="SLEEP_UNSUPPORTED",
            )

    async def sleep(self, level: int, mode: str) -> None:
        self._sleep_check()
        await self._llm.sleep(level, mode)

    async def wake_up(self, tags: list[str] | None) -> bool:
        self._sleep_check()
        return bool(await self._llm.wake_up(tags or None))

    async def is_sleeping(self) -> bool:
        return bool(await self._llm.is_sleeping())

    async def abort_requests(self, request_ids: list[str] | None) -> int:
        if request_ids:
            await self._llm.abort(list(request_ids))
            return len(request_ids)
        # Every request the output processor tracks (internal ids), as
        # vLLM's own /abort_requests does.
        op = self._llm.output_processor
        internal = [*op.request_states.keys(), *op.parent_requests.keys()]
        if internal:
            await self._llm.abort(internal, internal=True)
        return len(internal)

    async def add_lora(self, name: str, path: str, load_inplace: bool) -> None:
        from vllm.lora.request import LoRARequest

        if not getattr(self._llm.vllm_config, "lora_config", None):
            raise errors.FailedPrecondition(
                "LoRA is off: start the server with --enable-lora", param="lora_name",
                reason="LORA_DISABLED",
            )
        old = self._loras.get(name)  # (request checks: control.checks.check_lora_name)
        request = LoRARequest(lora_name=name, lora_int_id=next(self._lora_ids), lora_path=path)
        try:
            await self._llm.add_lora(request)
        except Exception as exc:
            raise errors.InvalidArgument(
                f"lora_path: loading the adapter failed: {type(exc).__name__}: {exc}",
                param="lora_path", reason="LORA_LOAD_FAILED",
            ) from exc
        self._loras[name] = request
        if old is not None:  # removed by drop_replaced_loras, once no process names it
            self._replaced_loras.append(old)

    async def drop_replaced_loras(self) -> None:
        while self._replaced_loras:
            await self._llm.remove_lora(self._replaced_loras.pop().lora_int_id)

    async def remove_lora(self, name: str) -> None:
        request = self._loras.pop(name)  # known: checked by the control plane
        await self._llm.remove_lora(request.lora_int_id)

    def lora_names(self) -> list[str]:
        return sorted(self._loras)

    def lora_table(self) -> dict[str, tuple[str, int]]:
        return {name: (r.lora_path, r.lora_int_id) for name, r in self._loras.items()}

    def adopt_loras(self, table: dict[str, tuple[str, int]]) -> None:
        from vllm.lora.request import LoRARequest

        # The engine core holds these loads already (another serving
        # process added them): only this process's names change.
        self._loras = {name: LoRARequest(lora_name=name, lora_int_id=int(number), lora_path=path)
                       for name, (path, number) in table.items()}

    def lora_label(self, name: str) -> str:
        request = self._loras.get(name)  # lora_int_id: a new number at every load
        return f"{name}@{request.lora_int_id if request is not None else 0}"

    def lora_request(self, name: str | None) -> Any:
        return self._loras.get(name) if name else None

    def world_size(self, include_dp: bool) -> int:
        parallel = self._llm.vllm_config.parallel_config
        return int(parallel.world_size_across_dp if include_dp else parallel.world_size)

    def engine_config(self, as_json: bool) -> Any:
        config = self._llm.vllm_config
        if not as_json:
            return str(config)
        import pydantic
        from vllm.config import VllmConfig

        # As vLLM's /server_info: fallback=str for what JSON cannot hold (dtypes).
        return pydantic.TypeAdapter(VllmConfig).dump_python(config, mode="json", fallback=str)

    async def collective_rpc(self, method: str, args: list[Any], kwargs: dict[str, Any],
                             rpc_timeout: float | None) -> list[Any]:
        try:
            results = await self._llm.collective_rpc(method=method, timeout=rpc_timeout,
                                                     args=tuple(args), kwargs=kwargs)
        except Exception as exc:
            raise _failed(exc, f"collective_rpc {method!r}", "COLLECTIVE_RPC_FAILED",
                          param="method") from exc
        # As vLLM's route: None, objects and lists as they are, anything else as text.
        return [r if r is None or isinstance(r, dict | list) else str(r) for r in results or []]


def _failed(exc: Exception, what: str, reason: str, *, param: str | None = None,
            hint: str = "") -> errors.TokenwireError:
    """The error of a control call that raised `exc`: FAILED_PRECONDITION
    "<what> failed: ...", or when the engine core died UNAVAILABLE, as for a
    generation call (engine.vllm.convert.map_engine_error), not a failed load."""
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(exc, EngineDeadError):
        return errors.engine_dead(f"the engine died: {exc}")
    return errors.FailedPrecondition(f"{what} failed: {type(exc).__name__}: {exc}{hint}",
                                     param=param, reason=reason)
