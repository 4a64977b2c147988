"""A FakeEngine that misbehaves on request, for gateway tests.

Words in the prompt pick the behaviour:
- ``FAIL_MIDSTREAM``: raise INTERNAL after three outputs (a stream that started);
- ``OVERLOAD`` / ``ENGINE_DOWN`` / ``CRASH``: raise RESOURCE_EXHAUSTED /
  UNAVAILABLE / a plain bug (INTERNAL) before any output;
- ``SLOW``: 0.1 s per generated token;
- ``ECHO<<text>>``: answer ``text`` instead of the fixed reply (JSON-tricky
  text exercises the gateway's SSE re-framing).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

from tokenwire.server.core import errors
from tokenwire.server.core.domain import EngineOutput, EngineRequest
from tokenwire.server.engine.fake.engine import EOS, FakeEngine

SLOW_SECONDS_PER_TOKEN = 0.1
ECHO = re.compile(r"ECHO<<(.*?)>>", re.S)


class FlakyEngine(FakeEngine):
    def _prompt(self, request: EngineRequest) -> str:
        return self.decode(request.prompt_token_ids)

    def _plan_choice(self, request: EngineRequest, index: int) -> list[int]:
        echo = ECHO.search(self._prompt(request))
        if echo is None:
            return super()._plan_choice(request, index)
        return [*self.encode(echo.group(1), add_special_tokens=False), EOS]

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        prompt = self._prompt(request)
        if "OVERLOAD" in prompt:
            raise errors.ResourceExhausted("the engine queue is full", reason="QUEUE_FULL")
        if "ENGINE_DOWN" in prompt:
            raise errors.Unavailable("the engine died", reason="ENGINE_DEAD")
        if "CRASH" in prompt:
            raise RuntimeError("a bug in the engine adapter")
        slow = "SLOW" in prompt
        outputs = 0
        try:
            async for out in super().generate(request):
                if slow:
                    tokens = max(len(c.token_ids) for c in out.choices) if out.choices else 1
                    await asyncio.sleep(SLOW_SECONDS_PER_TOKEN * tokens)
                yield out
                outputs += 1
                if "FAIL_MIDSTREAM" in prompt and outputs == 3:
                    raise errors.Internal("the engine failed mid-stream", reason="INTERNAL")
        except (asyncio.CancelledError, GeneratorExit):
            # Cancelled while in this wrapper (the base class records
            # cancellations that reach its own loop).
            if request.request_id not in self.aborted:
                self.aborted.append(request.request_id)
            raise
