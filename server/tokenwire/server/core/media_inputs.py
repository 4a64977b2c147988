"""The engine-neutral media of a token-in prompt: a media part to load
and process, a client-processed feature item, and the prepared prompt the
engine runs (expanded ids, placeholder ranges, its own input)."""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
from collections.abc import Iterator
from typing import Any

# Set while a request is planned whose prepared media outlive the call (a
# Session turn kept for continuation, a rendered request sent back later):
# the engine then keeps every item's tensors in its prepared input, not a
# reference to its processor cache, which may have dropped the item by the
# time the input runs again.
_KEEP_TENSORS: contextvars.ContextVar[bool] = contextvars.ContextVar("keep_media_tensors",
                                                                     default=False)


def keeps_tensors() -> bool:
    """Whether media prepared now must hold every item's tensors."""
    return _KEEP_TENSORS.get()


@contextlib.contextmanager
def keeping_tensors() -> Iterator[None]:
    """Media prepared inside hold every item's tensors (keeps_tensors)."""
    token = _KEEP_TENSORS.set(True)
    try:
        yield
    finally:
        _KEEP_TENSORS.reset(token)


@dataclasses.dataclass
class MediaPart:
    """One media item of a token-in prompt (Generate's content_parts): a
    URL (data:, or http(s) the policy allowed) or bytes with their MIME type."""

    modality: str  # "image"
    param: str  # the request field it came from (errors name it)
    url: str = ""
    data: bytes = b""
    mime_type: str = ""
    uuid: str | None = None


@dataclasses.dataclass
class FeatureItem:
    """One media item processed by the client (vLLM's features entry):
    its hash, its placeholder range in the prompt ids, vLLM's serialized
    kwargs item."""

    modality: str
    hash: str
    offset: int
    length: int
    kwargs: bytes


@dataclasses.dataclass
class MultimodalPrompt:
    """A prompt with media, prepared by the engine: the expanded ids, each
    modality's placeholder ranges (offset, length) in them, and the
    engine's own prepared input (opaque above the engine)."""

    prompt_token_ids: list[int]
    placeholders: dict[str, list[tuple[int, int]]]
    engine_input: Any = None
    items: int = 0
    # Bytes the engine's prepared input holds (its processed tensors), for
    # what keeps it (a Session's continuation store); 0 when unknown.
    nbytes: int = 0

    def extended(self, prompt_token_ids: list[int]) -> MultimodalPrompt:
        """The same media under a longer prompt that starts with this one's
        ids (a Session's next turn): the placeholders stay where they are.
        The engine runs `prompt_token_ids`, not what its input held."""
        if prompt_token_ids[:len(self.prompt_token_ids)] != self.prompt_token_ids:
            raise ValueError("a continued prompt starts with the earlier prompt's ids")
        return dataclasses.replace(self, prompt_token_ids=list(prompt_token_ids))
