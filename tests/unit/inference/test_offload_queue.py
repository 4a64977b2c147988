"""The off-loop preparation queue is bounded (issue #23 item 6): with the
prompt thread busy and --max-offload-queue requests waiting for it, one
more large request is refused with RESOURCE_EXHAUSTED OFFLOAD_QUEUE_FULL
and a retry hint (as a full server refuses); small requests, prepared
inline, go on; once the queue drains, large requests are taken again."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from tests.rpc import chat_request
from tokenwire.server.core.domain import Caller, RenderOptions
from tokenwire.server.core.errors import ResourceExhausted
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.fronts import CHAT
from tokenwire.server.inference.offload import OFFLOAD_CHARS
from tokenwire.server.runtime.app import build_data_plane
from tokenwire.server.security.tenancy import Tenancy

LARGE = "y" * (OFFLOAD_CHARS + 1)  # prepared on the prompt thread


class BlockingEngine(FakeEngine):
    """Renders a large prompt only once the test lets it."""

    def __init__(self) -> None:
        super().__init__(max_model_len=100_000)
        self.go = threading.Event()

    def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
        if len(messages[-1]["content"]) > OFFLOAD_CHARS:
            assert self.go.wait(30)
        return super().render_chat(messages, options)


async def test_a_full_offload_queue_refuses_with_a_retry_hint() -> None:
    engine = BlockingEngine()
    settings = ServerSettings(engine="fake", max_model_len=100_000, max_offload_queue=2)
    plane = build_data_plane(engine, settings, ServingState(), Tenancy())
    large = chat_request(messages=[{"role": "user", "content": LARGE}], max_tokens=2)
    try:
        waiting = [asyncio.create_task(CHAT.plan(plane, large, caller=Caller(), stream=False))
                   for _ in range(2)]  # one on the thread, one queued behind it
        await asyncio.sleep(0)
        assert plane.offload.prompts.pending == 2
        with pytest.raises(ResourceExhausted) as info:
            await CHAT.plan(plane, large, caller=Caller(), stream=False)
        assert info.value.reason == "OFFLOAD_QUEUE_FULL" and info.value.retry_after
        # Small requests do not queue: they are prepared inline meanwhile.
        small = await CHAT.plan(plane, chat_request(max_tokens=2), caller=Caller(),
                                stream=False)
        assert small.request.prompt_token_ids
        engine.go.set()
        for plan in await asyncio.gather(*waiting):
            assert len(plan.request.prompt_token_ids) > OFFLOAD_CHARS
        assert plane.offload.prompts.pending == 0
        plan = await CHAT.plan(plane, large, caller=Caller(), stream=False)  # room again
        assert len(plan.request.prompt_token_ids) > OFFLOAD_CHARS
    finally:
        engine.go.set()
        plane.offload.shutdown()
