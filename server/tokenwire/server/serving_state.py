"""Whether the server accepts work, and what is in flight: shared by the
servicer, the data plane, sessions and speculative prefill."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator

from tokenwire.server.errors import Unavailable


class ServingState:
    """Whether the server accepts work, and how many calls are in flight."""

    def __init__(self) -> None:
        self.serving = False
        self.active_calls = 0
        self.started = int(time.time())
        self.sessions = 0
        self.background: set[asyncio.Task[None]] = set()  # speculative prefills
        # Kept by the control plane: the weight version new tokens are
        # attributed to, and whether generation is paused.
        self.weight_version = ""
        self.paused = False

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
