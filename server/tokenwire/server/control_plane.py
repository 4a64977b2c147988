"""The control plane: pause/resume, weight updates, versions, cache reset,
sleep/wake, runtime LoRA — over the engine's own control APIs
(domain.EngineControl), one operation at a time.

Rules it keeps:
- Operations are serialised by one lock; each runs under a deadline (the
  caller's, else settings.control_timeout_seconds) and ends
  DEADLINE_EXCEEDED rather than hanging.
- A weight update pauses first (default mode "keep": in-flight requests
  continue on the new weights, their tokens split into version spans),
  drops speculative prefills, loads, sets the version, resets the prefix
  cache (running requests recompute their KV), and resumes unless the
  caller had paused. If loading fails, generation stays paused and the
  error is kept in the state; Resume always works.
- The version and the paused flag are mirrored on ServingState, where the
  data plane (system_fingerprint) and GetStats read them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tokenwire.server.domain import PAUSE_MODES, EngineControl, is_folder
from tokenwire.server.errors import (
    AlreadyExists,
    DeadlineExceeded,
    InvalidArgument,
    NotFound,
    TokenwireError,
)
from tokenwire.server.serving_state import ServingState

log = logging.getLogger("tokenwire.control")

T = TypeVar("T")
MAX_VERSION_CHARS = 256


@dataclasses.dataclass
class ControlSnapshot:
    paused: bool
    pause_mode: str
    sleeping: bool
    weight_version: str
    lora_adapters: list[str]
    engine_requests: int
    updates: int
    last_error: str
    weight_path: str
    generation: int
    load_failed: bool


@dataclasses.dataclass
class UpdateResult:
    load_ms: float
    paused_ms: float


def check_mode(mode: str, param: str, default: str) -> str:
    mode = (mode or default).lower()
    if mode not in PAUSE_MODES:
        raise InvalidArgument(
            f"{param} must be one of {', '.join(PAUSE_MODES)}; got {mode!r}", param=param,
            reason="VALUE_NOT_ALLOWED",
        )
    return mode


def check_lora_load(name: str, path: str, inplace: bool, loaded: list[str]) -> None:
    """Request checks of a LoRA load, made once for every engine."""
    if not name:
        raise InvalidArgument("lora_name is required", param="lora_name", reason="FIELD_REQUIRED")
    if not path:
        raise InvalidArgument("lora_path is required", param="lora_path", reason="FIELD_REQUIRED")
    if name in loaded and not inplace:
        raise AlreadyExists(
            f"lora_name: an adapter named {name!r} is loaded (load_inplace replaces it)",
            param="lora_name", reason="LORA_EXISTS",
        )
    if not is_folder(path):
        raise InvalidArgument(f"lora_path: {path!r} is not a folder on the server",
                              param="lora_path", reason="PATH_NOT_FOUND")


def check_lora_known(name: str, loaded: list[str]) -> None:
    if not name:
        raise InvalidArgument("lora_name is required", param="lora_name", reason="FIELD_REQUIRED")
    if name not in loaded:
        raise NotFound(f"lora_name: no adapter named {name!r} is loaded", param="lora_name",
                       reason="LORA_NOT_FOUND")


def check_version(version: str, param: str) -> str:
    if len(version) > MAX_VERSION_CHARS:
        raise InvalidArgument(
            f"{param} must be at most {MAX_VERSION_CHARS} characters", param=param,
            reason="VALUE_TOO_LONG",
        )
    return version


class ControlPlane:
    def __init__(
        self, engine: EngineControl, state: ServingState, *, timeout: float,
        engine_requests: Callable[[], int],
        on_paused: Callable[[bool], Awaitable[None]] | None = None,
    ):
        self._engine = engine
        self._on_paused = on_paused  # told when generation pauses (True) and resumes
        self._state = state
        self._timeout = timeout
        self._engine_requests = engine_requests
        self._lock = asyncio.Lock()
        self.pause_mode = ""
        self.sleeping = False
        self.updates = 0
        self.last_error = ""
        # The checkpoint folder the weights served now came from ("" when
        # unknown: after a transfer or a failed load).
        self.weight_path = ""
        # The last load failed half-way: the weights may be mixed.
        self.load_failed = False

    async def start(self, initial_version: str) -> None:
        """At start-up: set the initial version (or read the engine's)."""
        if initial_version:
            await self._engine.set_weight_version(check_version(initial_version, "weight_version"))
        self._state.weight_version = await self._engine.weight_version()
        self.weight_path = _real(self._engine.model_path)

    # -- plumbing ----------------------------------------------------------
    async def _run(self, what: str, op: Callable[[], Awaitable[T]], deadline: float | None) -> T:
        """One control operation: serialised, bounded, errors remembered."""
        budget = self._timeout if deadline is None else min(deadline, self._timeout)
        try:
            async with asyncio.timeout(budget):
                async with self._lock:
                    result = await op()
        except TimeoutError:
            self.last_error = f"{what}: no result within {budget:.1f} s"
            log.error("control %s", self.last_error)
            raise DeadlineExceeded(f"{what} did not finish within {budget:.1f} s",
                                   reason="CONTROL_TIMEOUT") from None
        except TokenwireError as err:
            self.last_error = f"{what}: {err.message}"
            raise
        except Exception as exc:
            self.last_error = f"{what}: {type(exc).__name__}: {exc}"
            log.exception("control %s failed", what)
            raise
        return result

    async def _pause(self, mode: str, clear_cache: bool) -> None:
        await self._engine.pause(mode, clear_cache)
        self.pause_mode = mode
        self._state.paused = True
        if self._on_paused is not None:
            await self._on_paused(True)

    async def _resume(self) -> None:
        await self._engine.resume()
        self.pause_mode = ""
        self._state.paused = False
        if self._on_paused is not None:
            await self._on_paused(False)

    async def _set_version(self, version: str) -> None:
        await self._engine.set_weight_version(version)
        self._state.weight_version = version

    def _weights_changed(self, path: str) -> None:
        """The engine now holds other weights, loaded from `path` ("": not
        from a folder)."""
        self.updates += 1
        self._state.generation += 1
        self.weight_path = path

    # -- operations -------------------------------------------------------
    async def pause(self, mode: str, clear_cache: bool, deadline: float | None) -> None:
        mode = check_mode(mode, "mode", "abort")
        await self._run(f"pause ({mode})", lambda: self._pause(mode, clear_cache), deadline)

    async def resume(self, deadline: float | None) -> None:
        async def op() -> None:
            await self._resume()
            self.last_error = ""

        await self._run("resume", op, deadline)

    async def update_from_path(
        self, path: str, version: str, *, pause_mode: str, clear_cache: bool, deadline: float | None,
        path_param: str = "path",
    ) -> UpdateResult:
        if not path:
            raise InvalidArgument(f"{path_param} is required: a checkpoint folder on the server",
                                  param=path_param, reason="FIELD_REQUIRED")
        if not is_folder(path):  # before pausing: bad input harms nothing
            raise InvalidArgument(f"{path_param}: {path!r} is not a folder on the server",
                                  param=path_param, reason="PATH_NOT_FOUND")
        check_version(version, "weight_version")
        mode = check_mode(pause_mode, "pause_mode", "keep")

        async def op() -> UpdateResult:
            paused_by_us = not self._state.paused
            t0 = time.monotonic()
            if paused_by_us:
                await self._pause(mode, clear_cache=False)
            # Speculative prefills would warm the cache with old weights.
            await self._state.cancel_background()
            t1 = time.monotonic()
            await self._engine.reload_weights(path)  # on failure: stay paused
            t2 = time.monotonic()
            if version:
                await self._set_version(version)
            if clear_cache:
                await self._engine.reset_prefix_cache(True)
            self._weights_changed(_real(path))
            self.last_error = ""
            if paused_by_us:
                await self._resume()
            log.info("weights reloaded from %s (version %s) in %.0f ms", path,
                     self._state.weight_version, (t2 - t1) * 1000)
            return UpdateResult(load_ms=(t2 - t1) * 1000, paused_ms=(time.monotonic() - t0) * 1000)

        return await self._run("update weights from path", op, deadline)

    async def set_version(self, version: str, deadline: float | None) -> None:
        if not version:
            raise InvalidArgument("new_version is required", param="new_version",
                                  reason="FIELD_REQUIRED")
        check_version(version, "new_version")
        async def op() -> None:
            if version != self._state.weight_version:
                self._state.generation += 1
            await self._set_version(version)

        await self._run("set weight version", op, deadline)

    async def reset_prefix_cache(self, reset_running: bool, deadline: float | None) -> bool:
        return await self._run(
            "reset prefix cache", lambda: self._engine.reset_prefix_cache(reset_running), deadline
        )

    # Weight transfer (trainer -> engine over NCCL/IPC/...): pass-through.
    async def init_transfer(self, info: dict[str, Any], deadline: float | None) -> None:
        await self._run("init weight transfer", lambda: self._engine.init_weight_transfer(info), deadline)

    async def start_update(self, deadline: float | None) -> None:
        async def op() -> None:
            await self._state.cancel_background()
            await self._engine.start_weight_update()

        await self._run("start weight update", op, deadline)

    async def update_weights(self, info: dict[str, Any], deadline: float | None) -> None:
        await self._run("update weights", lambda: self._engine.update_weights(info), deadline)

    async def finish_update(self, version: str, deadline: float | None) -> None:
        check_version(version, "weight_version")

        async def op() -> None:
            await self._engine.finish_weight_update()
            if version:
                await self._set_version(version)
            self._weights_changed("")

        await self._run("finish weight update", op, deadline)

    async def sleep(self, level: int, mode: str, deadline: float | None) -> None:
        if level not in (0, 1, 2):
            raise InvalidArgument(f"level must be 0, 1 or 2; got {level}", param="level",
                                  reason="VALUE_OUT_OF_RANGE")
        mode = check_mode(mode, "mode", "abort")

        async def op() -> None:
            await self._engine.sleep(level, mode)
            self.sleeping = True

        await self._run("sleep", op, deadline)

    async def wake_up(self, tags: list[str], deadline: float | None) -> bool:
        async def op() -> bool:
            awake = await self._engine.wake_up(tags or None)
            self.sleeping = not awake
            return awake

        return await self._run("wake up", op, deadline)

    async def abort(self, request_ids: list[str], deadline: float | None) -> int:
        # Not under the lock: aborting must work while an update waits.
        budget = self._timeout if deadline is None else min(deadline, self._timeout)
        async with asyncio.timeout(budget):
            return await self._engine.abort_requests(request_ids or None)

    async def load_lora(self, name: str, path: str, inplace: bool, deadline: float | None) -> None:
        async def op() -> None:  # checked under the lock: the loaded set cannot change meanwhile
            check_lora_load(name, path, inplace, self._engine.lora_names())
            await self._engine.add_lora(name, path, inplace)

        await self._run("load LoRA adapter", op, deadline)

    async def unload_lora(self, name: str, deadline: float | None) -> None:
        async def op() -> None:
            check_lora_known(name, self._engine.lora_names())
            await self._engine.remove_lora(name)

        await self._run("unload LoRA adapter", op, deadline)

    # -- state ------------------------------------------------------------
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
        )


def _real(path: str) -> str:
    """A folder's real path (symlinks resolved, so a later change of a link
    such as "latest" does not change what it names); other names as given
    (a model id the engine resolved itself)."""
    return os.path.realpath(path) if is_folder(path) else path
