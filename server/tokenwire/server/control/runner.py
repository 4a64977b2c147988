"""Control operations one at a time, each under a deadline, with the
engine's work shielded: a call that stops waiting (deadline, cancel) leaves
its engine work pending; the next operation (or a settler task) waits for
it, runs its follow-up and reads the engine's state back before anything
else runs. ControlPlane (plane.py) and the weight updates (weights.py)
run their operations through one OperationRunner: `run` serialises and
bounds an operation, `call` shields the engine work inside it, and the
steps pause_engine, resume_engine and set_engine_version record what they
change."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tokenwire.server.control.checks import check_version
from tokenwire.server.core.engine_control import EngineControl
from tokenwire.server.core.errors import DeadlineExceeded, TokenwireError
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.weight_bounds import WeightBounds

log = logging.getLogger("tokenwire.control")

T = TypeVar("T")


@dataclasses.dataclass
class Pending:
    """Engine work a control call stopped waiting for (deadline or cancel),
    and what to do once it ends (given its error, None when it succeeded)."""

    task: asyncio.Future[Any]
    what: str
    then: Callable[[BaseException | None], Awaitable[None]] | None
    mode: str = ""  # a pause: the mode asked for


class OperationRunner:
    """The lock, the deadline and the pending engine work of control
    operations, and the engine state every operation records (paused flag
    and mode, weight version; mirrored on ServingState). An operation's
    error is told to `on_error` (the control plane's WeightRecord.error)."""

    def __init__(
        self, engine: EngineControl, state: ServingState, *, timeout: float,
        on_error: Callable[[str], None],
        on_paused: Callable[[bool], Awaitable[None]] | None = None,
    ):
        self._engine = engine
        self._state = state
        self._timeout = timeout
        self._error = on_error  # remembers an operation's error
        self._on_paused = on_paused  # told when generation pauses (True) and resumes
        self.pause_mode = ""
        self._lock = asyncio.Lock()
        self._pending: Pending | None = None
        # Told of every weight change before generation resumes (process 0
        # of several serving processes: control/relay.py tell_followers).
        self.on_weights_changed: Callable[[], Awaitable[None]] | None = None
        self._told_generation = state.generation
        self._settler: asyncio.Task[None] | None = None

    def announce(self, version: str) -> None:
        """The version a fleet update is about to load (empty: withdrawn):
        until it is committed here, this replica counts as one update behind
        for max_weight_lag (core/weight_bounds.py). Not under the lock: an
        announce must not wait for an operation in progress."""
        self._state.bounds.announced = check_version(version, "weight_version")

    @property
    def bounds(self) -> WeightBounds:
        """The running requests bounded in weight version or lag, and how
        many a bound ended (core/weight_bounds.py)."""
        return self._state.bounds

    async def run(self, what: str, op: Callable[[], Awaitable[T]], deadline: float | None) -> T:
        """One control operation: serialised, bounded, errors remembered."""
        budget = self._timeout if deadline is None else min(deadline, self._timeout)
        try:
            async with asyncio.timeout(budget):
                async with self._lock:
                    await self._settle()
                    try:
                        result = await op()
                    finally:  # whatever the weights now are, no bound is broken
                        await self._end_out_of_bounds()
        except TimeoutError:
            busy = (f" (the engine is still busy with: {self._pending.what})"
                    if self._pending else "")
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

    async def call(
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
                    await self._end_out_of_bounds()
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

    async def pause_engine(self, mode: str, clear_cache: bool) -> None:
        """A step of an operation: pause generation, and record it."""
        await self.call(f"pause ({mode})", self._engine.pause(mode, clear_cache), mode=mode)
        await self._paused(True, mode)

    async def follow_bounds(self) -> None:
        """A serving process that mirrors process 0's state (control/relay.py):
        end its own requests whose bound the weights now served break."""
        await self._end_out_of_bounds()

    async def _end_out_of_bounds(self) -> None:
        """End the running requests whose weight bound the weights served
        now break (core/weight_bounds.py): aborted in the engine, so they
        finish "abort" with every id sampled so far. Called before
        generation resumes and before a version label changes, so none
        samples a token of weights its bound excludes."""
        state = self._state
        if state.bounds.announced == state.weight_version:  # the announced version is committed
            state.bounds.announced = ""
        if self.on_weights_changed is not None and state.generation != self._told_generation:
            self._told_generation = state.generation
            await self.on_weights_changed()
        ended = state.bounds.broken(version=state.weight_version, generation=state.generation)
        if not ended:
            return
        log.info("control: %d request(s) ended at weight version %r (generation %d): their "
                 "bound excludes it", len(ended), state.weight_version, state.generation)
        try:
            await self._engine.abort_requests(ended)
        except asyncio.CancelledError:
            raise
        except Exception:  # a dead engine runs nothing more
            log.exception("control: aborting requests out of their weight bound failed")

    async def resume_engine(self) -> None:
        """A step of an operation: end the requests out of their bound,
        resume generation, and record it."""
        await self._end_out_of_bounds()
        await self.call("resume", self._engine.resume())
        await self._paused(False, "")

    async def set_engine_version(self, version: str) -> None:
        """A step of an operation: the weights' version label, in the engine
        and recorded."""
        # Under the old label (SetWeightVersion bumped the generation).
        await self._end_out_of_bounds()
        await self.call("set weight version", self._engine.set_weight_version(version))
        self._state.weight_version = version
