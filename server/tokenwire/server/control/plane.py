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
- Folders to load are checked before anything pauses: they exist, lie under
  --weights-root (real paths: no way out through ".." or a symlink) and hold
  safetensors files (the engine never unpickles .bin/.pt).
- A weight update pauses first (default mode "keep": in-flight requests
  continue on the new weights, their tokens split into version spans),
  drops speculative prefills, loads, sets the version, resets the prefix
  cache (running requests recompute their KV), and resumes unless the
  caller had paused.
- A load that fails (or whose end the caller did not see) may have left
  mixed weights: the version becomes "<old>+failed-load" in the engine, so
  every token sampled from them says so; generation stays paused, Resume is
  refused until a load succeeds or the caller forces it, and the error stays.
- A weight transfer (StartWeightUpdate .. FinishWeightUpdate) pauses in
  "keep" mode at Start unless already paused; Finish sets the version,
  resets the prefix cache and resumes if Start paused.
- Every weight change adds one to the update generation (ServingState).
- The version and the paused flag are mirrored on ServingState, where the
  data plane (system_fingerprint) and GetStats read them.
"""

from __future__ import annotations

import asyncio
import dataclasses
import glob
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tokenwire.server.core.domain import PAUSE_MODES, EngineControl, is_folder
from tokenwire.server.core.errors import (
    AlreadyExists,
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    TokenwireError,
)
from tokenwire.server.core.serving_state import ServingState

log = logging.getLogger("tokenwire.control")

T = TypeVar("T")
MAX_VERSION_CHARS = 256
FAILED_LOAD_SUFFIX = "+failed-load"  # the version of weights a failed load may have mixed
LORA_WEIGHTS = "adapter_model.safetensors"  # what vLLM loads first (before .bin / .pt)


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


@dataclasses.dataclass
class Transfer:
    """A weight transfer between StartWeightUpdate and FinishWeightUpdate."""

    paused_by_us: bool  # Start paused generation: Finish resumes it


@dataclasses.dataclass
class Pending:
    """Engine work a control call stopped waiting for (deadline or cancel),
    and what to do once it ends (given its error, None when it succeeded)."""

    task: asyncio.Future[Any]
    what: str
    then: Callable[[BaseException | None], Awaitable[None]] | None
    mode: str = ""  # a pause: the mode asked for


def check_mode(mode: str, param: str, default: str) -> str:
    mode = (mode or default).lower()
    if mode not in PAUSE_MODES:
        raise InvalidArgument(
            f"{param} must be one of {', '.join(PAUSE_MODES)}; got {mode!r}", param=param,
            reason="VALUE_NOT_ALLOWED",
        )
    return mode


def check_folder(path: str, param: str, *, root: str, also: str = "", files: str = "") -> str:
    """The real path of a folder to load from, checked before anything
    pauses: it is given, exists, lies under `root` (when set; `also` is
    allowed too: the start-up model) and holds a file matching `files`
    (when set). Real paths: ".." and symlinks cannot lead out of the root,
    and a link changed after the check does not change what is loaded."""
    if not path:
        raise InvalidArgument(f"{param} is required: a folder on the server", param=param,
                              reason="FIELD_REQUIRED")
    if not is_folder(path):
        raise InvalidArgument(f"{param}: {path!r} is not a folder on the server", param=param,
                              reason="PATH_NOT_FOUND")
    real = os.path.realpath(path)
    if root and real != also and not _inside(real, os.path.realpath(root)):
        raise InvalidArgument(
            f"{param}: {path!r} is not under the server's --weights-root (symlinks and '..' "
            "resolved)", param=param, reason="PATH_OUTSIDE_WEIGHTS_ROOT",
        )
    if files and not glob.glob(os.path.join(glob.escape(real), files)):
        raise InvalidArgument(
            f"{param}: {path!r} holds no {files} file (weights are loaded from safetensors "
            "only; pickled .bin/.pt files are refused)", param=param,
            reason="WEIGHTS_NOT_SAFETENSORS",
        )
    return real


def _inside(path: str, root: str) -> bool:
    return os.path.commonpath([path, root]) == root


def check_lora_name(name: str, inplace: bool, loaded: list[str]) -> None:
    """Request checks of a LoRA load's name, made once for every engine."""
    if not name:
        raise InvalidArgument("lora_name is required", param="lora_name", reason="FIELD_REQUIRED")
    if name in loaded and not inplace:
        raise AlreadyExists(
            f"lora_name: an adapter named {name!r} is loaded (load_inplace replaces it)",
            param="lora_name", reason="LORA_EXISTS",
        )


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


def failed_label(version: str) -> str:
    """The version of weights a failed load may have mixed (suffixed once)."""
    return version if version.endswith(FAILED_LOAD_SUFFIX) else version + FAILED_LOAD_SUFFIX


class ControlPlane:
    def __init__(
        self, engine: EngineControl, state: ServingState, *, timeout: float,
        engine_requests: Callable[[], int],
        on_paused: Callable[[bool], Awaitable[None]] | None = None,
        weights_root: str = "",
    ):
        self._engine = engine
        self._on_paused = on_paused  # told when generation pauses (True) and resumes
        self._state = state
        self._timeout = timeout
        self._engine_requests = engine_requests
        self._weights_root = weights_root  # "": any folder (docs/control.md)
        self._lock = asyncio.Lock()
        self.pause_mode = ""
        self.sleeping = False
        self.updates = 0
        self.last_error = ""
        # The checkpoint folder the weights served now came from ("" when
        # unknown: after a transfer or a failed load).
        self.weight_path = ""
        self._model_path = ""  # the start-up model's folder: always loadable (rollback)
        # The last load failed (its description while so): the weights may be mixed.
        self.failed_load = ""
        self._failed_load_error = False  # last_error is the failed load's (kept until cleared)
        self._transfer: Transfer | None = None
        self._pending: Pending | None = None
        self._settler: asyncio.Task[None] | None = None

    @property
    def load_failed(self) -> bool:
        return bool(self.failed_load)

    async def start(self, initial_version: str) -> None:
        """At start-up: set the initial version (or read the engine's)."""
        if initial_version:
            await self._engine.set_weight_version(check_version(initial_version, "weight_version"))
        self._state.weight_version = await self._engine.weight_version()
        self.weight_path = self._model_path = _real(self._engine.model_path)
        if not self._weights_root:
            log.warning("control: no --weights-root: weight and LoRA loads may read any folder "
                        "this process can read")

    # -- plumbing ----------------------------------------------------------
    async def _run(self, what: str, op: Callable[[], Awaitable[T]], deadline: float | None) -> T:
        """One control operation: serialised, bounded, errors remembered."""
        budget = self._timeout if deadline is None else min(deadline, self._timeout)
        try:
            async with asyncio.timeout(budget):
                async with self._lock:
                    await self._settle()
                    result = await op()
        except TimeoutError:
            busy = f" (the engine is still busy with: {self._pending.what})" if self._pending else ""
            self._error(f"{what}: no result within {budget:.1f} s{busy}")
            log.error("control %s: no result within %.1f s%s", what, budget, busy)
            self._settle_later()
            raise DeadlineExceeded(f"{what} did not finish within {budget:.1f} s{busy}",
                                   reason="CONTROL_TIMEOUT") from None
        except asyncio.CancelledError:
            self._settle_later()
            raise
        except TokenwireError as err:
            self._error(f"{what}: {err.message}")
            raise
        except Exception as exc:
            self._error(f"{what}: {type(exc).__name__}: {exc}")
            log.exception("control %s failed", what)
            raise
        return result

    def _error(self, message: str) -> None:
        """Remember the last error, unless a failed load's is kept."""
        if not self._failed_load_error:
            self.last_error = message

    async def _call(
        self, what: str, work: Awaitable[T],
        then: Callable[[BaseException | None], Awaitable[None]] | None = None, mode: str = "",
    ) -> T:
        """An engine call that runs to its end even when the control call
        stops waiting (deadline, cancel): kept as pending work, which the
        next operation (or the settler) waits for before anything else, then
        `then(error)` and a read-back of the engine's state."""
        task = asyncio.ensure_future(work)
        self._pending = Pending(task, what, then, mode)
        try:
            result = await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.cancelled():  # the engine work itself was cancelled: nothing left running
                self._pending = None
            raise
        except BaseException:
            self._pending = None
            raise
        self._pending = None
        return result

    def _settle_later(self) -> None:
        """After a call stopped waiting for engine work: once that work
        ends, bring the recorded state in line with the engine (holding the
        lock meanwhile, so no other operation runs beside it)."""
        if self._pending is None or (self._settler is not None and not self._settler.done()):
            return

        async def settle() -> None:
            try:
                async with self._lock:
                    await self._settle()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("control: reading the engine's state back failed")

        self._settler = asyncio.create_task(settle())

    async def _settle(self) -> None:
        """Wait for pending engine work (a call that stopped waiting left it
        running), run its follow-up, then read the engine's state back."""
        pending = self._pending
        if pending is None:
            return
        error: BaseException | None = None
        try:
            await asyncio.shield(pending.task)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if not pending.task.cancelled() or (current is not None and current.cancelling()):
                raise  # we were cancelled; the work goes on and stays pending
            error = asyncio.CancelledError()  # the engine work itself was cancelled
        except Exception as exc:
            error = exc
        self._pending = None
        log.info("control: %s ended after its caller stopped waiting (%s)", pending.what,
                 "ok" if error is None else f"{type(error).__name__}: {error}")
        if pending.then is not None:
            await pending.then(error)
        await self._reconcile(pending.mode)

    async def _reconcile(self, mode: str) -> None:
        """The recorded paused flag and version, as the engine has them."""
        version = await self._engine.weight_version()
        if version != self._state.weight_version:
            self._state.generation += 1
            self._state.weight_version = version
        paused = await self._engine.is_paused()
        if paused != self._state.paused:
            await self._paused(paused, (mode or self.pause_mode or "keep") if paused else "")

    async def _paused(self, paused: bool, mode: str) -> None:
        self.pause_mode = mode
        self._state.paused = paused
        if self._on_paused is not None:
            await self._on_paused(paused)

    async def _pause(self, mode: str, clear_cache: bool) -> None:
        await self._call(f"pause ({mode})", self._engine.pause(mode, clear_cache), mode=mode)
        await self._paused(True, mode)

    async def _resume(self) -> None:
        await self._call("resume", self._engine.resume())
        await self._paused(False, "")

    async def _set_version(self, version: str) -> None:
        await self._call("set weight version", self._engine.set_weight_version(version))
        self._state.weight_version = version

    def _weights_changed(self, path: str) -> None:
        """The engine now holds other weights, loaded whole from `path` ("":
        not from a folder)."""
        self.updates += 1
        self._state.generation += 1
        self.weight_path = path
        self.failed_load = ""
        self._failed_load_error = False
        self.last_error = ""

    async def _load_failed(self, what: str) -> None:
        """A load failed part-way (or its caller did not see it end): the
        weights may be mixed. Label them so that every token says so."""
        self._state.generation += 1
        self.weight_path = ""
        self.failed_load = what
        self.last_error = what
        self._failed_load_error = True
        label = failed_label(self._state.weight_version)
        self._state.weight_version = label
        try:
            await self._call("set weight version", self._engine.set_weight_version(label))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a dead engine samples nothing more
            log.error("control: could not label the weights %r: %s", label, exc)
        log.error("control: %s; the weights may be mixed: version %r, paused until a load "
                  "succeeds or a forced Resume", what, label)

    def _no_transfer_running(self) -> None:
        if self._transfer is not None:
            raise FailedPrecondition(
                "a weight transfer is in progress (StartWeightUpdate was called): "
                "FinishWeightUpdate ends it; Resume with force abandons it",
                reason="WEIGHT_TRANSFER_IN_PROGRESS",
            )

    # -- operations -------------------------------------------------------
    async def pause(self, mode: str, clear_cache: bool, deadline: float | None) -> None:
        mode = check_mode(mode, "mode", "abort")
        await self._run(f"pause ({mode})", lambda: self._pause(mode, clear_cache), deadline)

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
                self._no_transfer_running()
            if self._transfer is not None:  # forced: the transfer is abandoned part-way
                self._transfer = None
                await self._load_failed("weight transfer abandoned by a forced Resume")
            await self._resume()
            if force:  # the failed load's error is cleared; the label stays until a load succeeds
                self._failed_load_error = False
                self.last_error = ""

        await self._run("resume", op, deadline)

    async def update_from_path(
        self, path: str, version: str, *, pause_mode: str, clear_cache: bool, deadline: float | None,
        path_param: str = "path",
    ) -> UpdateResult:
        # Before pausing: bad input harms nothing.
        real = check_folder(path, path_param, root=self._weights_root, also=self._model_path,
                            files=self._engine.weight_files)
        check_version(version, "weight_version")
        mode = check_mode(pause_mode, "pause_mode", "keep")

        async def op() -> UpdateResult:
            self._no_transfer_running()
            paused_by_us = not self._state.paused
            t0 = time.monotonic()
            if paused_by_us:
                await self._pause(mode, clear_cache=False)
            # Speculative prefills would warm the cache with old weights.
            await self._state.cancel_background()
            t1 = time.monotonic()
            what = f"loading weights from {real!r}"

            async def late(error: BaseException | None) -> None:
                outcome = "it ended" if error is None else f"it failed: {error}"
                await self._load_failed(f"{what}: its caller stopped waiting; {outcome} later")

            try:
                await self._call(what, self._engine.reload_weights(real), late)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # stay paused, labelled as mixed
                message = exc.message if isinstance(exc, TokenwireError) else f"{type(exc).__name__}: {exc}"
                await self._load_failed(message)
                raise
            t2 = time.monotonic()
            if version:
                await self._set_version(version)
            if clear_cache:
                await self._call("reset prefix cache", self._engine.reset_prefix_cache(True))
            self._weights_changed(real)
            if paused_by_us:
                await self._resume()
            log.info("weights reloaded from %s (version %s) in %.0f ms", real,
                     self._state.weight_version, (t2 - t1) * 1000)
            return UpdateResult(load_ms=(t2 - t1) * 1000, paused_ms=(time.monotonic() - t0) * 1000)

        return await self._run("update weights from path", op, deadline)

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
            await self._set_version(version)

        await self._run("set weight version", op, deadline)

    async def reset_prefix_cache(self, reset_running: bool, deadline: float | None) -> bool:
        return await self._run(
            "reset prefix cache",
            lambda: self._call("reset prefix cache", self._engine.reset_prefix_cache(reset_running)),
            deadline,
        )

    # Weight transfer (trainer -> engine over NCCL/IPC/...).
    async def init_transfer(self, info: dict[str, Any], deadline: float | None) -> None:
        await self._run(
            "init weight transfer",
            lambda: self._call("init weight transfer", self._engine.init_weight_transfer(info)),
            deadline,
        )

    async def start_update(self, deadline: float | None) -> None:
        """Pause ("keep") unless paused already, so no token is sampled from
        half-transferred weights; Finish resumes if this paused."""
        async def op() -> None:
            self._no_transfer_running()
            paused_by_us = not self._state.paused
            if paused_by_us:
                await self._pause("keep", clear_cache=False)
            await self._state.cancel_background()

            async def late(error: BaseException | None) -> None:
                if error is None:
                    self._transfer = Transfer(paused_by_us)

            try:
                await self._call("start weight update", self._engine.start_weight_update(), late)
            except asyncio.CancelledError:
                raise
            except Exception:
                if paused_by_us:  # nothing changed: back as it was
                    await self._resume()
                raise
            self._transfer = Transfer(paused_by_us)

        await self._run("start weight update", op, deadline)

    async def update_weights(self, info: dict[str, Any], deadline: float | None) -> None:
        async def op() -> None:
            self._transfer_started("UpdateWeights")
            await self._transfer_step("update weights", self._engine.update_weights(info))

        await self._run("update weights", op, deadline)

    async def finish_update(self, version: str, deadline: float | None) -> None:
        check_version(version, "weight_version")

        async def op() -> None:
            transfer = self._transfer_started("FinishWeightUpdate")
            self._transfer = None
            await self._transfer_step("finish weight update", self._engine.finish_weight_update())
            if version:
                await self._set_version(version)
            # Cached blocks hold KV of the old weights; kept requests recompute theirs.
            await self._call("reset prefix cache", self._engine.reset_prefix_cache(True))
            self._weights_changed("")
            if transfer.paused_by_us:
                await self._resume()

        await self._run("finish weight update", op, deadline)

    def _transfer_started(self, call: str) -> Transfer:
        if self._transfer is None:
            raise FailedPrecondition(f"{call} needs StartWeightUpdate first",
                                     reason="WEIGHT_TRANSFER_NOT_STARTED")
        return self._transfer

    async def _transfer_step(self, what: str, work: Awaitable[None]) -> None:
        """A transfer step that fails leaves weights part-transferred."""
        async def late(error: BaseException | None) -> None:
            await self._load_failed(f"{what}: its caller stopped waiting")

        try:
            await self._call(what, work, late)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            message = exc.message if isinstance(exc, TokenwireError) else f"{type(exc).__name__}: {exc}"
            await self._load_failed(f"{what}: {message}")
            raise

    async def sleep(self, level: int, mode: str, deadline: float | None) -> None:
        if level not in (0, 1, 2):
            raise InvalidArgument(f"level must be 0, 1 or 2; got {level}", param="level",
                                  reason="VALUE_OUT_OF_RANGE")
        mode = check_mode(mode, "mode", "abort")

        async def op() -> None:
            await self._call("sleep", self._engine.sleep(level, mode))
            self.sleeping = True

        await self._run("sleep", op, deadline)

    async def wake_up(self, tags: list[str], deadline: float | None) -> bool:
        async def op() -> bool:
            awake = await self._call("wake up", self._engine.wake_up(tags or None))
            self.sleeping = not awake
            return awake

        return await self._run("wake up", op, deadline)

    async def abort(self, request_ids: list[str], deadline: float | None) -> int:
        # Not under the lock: aborting must work while an update waits.
        budget = self._timeout if deadline is None else min(deadline, self._timeout)
        async with asyncio.timeout(budget):
            return await self._engine.abort_requests(request_ids or None)

    async def load_lora(self, name: str, path: str, inplace: bool, deadline: float | None) -> None:
        if not name:
            raise InvalidArgument("lora_name is required", param="lora_name", reason="FIELD_REQUIRED")
        real = check_folder(path, "lora_path", root=self._weights_root,
                            files=LORA_WEIGHTS if self._engine.weight_files else "")

        async def op() -> None:  # checked under the lock: the loaded set cannot change meanwhile
            check_lora_name(name, inplace, self._engine.lora_names())
            await self._call("load LoRA adapter", self._engine.add_lora(name, real, inplace))

        await self._run("load LoRA adapter", op, deadline)

    async def unload_lora(self, name: str, deadline: float | None) -> None:
        async def op() -> None:
            check_lora_known(name, self._engine.lora_names())
            await self._call("unload LoRA adapter", self._engine.remove_lora(name))

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
