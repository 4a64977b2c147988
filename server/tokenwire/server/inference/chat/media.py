"""A chat whose messages carry images: what the plan keeps of them
(`ChatMedia`), and the step after the plan is built that renders them
through the engine (its own chat renderer and multimodal processor, off
the event loop, admitted), so the plan runs the expanded prompt with its
length checked again and an unset max_tokens computed for it."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import EngineOutput, RenderOptions
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.inference.shared import sampling
from tokenwire.server.inference.shared.outputs import media_outputs
from tokenwire.server.inference.shared.token_media import prepare


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
    """The outputs of `plan` (a ChatPlan); a chat with images sent once more
    after vLLM's processor-cache drift (shared/outputs.media_outputs), its
    images rendered again (messages) or prepared again (nvext's
    content_parts; client features carry their tensors: never a reference)."""
    again: Callable[[], Awaitable[None]] | None = None
    if plan.media is not None:
        async def again() -> None:
            await render_media(engine, plan)
    elif plan.token_media is not None and plan.token_media.parts:
        async def again() -> None:
            param, asked = plan.max_tokens_asked
            await prepare(engine, plan.request, plan.token_media,
                          max_tokens_param=param, max_tokens=asked)
    return media_outputs(engine, plan.request, again)
