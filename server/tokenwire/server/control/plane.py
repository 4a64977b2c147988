"""The control plane: pause/resume, weight updates, versions, cache reset,
sleep/wake, runtime LoRA — over the engine's own control APIs
(domain.EngineControl), one operation at a time.

Rules it keeps (docs/control.md says why):
- Operations are serialised by one lock; each runs under a deadline (the
  caller's, else settings.control_timeout_seconds) and ends
  DEADLINE_EXCEEDED rather than hanging. A deadline stops the waiting, not
  the engine: engine calls are shielded, the lock stays taken until the
  engine work ends, and then the recorded state is read back from the
  engine (paused flag, version).
- Folders to load are checked before anything pauses: they lie under
  --weights-root (real paths: no way out through ".." or a symlink; checked
  first, so a folder outside answers the same whether it exists or not),
  exist, hold no file linked out of the root, hold safetensors files (the
  engine never unpickles .bin/.pt) naming every tensor of the served model
  (checkpoint.py: vLLM keeps the old values of what a checkpoint lacks).
- A weight update pauses first (default mode "keep": in-flight requests
  continue on the new weights, their tokens split into version spans),
  drops speculative prefills, loads, sets the version, resets the prefix
  cache (running requests recompute their KV), and resumes unless the
  caller had paused. prime-rl's /update_weights {weight_dir} through its
  worker method (--collective-rpc-allow update_weights_from_path) is the
  same operation with that method as the loader.
- A load that fails (or whose end the caller did not see) may have left
  mixed weights: the version becomes "<old>+failed-load" in the engine, so
  every token sampled from them says so; generation stays paused, Resume is
  refused until a load succeeds or the caller forces it, and the error stays.
- A weight transfer (StartWeightUpdate .. FinishWeightUpdate) pauses in
  "keep" mode at Start unless already paused; Finish sets the version,
  resets the prefix cache and resumes if Start paused. A step that failed
  since Start leaves the failed-load label: Finish ends the engine's
  transfer but keeps it and the pause (FAILED_PRECONDITION
  WEIGHT_TRANSFER_INCOMPLETE).
- Sleep(level=2) discards the weights: labelled as a failed load; WakeUp
  pauses again (vLLM resumes on a full wake) while the label or a recorded
  pause stands.
- An allowed collective_rpc runs under the control timeout, so a worker
  method that hangs releases the lock (COLLECTIVE_RPC_TIMEOUT).
- Every weight change adds one to the update generation (ServingState).
- ControlPlane holds the parts it is made of and delegates to them: one
  OperationRunner (runner.py: the lock, deadlines, shielded engine work,
  the recorded paused flag and version), the WeightUpdates (weights.py:
  the operations that change the weights) and what they record
  (records.WeightRecord), the allowed worker methods (workers.py). The
  other operations are here.
- The version and the paused flag are mirrored on ServingState, where the
  data plane (system_fingerprint) and GetStats read them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from tokenwire.server.control.checks import (
    LORA_WEIGHTS,
    check_folder,
    check_lora_known,
    check_lora_name,
    check_mode,
    check_version,
)
from tokenwire.server.control.records import ControlSnapshot, UpdateResult, WeightRecord
from tokenwire.server.control.runner import OperationRunner
from tokenwire.server.control.weights import WeightUpdates
from tokenwire.server.control.workers import WorkerMethods
from tokenwire.server.core.engine_control import EngineControl
from tokenwire.server.core.errors import FailedPrecondition, InvalidArgument
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.weight_bounds import WeightBounds

log = logging.getLogger("tokenwire.control")


class ControlPlane:
    """The control operations, over one OperationRunner (`runner`), the
    weight updates (`weights`) and their record (`record`)."""

    def __init__(
        self, engine: EngineControl, state: ServingState, *, timeout: float,
        engine_requests: Callable[[], int],
        on_paused: Callable[[bool], Awaitable[None]] | None = None,
        weights_root: str = "", collective_rpc_allow: tuple[str, ...] = (),
        served_names: tuple[str, ...] = (),
    ):
        self._engine = engine
        self._state = state
        self._timeout = timeout
        self._weights_root = weights_root  # "": any folder (docs/control.md)
        self.record = WeightRecord()
        self.runner = OperationRunner(engine, state, timeout=timeout, on_error=self.record.error,
                                      on_paused=on_paused)
        self._workers = WorkerMethods(engine, collective_rpc_allow, timeout=timeout)
        self.weights = WeightUpdates(self.runner, engine, state, self.record, self._workers,
                                     weights_root=weights_root)
        self._engine_requests = engine_requests
        self.sleeping = False
        self._served_names = frozenset(served_names)  # a LoRA adapter may not take one
        self._loras_loaded: set[str] = set()  # names loaded since start (once is enough)
        # Given the adapters served after a load or unload, before the engine
        # drops a load no longer named (process 0 of several serving
        # processes: control/relay.py publish_loras).
        self.publish_loras: Callable[[dict[str, tuple[str, int]]], Awaitable[None]] | None = None

    async def start(self, initial_version: str) -> None:
        """At start-up: set the initial version (or read the engine's)."""
        if initial_version:
            await self._engine.set_weight_version(check_version(initial_version, "weight_version"))
        self._state.weight_version = await self._engine.weight_version()
        self.weights.start()
        if not self._weights_root:
            log.warning("control: no --weights-root: weight and LoRA loads may read any folder "
                        "this process can read")

    # -- operations -------------------------------------------------------
    async def pause(self, mode: str, clear_cache: bool, deadline: float | None) -> None:
        mode = check_mode(mode, "mode", "abort")
        await self.runner.run(f"pause ({mode})",
                              lambda: self.runner.pause_engine(mode, clear_cache), deadline)

    async def resume(self, deadline: float | None, *, force: bool = False) -> None:
        async def op() -> None:
            if not force:
                if self.load_failed:
                    raise FailedPrecondition(
                        f"the last weight load failed ({self.failed_load}): the weights may be "
                        f"mixed (version {self._state.weight_version!r}); load weights that "
                        "work, or Resume with force to serve them anyway",
                        reason="WEIGHTS_FAILED_LOAD",
                    )
                self.weights.check_no_transfer()
            await self.weights.abandon_transfer()  # forced during a transfer: abandoned part-way
            await self.runner.resume_engine()
            if force:  # the failed load's error is cleared; the label stays until a load succeeds
                self.record.clear_failed_load_error()

        await self.runner.run("resume", op, deadline)

    async def set_version(self, version: str, deadline: float | None) -> None:
        if not version:
            raise InvalidArgument("new_version is required", param="new_version",
                                  reason="FIELD_REQUIRED")
        check_version(version, "new_version")

        async def op() -> None:
            if self.load_failed:
                raise FailedPrecondition(
                    f"the last weight load failed ({self.failed_load}): the weights may be mixed, "
                    f"and only a load that succeeds replaces their version "
                    f"{self._state.weight_version!r}", param="new_version",
                    reason="WEIGHTS_FAILED_LOAD",
                )
            if version != self._state.weight_version:
                self._state.generation += 1
            await self.runner.set_engine_version(version)

        await self.runner.run("set weight version", op, deadline)

    async def reset_prefix_cache(self, reset_running: bool, deadline: float | None) -> bool:
        return await self.runner.run(
            "reset prefix cache",
            lambda: self.runner.call("reset prefix cache",
                                     self._engine.reset_prefix_cache(reset_running)),
            deadline,
        )

    async def reset_cache(self, which: str, deadline: float | None) -> None:
        """Drop vLLM's multimodal processor cache ("mm") or encoder cache ("encoder")."""
        reset = self._engine.reset_mm_cache if which == "mm" else self._engine.reset_encoder_cache
        await self.runner.run(f"reset {which} cache",
                              lambda: self.runner.call(f"reset {which} cache", reset()), deadline)

    # The weight updates (weights.py).
    async def update_from_path(
        self, path: str, version: str, *, pause_mode: str, clear_cache: bool,
        deadline: float | None, path_param: str = "path", worker_method: str = "",
        expected_fingerprint: str = "",
    ) -> UpdateResult:
        """Load the checkpoint folder `path` (WeightUpdates.update_from_path)."""
        return await self.weights.update_from_path(
            path, version, pause_mode=pause_mode, clear_cache=clear_cache, deadline=deadline,
            path_param=path_param, worker_method=worker_method,
            expected_fingerprint=expected_fingerprint)

    async def start_update(self, deadline: float | None) -> None:
        await self.weights.start_update(deadline)

    async def update_weights(self, info: dict[str, Any], deadline: float | None) -> None:
        await self.weights.update_weights(info, deadline)

    async def finish_update(self, version: str, deadline: float | None) -> None:
        await self.weights.finish_update(version, deadline)

    # Weight transfer (trainer -> engine over NCCL/IPC/...).
    async def init_transfer(self, info: dict[str, Any], deadline: float | None) -> None:
        await self.runner.run(
            "init weight transfer",
            lambda: self.runner.call("init weight transfer",
                                     self._engine.init_weight_transfer(info)),
            deadline,
        )

    async def sleep(self, level: int, mode: str, deadline: float | None) -> None:
        if level not in (0, 1, 2):
            raise InvalidArgument(f"level must be 0, 1 or 2; got {level}", param="level",
                                  reason="VALUE_OUT_OF_RANGE")
        mode = check_mode(mode, "mode", "abort")

        async def op() -> None:
            await self.runner.call("sleep", self._engine.sleep(level, mode))
            self.sleeping = True
            if level == 2:  # the weights are discarded: after WakeUp, garbage until a load
                await self.weights.mark_failed_load(
                    "Sleep(level=2) discarded the weights: load weights (after WakeUp) before "
                    "serving")

        await self.runner.run("sleep", op, deadline)

    async def wake_up(self, tags: list[str], deadline: float | None) -> bool:
        async def op() -> bool:
            awake = await self.runner.call("wake up", self._engine.wake_up(tags or None))
            self.sleeping = not awake
            if awake and (self.load_failed or self._state.paused):
                # vLLM resumes scheduling once fully awake: keep the recorded pause,
                # and sample nothing from weights Sleep(level=2) or a failed load left.
                await self.runner.pause_engine("keep", clear_cache=False)
            return awake

        return await self.runner.run("wake up", op, deadline)

    async def abort(self, request_ids: list[str], deadline: float | None) -> int:
        # Not under the lock: aborting must work while an update waits.
        # Callers' ids are labels: each aborts every request in flight that
        # carries it, by its engine id (core/request_ids.py).
        budget = self._timeout if deadline is None else min(deadline, self._timeout)
        async with asyncio.timeout(budget):
            if not request_ids:
                return await self._engine.abort_requests(None)
            await self._engine.abort_requests(self._state.engine_ids.resolve(request_ids))
            return len(request_ids)  # as vLLM answers: the ids asked

    async def load_lora(self, name: str, path: str, inplace: bool, deadline: float | None) -> None:
        if not name:
            raise InvalidArgument("lora_name is required", param="lora_name",
                                  reason="FIELD_REQUIRED")
        if name in self._served_names:
            raise InvalidArgument(
                f"lora_name: {name!r} is the served model's name: a request naming it gets the "
                "base model, never the adapter", param="lora_name", reason="LORA_NAME_IS_MODEL")
        real = check_folder(path, "lora_path", root=self._weights_root,
                            files=LORA_WEIGHTS if self._engine.weight_files else "")

        async def op() -> None:  # checked under the lock: the loaded set cannot change meanwhile
            check_lora_name(name, inplace, self._engine.lora_names())
            await self.runner.call("load LoRA adapter", self._engine.add_lora(name, real, inplace))
            try:  # every process names the new load before the one it replaced goes
                await self._publish_loras(self._engine.lora_table())
            finally:
                await self.runner.call("load LoRA adapter", self._engine.drop_replaced_loras())
            if name in self._loras_loaded:  # vLLM's cache keys name + folder, not the load
                await self.runner.call("reset prefix cache",
                                       self._engine.reset_prefix_cache(True))
            self._loras_loaded.add(name)

        await self.runner.run("load LoRA adapter", op, deadline)

    async def unload_lora(self, name: str, deadline: float | None) -> None:
        async def op() -> None:
            check_lora_known(name, self._engine.lora_names())
            remaining = self._engine.lora_table()
            del remaining[name]  # no process names it before the engine drops it
            await self._publish_loras(remaining)
            await self.runner.call("unload LoRA adapter", self._engine.remove_lora(name))

        await self.runner.run("unload LoRA adapter", op, deadline)

    async def _publish_loras(self, table: dict[str, tuple[str, int]]) -> None:
        if self.publish_loras is not None:
            await self.publish_loras(table)

    async def collective_rpc(self, method: str, args: list[Any], kwargs: dict[str, Any],
                             rpc_timeout: float | None, deadline: float | None) -> list[Any]:
        """A worker method the operator allowed (--collective-rpc-allow), on every worker."""
        what = f"collective_rpc {self._workers.check(method)}"
        return await self.runner.run(
            what,
            lambda: self.runner.call(what, self._workers.call(method, args, kwargs, rpc_timeout)),
            deadline)

    # -- weight bounds (core/weight_bounds.py) ----------------------------
    def announce(self, version: str) -> None:
        """The version a fleet update is about to load (OperationRunner.announce)."""
        self.runner.announce(version)

    async def follow_bounds(self) -> None:
        """A serving process that mirrors process 0's state (control/relay.py):
        end its own requests whose bound the weights now served break."""
        await self.runner.follow_bounds()

    @property
    def bounds(self) -> WeightBounds:
        """The running requests bounded in weight version or lag, and how
        many a bound ended (core/weight_bounds.py)."""
        return self.runner.bounds

    @property
    def on_weights_changed(self) -> Callable[[], Awaitable[None]] | None:
        """Told of every weight change before generation resumes (process 0
        of several serving processes: control/relay.py tell_followers)."""
        return self.runner.on_weights_changed

    @on_weights_changed.setter
    def on_weights_changed(self, tell: Callable[[], Awaitable[None]] | None) -> None:
        self.runner.on_weights_changed = tell

    # -- state ------------------------------------------------------------
    @property
    def engine(self) -> EngineControl:
        """The engine's read-only facts (world size, configuration)."""
        return self._engine

    def rpc_allowed(self, method: str) -> bool:
        return self._workers.allowed(method)

    @property
    def pause_mode(self) -> str:
        return self.runner.pause_mode

    @property
    def load_failed(self) -> bool:
        return self.record.load_failed

    @property
    def failed_load(self) -> str:
        return self.record.failed_load

    @property
    def updates(self) -> int:
        return self.record.updates

    @property
    def last_error(self) -> str:
        return self.record.last_error

    @property
    def weight_path(self) -> str:
        """The checkpoint folder the weights served came from ("": unknown)."""
        return self.record.path

    @weight_path.setter
    def weight_path(self, path: str) -> None:
        self.record.path = path

    @property
    def weight_fingerprint(self) -> str:
        return self.record.fingerprint

    async def is_sleeping(self) -> bool:
        return await self._engine.is_sleeping()

    def snapshot(self) -> ControlSnapshot:
        return ControlSnapshot(
            paused=self._state.paused,
            pause_mode=self.pause_mode,
            sleeping=self.sleeping,
            weight_version=self._state.weight_version,
            lora_adapters=self._engine.lora_names(),
            engine_requests=self._engine_requests(),
            updates=self.updates,
            last_error=self.last_error,
            weight_path=self.weight_path,
            generation=self._state.generation,
            load_failed=self.load_failed,
            weight_fingerprint=self.weight_fingerprint,
        )
