"""Token-exact speculative prefill (nvext.agent_hints.speculative_prefill).

After a chat turn finishes, warm the KV cache with the exact prefix the next
turn will start with: ``prompt_token_ids + completion_token_ids`` plus what
the chat template renders after the completion before any next message
(ChatML: ``\\n``; also ``<|im_end|>`` when the completion stopped without it).
It runs as a background engine request (max_tokens=1, the same cache salt,
low priority, the turn's images where they were), started after the
response went out, tracked on the serving state so GetStats counts it and
shutdown cancels it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Protocol

from tokenwire.server.core.domain import Engine, EngineRequest, GenerationParams, RenderOptions
from tokenwire.server.core.errors import TokenwireError
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.offload import Offload
from tokenwire.server.inference.turns import TurnTemplates

log = logging.getLogger("tokenwire.prefill")


class ChatPlan(Protocol):
    """What a prefill reads of a chat plan (inference/chat/request.py)."""

    request: EngineRequest
    render: RenderOptions
    speculative_prefill: bool


class Prefiller:
    def __init__(
        self, engine: Engine, settings: ServerSettings, state: ServingState, turns: TurnTemplates
    ):
        self._engine = engine
        self._settings = settings
        self._state = state
        self._turns = turns
        self._priority = (
            settings.speculative_prefill_priority if settings.scheduling_policy == "priority" else 0
        )

    def wanted(self, plan: ChatPlan) -> bool:
        return (self._settings.speculative_prefill and plan.speculative_prefill
                and plan.request.params.n == 1)

    def next_turn_prefix(
        self, plan: ChatPlan, prompt: Sequence[int], completion: Sequence[int]
    ) -> list[int]:
        """The next turn's prefix (probing the turn template renders it:
        called where `start` puts it)."""
        try:
            after = self._turns.get(plan.render).after(completion)
        except TokenwireError:  # a template we cannot probe: prefill what is known
            after = []
        return [*prompt, *completion, *after]

    def start(self, plan: ChatPlan, prompt: Sequence[int], completion: Sequence[int],
              offload: Offload) -> bool:
        """Start a background prefill of the next turn's prefix; True if started.
        The turn template is probed where the request's rendering ran
        (`offload`): with the request's own template on the template thread
        (time bound), with tools or template kwargs on the prompt thread,
        both with their queue limits (a full queue skips the prefill);
        inline for the server's template alone (probed once, then cached)."""
        if not self.wanted(plan) or not self._state.serving:
            return False
        if len(prompt) + len(completion) >= self._engine.max_model_len:  # no room for one token
            return False
        task = asyncio.create_task(self._run(plan, prompt, completion, offload))
        self._state.background.add(task)
        task.add_done_callback(self._state.background.discard)
        return True

    async def _run(self, plan: ChatPlan, prompt: Sequence[int], completion: Sequence[int],
                   offload: Offload) -> None:
        render = plan.render
        try:
            prefix = await offload.run(
                lambda: self.next_turn_prefix(plan, prompt, completion),
                own_template=bool(render.chat_template),
                heavy=bool(render.tools or render.template_kwargs),
            )
            if len(prefix) >= self._engine.max_model_len:  # no room for the one token
                return
            media = plan.request.multimodal
            if media is not None:  # the turn's images, where they were: the blocks' keys
                if prefix[:len(media.prompt_token_ids)] != media.prompt_token_ids:
                    return
                media = media.extended(prefix)
            request = EngineRequest(
                request_id=f"prefill-{uuid.uuid4().hex}",
                prompt_token_ids=prefix,
                params=GenerationParams(max_tokens=1, temperature=0.0, detokenize=False),
                cache_salt=plan.request.cache_salt,
                priority=self._priority,
                stream=False,
                lora=plan.request.lora,  # the prefix cache is per adapter
                tenant=plan.request.tenant,  # admitted under its tenant's caps
                salt_by_version=plan.request.salt_by_version,  # warms the key the next turn reads
                multimodal=media,
            )
            async for _ in self._engine.generate(request):
                pass
        except TokenwireError as exc:  # advisory work: never fail anything else
            log.warning("speculative prefill after %s failed: %s", plan.request.request_id,
                        exc.message)
