"""The vLLM adapter's control half maps engine death during a load to
UNAVAILABLE ENGINE_DEAD (as a generation call does), not to a failed load.
A stand-in AsyncLLM raises vLLM's own exceptions: no engine is started."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from tokenwire.server.core import errors
from tokenwire.server.engine.vllm.control import VllmControl


class RaisingLLM:
    def __init__(self, exc: BaseException):
        self.exc = exc

    async def collective_rpc(self, method: str, **kw: Any) -> None:
        raise self.exc

    async def start_weight_update(self) -> None:
        raise self.exc


def control(exc: BaseException) -> VllmControl:
    c = VllmControl()
    c._llm = RaisingLLM(exc)
    return c


def test_engine_death_during_a_load_is_unavailable_engine_dead() -> None:
    from vllm.v1.engine.exceptions import EngineDeadError

    for call in (lambda c: c.reload_weights("/ckpt"), lambda c: c.start_weight_update()):
        with pytest.raises(errors.Unavailable) as exc:
            asyncio.run(call(control(EngineDeadError())))
        assert exc.value.reason == "ENGINE_DEAD"


def test_a_load_that_fails_otherwise_is_weight_load_failed() -> None:
    with pytest.raises(errors.FailedPrecondition) as exc:
        asyncio.run(control(AssertionError("shape mismatch")).reload_weights("/ckpt"))
    assert exc.value.reason == "WEIGHT_LOAD_FAILED" and "shape mismatch" in exc.value.message
