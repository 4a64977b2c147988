"""Whether the server accepts work, and what is in flight: shared by the
servicer, the data plane, sessions and speculative prefill."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator

from tokenwire.server.core.errors import Unavailable
from tokenwire.server.core.request_ids import EngineRequestIds
from tokenwire.server.core.weight_bounds import WeightBounds
from tokenwire.server.core.weight_versions import number_at_least, split_number

MAX_VERSIONS_KEPT = 4096  # version names remembered for x-min-weight-version


class ServingState:
    """Whether the server accepts work, and how many calls are in flight."""

    def __init__(self) -> None:
        self.serving = False
        self.active_calls = 0
        self.idle = asyncio.Event()  # set while no call is in flight (a drain waits on it)
        self.idle.set()
        self.started = int(time.time())
        self.sessions = 0
        self.background: set[asyncio.Task[None]] = set()  # speculative prefills
        # Kept by the control plane: the weight version new tokens are
        # attributed to, and whether generation is paused.
        self._weight_version = ""
        self.paused = False
        # The update generation: +1 on every weight change (control plane).
        self.generation = 0
        # The running requests bounded in weight version or lag (issue #26),
        # by the id the engine sees (unique in flight; the caller's is a label).
        self.bounds = WeightBounds()
        self.engine_ids = EngineRequestIds()
        # Each version name served here, in the order first served (a rank:
        # the order of the generations at which each was first served).
        self._first_served: dict[str, int] = {}
        self._names_seen = 0
        # Set when another process runs control (control/relay.py): reads
        # the paused flag and version again.
        self.refresh: Callable[[], Awaitable[None]] | None = None

    @property
    def weight_version(self) -> str:
        return self._weight_version

    @weight_version.setter
    def weight_version(self, version: str) -> None:
        if version and version not in self._first_served:
            self._names_seen += 1
            self._first_served[version] = self._names_seen
            if len(self._first_served) > MAX_VERSIONS_KEPT:  # the oldest first served
                del self._first_served[next(iter(self._first_served))]
        self._weight_version = version

    def serves_at_least(self, required: str) -> bool:
        """Whether the current weights are `required` or newer.

        Versions are ordered by when this server first served them, not by
        name: `required` is older when it was first served before the
        current version was (so after a rollback X -> W, W being older, X
        is refused). Names that end in a number with the same prefix ("12",
        "step-12") must also compare so by that number (a rollback to an
        older step never served here is refused too). A name never served
        here is older only by that number rule."""
        current = self._weight_version
        if required == current:
            return True
        a, b = split_number(required), split_number(current)
        by_number = None  # the number rule, where both names have one with one prefix
        if a and b and a[0] == b[0]:  # (linear in the names' length: core/weight_versions.py)
            by_number = number_at_least(b[1], a[1])
        was, now = self._first_served.get(required), self._first_served.get(current)
        if was is None or now is None:
            return bool(by_number)
        return was < now and by_number is not False

    async def cancel_background(self) -> None:
        tasks = list(self.background)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def admit(self) -> None:
        if not self.serving:
            raise Unavailable("the server is not serving (starting up or shutting down)",
                              reason="NOT_SERVING")

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Admit one generation call and count it while it runs."""
        self.admit()
        self.active_calls += 1
        self.idle.clear()
        try:
            yield
        finally:
            self.active_calls -= 1
            if self.active_calls == 0:
                self.idle.set()
