"""The worker methods the operator allowed (--collective-rpc-allow) and how
one is called: on every worker, bounded by the control timeout. Both a
CollectiveRpc call (plane.py) and a load through a worker's loader
(weights.py: prime-rl's update_weights_from_path) go through here."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

from tokenwire.server.control.checks import check_rpc_allowed
from tokenwire.server.core.engine_control import EngineControl
from tokenwire.server.core.errors import DeadlineExceeded


class WorkerMethods:
    """The allowed worker methods, and calls of them that cannot hold the
    control lock for good."""

    def __init__(self, engine: EngineControl, allowed: tuple[str, ...], *, timeout: float):
        self._engine = engine
        self._allowed = frozenset(allowed)  # --collective-rpc-allow
        self._timeout = timeout

    def allowed(self, method: str) -> bool:
        return method in self._allowed

    def check(self, method: str) -> str:
        """`method`, or PERMISSION_DENIED when the operator did not allow it."""
        return check_rpc_allowed(method, self._allowed)

    def call(self, method: str, args: list[Any], kwargs: dict[str, Any],
             rpc_timeout: float | None) -> Awaitable[list[Any]]:
        """A worker method the operator allowed (--collective-rpc-allow),
        bounded by the control timeout (or the caller's shorter rpc timeout):
        a method that hangs ends DEADLINE_EXCEEDED and releases the control
        lock instead of holding it for good (the worker may still run it)."""
        self.check(method)
        limit = self._timeout if rpc_timeout is None else min(rpc_timeout, self._timeout)

        async def bounded() -> list[Any]:
            try:
                return await asyncio.wait_for(
                    self._engine.collective_rpc(method, args, kwargs, limit), limit)
            except TimeoutError:
                raise DeadlineExceeded(
                    f"collective_rpc {method}: no result within {limit:.1f} s (the control "
                    "timeout); the control lock is released, the workers may still run it",
                    param="method", reason="COLLECTIVE_RPC_TIMEOUT") from None

        return bounded()
