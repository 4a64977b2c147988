"""The fake engine's control half: pause modes, weight versions and spans,
reloads, cache reset, LoRA names — behaving like vLLM's, for fast tests of
the control plane and of everything that reports versions.

Mixed into FakeEngine. It polls instead of using asyncio.Event so one fake
engine can serve servers on different event loops.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from tokenwire.server.core import errors
from tokenwire.server.core.domain import WeightSpan

POLL = 0.002  # seconds between checks while held


class FakeControl:
    running: set[str]
    _cache: set[Any]

    def _init_control(self) -> None:
        self.version = "default"
        self.weights_generation = 0  # reloads so far: shifts the fake's replies
        self.loaded_paths: list[str] = []
        self.fail_reloads = 0  # tests: the next N reloads fail (a replica with a bad disk)
        self.loras: dict[str, str] = {}
        self.lora_loads: dict[str, int] = {}  # name -> its load's number (lora_label)
        self._lora_count = 0
        self.resets = 0
        self.cache_resets: list[str] = []  # "mm", "encoder": the resets asked for
        self.zeroed = False  # zero_weights ran, no reload since
        # Tests: "" checks no weight files (the fake reads none); "*.safetensors" as vLLM.
        self.weight_files = ""
        # Tests: control calls ("pause", "reload", "transfer", "rpc") that wait, once
        # their effect has begun, while named here (a slow engine).
        self.hold: set[str] = set()
        # Tests: a transfer backend that works (vLLM's needs GPUs); its calls so far.
        self.transfer_backend = False
        self.transfers: list[str] = []
        self._updating = False
        self._hold_new = False  # new requests wait (any pause)
        self._hold_running = False  # running requests freeze ("keep")
        self._abort: set[str] = set()  # running ids to end with "abort"
        self._started: set[str] = set()  # ids past the admission gate
        self.rpcs: list[tuple[str, list[Any], dict[str, Any]]] = []  # collective_rpc calls
        self.hf_token: str | None = None  # tests: as vLLM's model_config.hf_token (a secret)
        self.sleep_mode = False  # tests: sleep/wake_up work (vLLM's need GPUs)
        self._asleep = False
        self.fail_rpcs: set[str] = set()  # tests: worker methods that fail (a broken extension)

    # -- hooks for generate() ---------------------------------------------
    async def _admit_gate(self, request_id: str) -> None:
        while self._hold_new:  # noqa: ASYNC110 - polls: one fake serves several loops
            await asyncio.sleep(POLL)
        self._started.add(request_id)

    async def _step_gate(self, request_id: str) -> bool:
        """Wait while frozen; True when the request must end with "abort"."""
        while self._hold_running and request_id not in self._abort:  # noqa: ASYNC110 - polls: one fake serves several loops
            await asyncio.sleep(POLL)
        return request_id in self._abort

    def _done(self, request_id: str) -> None:
        self._started.discard(request_id)
        self._abort.discard(request_id)

    def _track(self, spans: list[list[Any]], index: int) -> None:
        """Token `index` of a choice was sampled by the current version."""
        if not spans or spans[-1][0] != self.version:
            spans.append([self.version, index, index + 1])
        else:
            spans[-1][2] = index + 1

    @staticmethod
    def _spans(spans: list[list[Any]]) -> list[WeightSpan]:
        return [WeightSpan(v, s, e) for v, s, e in spans]

    # -- EngineControl ----------------------------------------------------
    async def _engine_side(self, name: str, work: Any) -> Any:
        """Run `work` as the engine would: to its end even when the caller
        stops waiting (vLLM's engine core goes on with a call whose awaiting
        coroutine was cancelled); waits while `name` is held."""
        async def run() -> Any:
            while name in self.hold:  # noqa: ASYNC110 - polls: one fake serves several loops
                await asyncio.sleep(POLL)
            return await work

        return await asyncio.shield(asyncio.ensure_future(run()))

    async def pause(self, mode: str, clear_cache: bool) -> None:
        self._hold_new = True
        if mode == "abort":
            self._abort |= set(self._started)
        elif mode == "keep":
            self._hold_running = True
        await self._engine_side("pause", self._drain(mode, clear_cache))

    async def _drain(self, mode: str, clear_cache: bool) -> None:
        # "abort" and "wait" return once the running requests are gone.
        if mode in ("abort", "wait"):
            while self._started:  # noqa: ASYNC110 - polls: one fake serves several loops
                await asyncio.sleep(POLL)
            if clear_cache:
                self._cache.clear()

    async def resume(self) -> None:
        self._hold_new = False
        self._hold_running = False

    async def is_paused(self) -> bool:
        return self._hold_new

    async def reset_prefix_cache(self, reset_running_requests: bool) -> bool:
        self._cache.clear()
        self.resets += 1
        return True

    async def reset_mm_cache(self) -> None:
        self.cache_resets.append("mm")

    async def reset_encoder_cache(self) -> None:
        self.cache_resets.append("encoder")

    async def weight_checksums(self) -> dict[str, str]:
        """Two fake parameters, digesting what the weights are now."""
        import hashlib

        state = "zeros" if self.zeroed else f"{self.weights_generation}:{self.loaded_paths[-1:]}"
        return {f"dp0:pp0:pcp0:tp0:{name}": hashlib.sha256(f"{name}={state}".encode())
                .hexdigest() for name in ("embed.weight", "head.weight")}

    async def zero_weights(self) -> None:
        self.zeroed = True

    async def reload_weights(self, path: str) -> None:
        await self._engine_side("reload", self._reload(path))

    async def _reload(self, path: str) -> None:
        if self.fail_reloads > 0:
            self.fail_reloads -= 1
            raise errors.FailedPrecondition(
                f"reloading weights from {path!r} failed: read error", param="path",
                reason="WEIGHT_LOAD_FAILED",
            )
        if _broken(path):  # lets tests make a load fail (the folder was checked already)
            raise errors.FailedPrecondition(
                f"reloading weights from {path!r} failed: broken checkpoint", param="path",
                reason="WEIGHT_LOAD_FAILED",
            )
        self.weights_generation += 1
        self.loaded_paths.append(path)
        self.zeroed = False

    async def weight_version(self) -> str:
        return self.version

    async def set_weight_version(self, version: str) -> None:
        self.version = version

    def _transfer_call(self, call: str, ok: bool = True, why: str = "") -> None:
        """A transfer call as vLLM's worker checks it (its backends need GPUs)."""
        if not self.transfer_backend:
            raise errors.FailedPrecondition(
                "weight transfer failed: the fake engine has no transfer backend (GPU only)",
                reason="WEIGHT_TRANSFER_FAILED",
            )
        if not ok:
            raise errors.FailedPrecondition(f"weight transfer failed: {why}",
                                            reason="WEIGHT_TRANSFER_FAILED")
        self.transfers.append(call)

    async def init_weight_transfer(self, init_info: dict[str, Any]) -> None:
        self._transfer_call("init")

    async def start_weight_update(self) -> None:
        self._transfer_call("start", not self._updating, "a weight update is already in progress")
        self._updating = True

    async def update_weights(self, update_info: dict[str, Any]) -> None:
        async def update() -> None:
            self._transfer_call("update", self._updating and not update_info.get("fail"),
                                "the trainer's tensors did not arrive")
            self.weights_generation += 1  # part of the new weights is in
            self.zeroed = False

        await self._engine_side("transfer", update())

    async def finish_weight_update(self) -> None:
        self._transfer_call("finish", self._updating, "no weight update was started")
        self._updating = False

    def _sleep_check(self) -> None:
        if not self.sleep_mode:
            raise errors.FailedPrecondition(
                "sleep mode is not available on the fake platform", reason="SLEEP_UNSUPPORTED"
            )

    async def sleep(self, level: int, mode: str) -> None:
        """As vLLM's: pause (in `mode`), then level 1 offloads the weights,
        level 2 discards them (garbage after wake-up until a load)."""
        self._sleep_check()
        await self.pause(mode, clear_cache=level >= 1)
        self._asleep = True
        if level >= 2:
            self.weights_generation += 1  # other (garbage) weights

    async def wake_up(self, tags: list[str] | None) -> bool:
        self._sleep_check()  # as vLLM's: fully awake resumes scheduling
        self._asleep = False
        await self.resume()
        return True

    async def is_sleeping(self) -> bool:
        return self._asleep

    async def abort_requests(self, request_ids: list[str] | None) -> int:
        ids = set(request_ids) if request_ids else set(self.running)
        self._abort |= ids & self.running
        return len(ids)

    async def add_lora(self, name: str, path: str, load_inplace: bool) -> None:
        self.loras[name] = path  # (request checks: control.checks.check_lora_name)
        self._lora_count += 1  # as vLLM's lora_int_id: every load a new number
        self.lora_loads[name] = self._lora_count

    async def drop_replaced_loras(self) -> None:
        return None  # (a fake load holds nothing)

    async def remove_lora(self, name: str) -> None:
        del self.loras[name]  # known: checked by the control plane

    def lora_names(self) -> list[str]:
        return sorted(self.loras)

    def lora_table(self) -> dict[str, tuple[str, int]]:
        return {name: (path, self.lora_loads.get(name, 0)) for name, path in self.loras.items()}

    def adopt_loras(self, table: dict[str, tuple[str, int]]) -> None:
        self.loras = {name: path for name, (path, _) in table.items()}
        self.lora_loads = {name: int(number) for name, (_, number) in table.items()}

    def lora_label(self, name: str) -> str:
        return f"{name}@{self.lora_loads.get(name, 0)}"

    def world_size(self, include_dp: bool) -> int:
        return 1

    def engine_config(self, as_json: bool) -> Any:
        tree = {"model_config": {"hf_token": self.hf_token, "max_num_batched_tokens": 8192},
                "parallel_config": {"tensor_parallel_size": 1, "data_parallel_size": 1},
                "weight_transfer_config": {"backend": "fake"} if self.transfer_backend else None}
        # The text form, as vLLM's str(VllmConfig), names no secret.
        return tree if as_json else f"FakeEngine({tree['parallel_config']})"

    async def collective_rpc(self, method: str, args: list[Any], kwargs: dict[str, Any],
                             rpc_timeout: float | None) -> list[Any]:
        self.rpcs.append((method, list(args), dict(kwargs)))

        async def call() -> list[Any]:  # waits while "rpc" is held (a worker method that hangs)
            if method in self.fail_rpcs:
                raise errors.FailedPrecondition(
                    f"collective_rpc {method!r} failed: RuntimeError: the worker failed",
                    param="method", reason="COLLECTIVE_RPC_FAILED")
            return [{"method": method, "args": list(args), "kwargs": dict(kwargs)}]  # one worker

        return await self._engine_side("rpc", call())


def _broken(path: str) -> bool:
    return os.path.exists(os.path.join(path, "BROKEN"))
