"""Weight updates, the control plane's operations that change the weights:
a reload from a checkpoint folder (through vLLM, or an allowed worker
method's loader) and a weight transfer (Start .. Update .. Finish), with
the bookkeeping every weight change keeps (generation, failed-load label,
the folder served: records.WeightRecord). ControlPlane (plane.py) holds one
and runs its operations through the plane's OperationRunner (runner.py);
docs/control.md says why each rule is kept."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import Any

from tokenwire.server.control.checkpoint import check_complete, tensor_names
from tokenwire.server.control.checks import check_folder, check_mode, check_version, real_path
from tokenwire.server.control.fingerprint import fingerprint
from tokenwire.server.control.records import Transfer, UpdateResult, WeightRecord
from tokenwire.server.control.runner import OperationRunner
from tokenwire.server.control.workers import WorkerMethods
from tokenwire.server.core.engine_control import EngineControl
from tokenwire.server.core.errors import FailedPrecondition, InvalidArgument, TokenwireError
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.weight_versions import MAX_VERSION_CHARS

log = logging.getLogger("tokenwire.control")

FAILED_LOAD_SUFFIX = "+failed-load"  # the version of weights a failed load may have mixed
VERSIONLESS_SEPARATOR = "#"  # a versionless load's label: <version>#<generation>


def failed_label(version: str) -> str:
    """The version of weights a failed load may have mixed (suffixed once)."""
    return version if version.endswith(FAILED_LOAD_SUFFIX) else version + FAILED_LOAD_SUFFIX


def versionless_label(version: str, generation: int) -> str:
    """The version of weights a load that named none brought (prime-rl's
    /update_weights {weight_dir}, SGLang's body without weight_version, a
    transfer's Finish without one): `<last named version>#<generation>`, the
    update generation they are served at, so a request that straddles the
    load shows two spans (issue 42 L-2). Built on the version served before,
    less its failed-load suffix (the load succeeded) and a label of this
    kind (`v1#3`, then `v1#4`, not `v1#3#4`); at most MAX_VERSION_CHARS."""
    base = version.removesuffix(FAILED_LOAD_SUFFIX)
    head, sep, number = base.rpartition(VERSIONLESS_SEPARATOR)
    if sep and number.isascii() and number.isdigit():
        base = head
    suffix = f"{VERSIONLESS_SEPARATOR}{generation}"
    return base[:MAX_VERSION_CHARS - len(suffix)] + suffix


class WeightUpdates:
    """The weight-changing operations and what they record (`record`)."""

    def __init__(
        self, runner: OperationRunner, engine: EngineControl, state: ServingState,
        record: WeightRecord, workers: WorkerMethods, *, weights_root: str = "",
    ):
        self._runner = runner
        self._engine = engine
        self._state = state
        self.record = record
        self._workers = workers
        self._weights_root = weights_root  # "": any folder (docs/control.md)
        self._model_path = ""  # the start-up model's folder: always loadable (rollback)
        # The served model's tensor names (control/checkpoint.py; None: unknown).
        self._served_tensors: frozenset[str] | None = None
        self._transfer: Transfer | None = None  # the open weight transfer (Start .. Finish)

    def start(self) -> None:
        """At start-up: the weights served are the start-up model's folder."""
        self.record.path = self._model_path = real_path(self._engine.model_path)
        self.record.fingerprint = fingerprint(self._model_path, self._engine.weight_files)
        self._served_tensors = tensor_names(self._model_path, self._engine.weight_files)

    def _weights_changed(self, path: str, files: str = "") -> None:
        """The engine now holds other weights, loaded whole from `path` ("":
        not from a folder) whose files had the fingerprint `files`."""
        self._state.generation += 1
        self.record.changed(path, files)

    async def mark_failed_load(self, what: str) -> None:
        """A load failed part-way (or its caller did not see it end): the
        weights may be mixed. Label them so that every token says so."""
        self._state.generation += 1
        self.record.failed(what)
        label = failed_label(self._state.weight_version)
        self._state.weight_version = label
        try:
            await self._runner.call("set weight version", self._engine.set_weight_version(label))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a dead engine samples nothing more
            log.error("control: could not label the weights %r: %s", label, exc)
        log.error("control: %s; the weights may be mixed: version %r, paused until a load "
                  "succeeds or a forced Resume", what, label)

    def _label(self, version: str) -> str:
        """The version of the weights a load brings: as named, else one of
        their own (versionless_label) at the generation the load gets."""
        return version or versionless_label(self._state.weight_version,
                                            self._state.generation + 1)

    def check_no_transfer(self) -> None:
        """FAILED_PRECONDITION while a weight transfer is open."""
        if self._transfer is not None:
            raise FailedPrecondition(
                "a weight transfer is in progress (StartWeightUpdate was called): "
                "FinishWeightUpdate ends it; Resume with force abandons it",
                reason="WEIGHT_TRANSFER_IN_PROGRESS",
            )

    async def update_from_path(
        self, path: str, version: str, *, pause_mode: str, clear_cache: bool,
        deadline: float | None, path_param: str = "path", worker_method: str = "",
        expected_fingerprint: str = "",
    ) -> UpdateResult:
        """Load the checkpoint folder `path`: with vLLM's reload_weights, or
        with `worker_method` (a worker extension's loader the operator allowed,
        prime-rl's update_weights_from_path), called with the folder's real
        path. Either way the same weight change: folder check, pause, load,
        failed-load label on failure, version, cache reset, generation, resume.
        With `expected_fingerprint`, only a folder whose files still have it
        (control/fingerprint.py): checked before anything pauses."""
        # Before pausing: bad input harms nothing. A worker method reads what
        # it reads (a broadcast marker, safetensors): the folder is checked, not its files.
        if worker_method:
            self._workers.check(worker_method)
        real = check_folder(path, path_param, root=self._weights_root, also=self._model_path,
                            files="" if worker_method else self._engine.weight_files)
        check_version(version, "weight_version")
        mode = check_mode(pause_mode, "pause_mode", "keep")

        async def op() -> UpdateResult:
            self.check_no_transfer()
            files = self._unchanged_files(real, worker_method, expected_fingerprint)
            # A partial checkpoint: vLLM would keep the old values of what it lacks.
            tensors = None if worker_method else check_complete(
                real, path, path_param, self._engine.weight_files, self._served_tensors)
            paused_by_us = not self._state.paused
            t0 = time.monotonic()
            if paused_by_us:
                await self._runner.pause_engine(mode, clear_cache=False)
            # Speculative prefills would warm the cache with old weights.
            await self._state.cancel_background()
            t1 = time.monotonic()
            await self._load(real, worker_method)
            t2 = time.monotonic()
            await self._runner.set_engine_version(self._label(version))
            if clear_cache:
                await self._runner.call("reset prefix cache", self._engine.reset_prefix_cache(True))
            # Files that changed while loading: what was loaded is unknown.
            now = fingerprint(real, "" if worker_method else self._engine.weight_files)
            self._weights_changed(real, files if now == files else "")
            if tensors:
                self._served_tensors = tensors
            if paused_by_us:
                await self._runner.resume_engine()
            log.info("weights reloaded from %s (version %s) in %.0f ms", real,
                     self._state.weight_version, (t2 - t1) * 1000)
            return UpdateResult(load_ms=(t2 - t1) * 1000, paused_ms=(time.monotonic() - t0) * 1000)

        return await self._runner.run("update weights from path", op, deadline)

    def _unchanged_files(self, real: str, worker_method: str, expected: str) -> str:
        """The fingerprint of the folder's files now; FAILED_PRECONDITION
        when an `expected` one (the files loaded before) differs."""
        files = fingerprint(real, "" if worker_method else self._engine.weight_files)
        if expected and files != expected:
            raise FailedPrecondition(
                f"expected_fingerprint: the files of {real!r} changed since the server "
                f"loaded them ({expected} -> {files}): the folder was written "
                "over and no longer holds those weights; nothing was loaded",
                param="expected_fingerprint", reason="WEIGHTS_CHANGED")
        return files

    async def _load(self, real: str, worker_method: str) -> None:
        """The folder's weights into the engine: vLLM's reload_weights, or the
        workers' `worker_method`. A load that fails, or that its caller
        stopped waiting for, labels the weights as mixed."""
        what = f"loading weights from {real!r}" + (
            f" with the workers' {worker_method}" if worker_method else "")

        async def late(error: BaseException | None) -> None:
            outcome = "it ended" if error is None else f"it failed: {error}"
            await self.mark_failed_load(f"{what}: its caller stopped waiting; {outcome} later")

        load: Awaitable[Any] = (self._workers.call(worker_method, [real], {}, None)
                                if worker_method else self._engine.reload_weights(real))
        try:
            await self._runner.call(what, load, late)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # stay paused, labelled as mixed
            await self.mark_failed_load(_described(exc))
            raise

    async def start_update(self, deadline: float | None) -> None:
        """Pause ("keep") unless paused already, so no token is sampled from
        half-transferred weights; Finish resumes if this paused."""
        async def op() -> None:
            self.check_no_transfer()
            paused_by_us = not self._state.paused
            if paused_by_us:
                await self._runner.pause_engine("keep", clear_cache=False)
            await self._state.cancel_background()

            async def late(error: BaseException | None) -> None:
                if error is None:
                    self._transfer = Transfer(paused_by_us)

            try:
                await self._runner.call("start weight update",
                                        self._engine.start_weight_update(), late)
            except asyncio.CancelledError:
                raise
            except Exception:
                if paused_by_us:  # nothing changed: back as it was
                    await self._runner.resume_engine()
                raise
            self._transfer = Transfer(paused_by_us)

        await self._runner.run("start weight update", op, deadline)

    async def update_weights(self, info: dict[str, Any], deadline: float | None) -> None:
        async def op() -> None:
            self._transfer_started("UpdateWeights")
            await self._transfer_step("update weights", self._engine.update_weights(info))

        await self._runner.run("update weights", op, deadline)

    async def finish_update(self, version: str, deadline: float | None) -> None:
        check_version(version, "weight_version")

        async def op() -> None:
            transfer = self._transfer_started("FinishWeightUpdate")
            self._transfer = None
            await self._transfer_step("finish weight update", self._engine.finish_weight_update())
            if transfer.failed:
                await self._transfer_incomplete(version)
            await self._runner.set_engine_version(self._label(version))
            # Cached blocks hold KV of the old weights; kept requests recompute theirs.
            await self._runner.call("reset prefix cache", self._engine.reset_prefix_cache(True))
            self._weights_changed("")
            if transfer.paused_by_us:
                await self._runner.resume_engine()

        await self._runner.run("finish weight update", op, deadline)

    async def check_weights(self, action: str, baseline: dict[str, str],
                            deadline: float | None) -> tuple[dict[str, str], bool | None,
                                                             list[str]]:
        """vLLM's weight checker: (checksums, match, mismatches). "reset"
        zeroes the weights, so it needs generation paused and labels them
        as a failed load (Resume refused until a load or a whole transfer)."""
        if action not in ("checksum", "compare", "reset"):
            raise InvalidArgument(f"action must be one of checksum, compare, reset; got "
                                  f"{action!r}", param="action", reason="VALUE_NOT_ALLOWED")
        if action == "compare" and not baseline:
            raise InvalidArgument("action 'compare' needs a baseline (the digests 'checksum' "
                                  "answered)", param="baseline", reason="FIELD_REQUIRED")

        async def op() -> tuple[dict[str, str], bool | None, list[str]]:
            if action == "reset":
                if not self._state.paused:
                    raise FailedPrecondition(
                        "action 'reset' zeroes the weights: Pause generation first (nothing "
                        "may be sampled from zeros)", param="action",
                        reason="GENERATION_NOT_PAUSED")
                await self._runner.call("zero weights", self._engine.zero_weights())
                if self._transfer is not None:  # parameters the transfer skips stay zero
                    self._transfer.failed = True
                await self.mark_failed_load("the weights were zeroed (weight checker reset)")
                return {}, None, []
            sums = await self._runner.call("weight checksums", self._engine.weight_checksums())
            if action == "checksum":
                return sums, None, []
            differ = sorted(k for k in sums.keys() | baseline.keys()
                            if sums.get(k) != baseline.get(k))
            return {}, not differ, differ

        return await self._runner.run(f"weight checker {action}", op, deadline)

    async def _transfer_incomplete(self, version: str) -> None:
        """Finish after a failed step: the engine's transfer is ended, but
        the weights are what the failed step left (a batch resent later may
        not cover it), so they keep the failed-load label and generation
        stays paused; only a transfer with no failed step since Start, or
        a checkpoint load, clears it."""
        self._state.generation += 1  # the engine's finish may have changed them again
        await self._runner.call("reset prefix cache", self._engine.reset_prefix_cache(True))
        given = f" (weight_version {version!r} is not applied)" if version else ""
        raise FailedPrecondition(
            f"a step of this weight transfer failed ({self.record.failed_load}): the weights "
            f"may be mixed, so they keep the version {self._state.weight_version!r}{given} and "
            "generation stays paused; send the whole transfer again (StartWeightUpdate .. "
            "FinishWeightUpdate) or load a checkpoint (Resume with force serves them as they are)",
            reason="WEIGHT_TRANSFER_INCOMPLETE")

    async def abandon_transfer(self) -> None:
        """A forced Resume during a transfer: the weights are part-transferred."""
        if self._transfer is not None:
            self._transfer = None
            await self.mark_failed_load("weight transfer abandoned by a forced Resume")

    def _transfer_started(self, call: str) -> Transfer:
        if self._transfer is None:
            raise FailedPrecondition(f"{call} needs StartWeightUpdate first",
                                     reason="WEIGHT_TRANSFER_NOT_STARTED")
        return self._transfer

    async def _transfer_step(self, what: str, work: Awaitable[None]) -> None:
        """A transfer step that fails leaves weights part-transferred (and
        marks the transfer: its Finish keeps the failed-load label)."""
        transfer = self._transfer

        async def late(error: BaseException | None) -> None:
            if transfer is not None:
                transfer.failed = True
            await self.mark_failed_load(f"{what}: its caller stopped waiting")

        try:
            await self._runner.call(what, work, late)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            if transfer is not None:
                transfer.failed = True
            await self.mark_failed_load(f"{what}: {_described(exc)}")
            raise


def _described(exc: Exception) -> str:
    """An engine error as a failed load's description."""
    return exc.message if isinstance(exc, TokenwireError) else f"{type(exc).__name__}: {exc}"
