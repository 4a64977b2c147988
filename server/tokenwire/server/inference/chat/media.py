"""A chat whose messages carry images: what the plan keeps of them
(`ChatMedia`), and the step after the plan is built that renders them
through the engine (its own chat renderer and multimodal processor, off
the event loop, admitted), so the plan runs the expanded prompt with its
length checked again and an unset max_tokens computed for it."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import EngineOutput, RenderOptions
from tokenwire.server.core.errors import InvalidArgument, Unavailable
from tokenwire.server.core.media_inputs import keeping_tensors
from tokenwire.server.inference.shared import sampling


@dataclasses.dataclass
class ChatMedia:
    """The template-ready messages with image parts and how to render them;
    the max_tokens field as asked (None: the window's rest)."""

    messages: list[dict[str, Any]]
    options: RenderOptions
    max_tokens_param: str
    max_tokens: int | None


def refuse_raw_prompt() -> InvalidArgument:
    return InvalidArgument("nvext.use_raw_prompt joins text contents: it takes no image parts",
                           param="nvext.use_raw_prompt", reason="FIELDS_CONFLICT")


async def render_media(engine: Any, plan: Any) -> None:
    """Render `plan`'s (a ChatPlan's) messages with their images (the engine's processor)
    and make the plan's engine request run the expanded prompt."""
    media = plan.media
    assert media is not None
    request = plan.request
    prepared = await engine.render_chat_media(media.messages, media.options,
                                              tenant=request.tenant)
    ids = prepared.prompt_token_ids
    v.prompt_fits("messages", len(ids), engine.max_model_len)
    request.params.max_tokens = v.max_tokens(media.max_tokens_param, media.max_tokens, len(ids),
                                             engine.max_model_len)
    sampling.check_min_tokens(request.params)
    request.prompt_token_ids = ids
    request.multimodal = prepared
    if plan.parsing is not None:
        request.reasoning_ended, request.reasoning_kwargs = plan.parsing.engine_reasoning(ids)


def chat_outputs(engine: Any, plan: Any) -> AsyncIterator[EngineOutput]:
    """The outputs of `plan` (a ChatPlan): engine.generate, and for a chat
    with images once more when vLLM failed it before any output with its
    retryable error (ENGINE_REQUEST_FAILED: its frontend's processor cache
    had drifted from the engine core's, and the frontend has dropped the
    drifted items, so rendering again sends them), rendered again keeping
    every item's tensors. Without images: no extra layer."""
    if plan.media is None:
        return engine.generate(plan.request)  # type: ignore[no-any-return]
    return _once_more(engine, plan)


async def _once_more(engine: Any, plan: Any) -> AsyncIterator[EngineOutput]:
    outputs = engine.generate(plan.request)
    try:
        try:
            first = await anext(outputs, None)
        except Unavailable as exc:
            if exc.reason != "ENGINE_REQUEST_FAILED":
                raise
            await outputs.aclose()
            with keeping_tensors():
                await render_media(engine, plan)
            outputs = engine.generate(plan.request)
            first = await anext(outputs, None)
        if first is None:
            return
        yield first
        async for out in outputs:
            yield out
    finally:
        await outputs.aclose()
