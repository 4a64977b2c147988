"""Chat messages with images, for vLLM: the server's URL rules checked
(core/multimodal.py, with vLLM's --allowed-media-domains and
--allowed-local-media-path), then vLLM's own chat renderer parses the
parts, loads the images, applies the chat template and runs the served
model's multimodal processor, which expands each image into its
placeholder tokens. The result is the expanded prompt, its placeholder
ranges and the engine input that carries the processed images."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from tokenwire.server.core import multimodal as mm
from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.media_inputs import MultimodalPrompt, keeps_tensors
from tokenwire.server.engine.vllm.mm_families import ImageTokens
from tokenwire.server.engine.vllm.mm_features import kwargs_nbytes


class VllmChatMedia:
    """Image chat over one AsyncLLM's renderer (its model config, limits
    and processor)."""

    def __init__(self, llm: Any, content_format: str, template: str | None,
                 template_kwargs: dict[str, Any]):
        self._llm = llm
        config = llm.model_config
        self.enabled = bool(config.is_multimodal_model)
        self._domains = list(getattr(config, "allowed_media_domains", None) or [])
        self._local = str(getattr(config, "allowed_local_media_path", "") or "")
        self._format = content_format
        self._template = template
        self._kwargs = template_kwargs
        self._tokens = ImageTokens(llm)

    def _limit(self) -> int:
        try:
            return int(self._llm.model_config.get_multimodal_config()
                       .get_limit_per_prompt("image"))
        except Exception:  # the model takes no images
            return 0

    def _check(self, messages: list[dict[str, Any]]) -> int:
        """The parts' URLs under the server's rules, each data URL's header
        and pixels, the model's image limit; sync (CPU: off the loop unless
        the data URLs are small, core/multimodal.INLINE_INSPECT_CHARS)."""
        parts = list(mm.image_parts(messages))
        if not self.enabled:
            raise InvalidArgument(f"{parts[0][0]}: the served model takes text only (no "
                                  "image inputs)", param=parts[0][0],
                                  reason="UNSUPPORTED_MODALITY")
        limit = self._limit()
        if len(parts) > limit:
            param = parts[limit][0]
            raise InvalidArgument(f"{param}: {len(parts)} images, at most {limit} per prompt "
                                  "(--limit-mm-per-prompt)", param=param,
                                  reason="TOO_MANY_ITEMS")
        budget = mm.ImageBudget(self._llm.model_config.max_model_len, self._tokens.of)
        for param, url in parts:
            mm.check_allowed(f"{param}.image_url.url", url, self._domains, self._local)
            budget.inspect(f"{param}.image_url.url", url)
        return len(parts)

    async def render(self, messages: list[dict[str, Any]],
                     options: RenderOptions) -> MultimodalPrompt:
        """The expanded prompt of `messages` as vLLM renders it."""
        from vllm.renderers.params import ChatParams

        if self._tokens.ready and mm.data_url_chars(messages) <= mm.INLINE_INSPECT_CHARS:
            items = self._check(messages)  # a few small images: no thread hop
        else:
            items = await asyncio.to_thread(self._check, messages)
        kwargs: dict[str, Any] = {**self._kwargs, **options.template_kwargs,
                                  "add_generation_prompt": options.add_generation_prompt,
                                  "continue_final_message": options.continue_final_message}
        if options.tools:
            kwargs["tools"] = options.tools
        params = ChatParams(chat_template=options.chat_template or self._template,
                            chat_template_content_format=self._format,  # type: ignore[arg-type]
                            chat_template_kwargs=kwargs)
        renderer = self._llm.renderer
        # The length is checked by the caller against the expanded prompt.
        tok = dataclasses.replace(renderer.default_chat_tok_params, max_total_tokens=None)
        try:
            _, (engine_input,) = await renderer.render_chat_async(
                [messages], params, tok, skip_mm_cache=keeps_tensors())
        except (ValueError, TypeError, OSError, RuntimeError) as exc:
            raise InvalidArgument(f"messages: the images could not be processed: {exc}",
                                  param="messages", reason="MEDIA_INVALID") from exc
        places = {m: [(p.offset, p.length) for p in ranges]
                  for m, ranges in (engine_input.get("mm_placeholders") or {}).items()}
        return MultimodalPrompt(list(engine_input["prompt_token_ids"]), places,
                                engine_input=engine_input, items=items,
                                nbytes=kwargs_nbytes(engine_input))
