"""Next-turn suffixes, token-exact: what a chat template renders after an
assistant completion, so that turn N+1 is `prompt + completion + suffix`
without re-rendering (or re-tokenizing) the history.

The template is probed once per rendering configuration with a placeholder
conversation ``[user, assistant]``: rendered with the assistant turn left
open (continue_final_message) and closed, the difference is what the
template puts after an assistant's content (ChatML: ``<|im_end|>`` and
``\\n``). New messages are rendered after the closed placeholder and cut off
at its end. When the completion already ends with the template's
end-of-turn id (it sampled EOS), that id is not repeated.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from collections.abc import Sequence
from typing import Any

from tokenwire.server.core.domain import Engine, RenderOptions
from tokenwire.server.core.errors import InvalidArgument

PLACEHOLDER = [
    {"role": "user", "content": "tokenwire-turn-user"},
    {"role": "assistant", "content": "tokenwire-turn-assistant"},
]
MAX_CACHED_TEMPLATES = 64


@dataclasses.dataclass(frozen=True)
class TurnTemplate:
    """What one rendering configuration puts around an assistant turn."""

    closed: tuple[int, ...]  # the placeholder conversation, assistant turn closed
    close_ids: tuple[int, ...]  # what follows an assistant's content

    def following(self, full: Sequence[int], completion: Sequence[int], param: str) -> list[int]:
        """The ids after `completion` when the placeholder conversation
        followed by next messages rendered as `full`."""
        closed = list(self.closed)
        if list(full[: len(closed)]) != closed:
            raise InvalidArgument(
                "the chat template renders earlier turns differently when more messages "
                "follow, so the history cannot be kept token-exact; send "
                "continuation.suffix_token_ids instead",
                param=param, reason="TEMPLATE_NOT_INCREMENTAL",
            )
        return self.after(completion) + list(full[len(closed):])

    def after(self, completion: Sequence[int]) -> list[int]:
        """The ids the template renders after this completion, before the
        next message (the end-of-turn id only when the completion lacks it)."""
        close = list(self.close_ids)
        if completion and close and completion[-1] == close[0]:
            return close[1:]
        return close


class TurnTemplates:
    """Probed turn templates of one engine, cached per configuration.
    Probing renders the template: callers run it where a request's
    rendering runs (inference/offload.py: off the event loop when the
    request brings its own template or large tools)."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self._cache: dict[str, TurnTemplate] = {}

    @staticmethod
    def key(options: RenderOptions) -> str:
        """The cache key of a rendering configuration: a digest of its
        template, template kwargs and tools (a fixed 64 characters, not
        their text: tools may be megabytes)."""
        text = json.dumps(
            [options.chat_template, options.template_kwargs, options.tools],
            sort_keys=True, default=str,
        )
        return hashlib.sha256(text.encode()).hexdigest()

    def get(self, options: RenderOptions, param: str = "continuation.messages") -> TurnTemplate:
        key = self.key(options)
        found = self._cache.get(key)
        if found is not None:
            return found

        def render(**flags: Any) -> list[int]:
            return self._engine.render_chat(
                PLACEHOLDER, dataclasses.replace(options, **flags)
            )

        closed = render(add_generation_prompt=False, continue_final_message=False)
        opened = render(add_generation_prompt=False, continue_final_message=True)
        if closed[: len(opened)] != opened:
            raise InvalidArgument(
                "the chat template renders a closed assistant turn that does not extend the "
                "open one, so it cannot render a next-turn suffix; send "
                "continuation.suffix_token_ids instead",
                param=param, reason="TEMPLATE_NOT_INCREMENTAL",
            )
        template = TurnTemplate(tuple(closed), tuple(closed[len(opened):]))
        if len(self._cache) >= MAX_CACHED_TEMPLATES:
            self._cache.clear()
        self._cache[key] = template
        return template

    def suffix(
        self, options: RenderOptions, completion: Sequence[int], messages: list[dict[str, Any]],
        param: str = "continuation.messages",
    ) -> list[int]:
        """The ids that follow `completion` when `messages` come next."""
        template = self.get(options, param)
        full = self._engine.render_chat(PLACEHOLDER + messages, options)
        return template.following(full, completion, param)


_PLACED = re.compile(r"\bmessages\[(\d+)\]")


def placed_error(err: InvalidArgument, prefix: str = "") -> InvalidArgument:
    """An error of the engine's rendering of PLACEHOLDER + next messages
    (with images), naming the field where it sits in the caller's messages
    (under `prefix`, e.g. "continuation.")."""
    def name(text: str) -> str:
        return _PLACED.sub(lambda m: f"{prefix}messages[{int(m[1]) - len(PLACEHOLDER)}]", text)

    param = name(err.param or "messages")
    if not param.startswith(prefix):
        param = prefix + param
    return InvalidArgument(name(err.message), param=param, reason=err.reason)
