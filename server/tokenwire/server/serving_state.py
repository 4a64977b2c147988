"""Whether the server accepts work, and what is in flight: shared by the
servicer, the data plane, sessions and speculative prefill."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import time
from collections.abc import Awaitable, Callable, Iterator

from tokenwire.server.errors import Unavailable

_VERSION = re.compile(r"^(.*?)(\d+)$")


class ServingState:
    """Whether the server accepts work, and how many calls are in flight."""

    def __init__(self) -> None:
        self.serving = False
        self.active_calls = 0
        self.started = int(time.time())
        self.sessions = 0
        self.background: set[asyncio.Task[None]] = set()  # speculative prefills
        # Kept by the control plane: the weight version new tokens are
        # attributed to (and the ones before it), and whether generation is
        # paused.
        self._weight_version = ""
        self.earlier_versions: collections.deque[str] = collections.deque(maxlen=4096)
        self.paused = False
        # The update generation: +1 on every weight change (control plane).
        self.generation = 0
        # Set when another process runs control (control_relay.py): reads
        # the paused flag and version again.
        self.refresh: Callable[[], Awaitable[None]] | None = None

    @property
    def weight_version(self) -> str:
        return self._weight_version

    @weight_version.setter
    def weight_version(self, version: str) -> None:
        if version != self._weight_version and self._weight_version:
            self.earlier_versions.append(self._weight_version)
        self._weight_version = version

    def serves_at_least(self, required: str) -> bool:
        """Whether the current weights are `required` or newer: versions
        that end in a number with the same prefix ("12", "step-12") compare
        by that number; others are newer once this server has served them
        (the current one or an earlier one)."""
        current = self._weight_version
        if required == current:
            return True
        a, b = _VERSION.match(required), _VERSION.match(current)
        if a and b and a.group(1) == b.group(1):
            return int(b.group(2)) >= int(a.group(2))
        return required in self.earlier_versions

    async def cancel_background(self) -> None:
        tasks = list(self.background)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    def admit(self) -> None:
        if not self.serving:
            raise Unavailable("the server is not serving (starting up or shutting down)", reason="NOT_SERVING")

    @contextlib.contextmanager
    def call(self) -> Iterator[None]:
        """Admit one generation call and count it while it runs."""
        self.admit()
        self.active_calls += 1
        try:
            yield
        finally:
            self.active_calls -= 1
