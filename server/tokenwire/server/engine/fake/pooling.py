"""The fake engine's pooling half (a test double of the vLLM adapter's
`embed`): a deterministic embedding of DIMENSIONS numbers per input, made
from its ids, normalized (L2) unless use_activation is false; `dimensions`
takes the first ones as a matryoshka model does (any 1..DIMENSIONS)."""

from __future__ import annotations

import asyncio
import math

from tokenwire.server.core.domain import EmbedRequest
from tokenwire.server.core.errors import InvalidArgument

DIMENSIONS = 8


def fake_embedding(ids: list[int], dimensions: int | None = None,
                   normalize: bool = True) -> list[float]:
    """What FakePooling.embed answers for `ids` (tests compare with it)."""
    raw = [math.sin(sum((i + 1) * (t + k + 1) for i, t in enumerate(ids)) * 0.001)
           for k in range(DIMENSIONS)]
    if normalize:
        norm = math.sqrt(sum(x * x for x in raw)) or 1.0
        raw = [x / norm for x in raw]
    return raw[:dimensions] if dimensions else raw


class FakePooling:
    """Mixed into FakeEngine; tests make an engine a pooling one."""

    pooling = False
    embed_delay = 0.0  # seconds an embedding takes (cancellation tests)

    async def embed(self, request: EmbedRequest) -> list[float]:
        if request.dimensions is not None and not 1 <= request.dimensions <= DIMENSIONS:
            raise InvalidArgument(
                f"dimensions: the model only supports dimensions in range [1, {DIMENSIONS}], "
                f"got {request.dimensions}", param="dimensions", reason="VALUE_OUT_OF_RANGE")
        self.embedded.append(request)
        if self.embed_delay:
            await asyncio.sleep(self.embed_delay)
        return fake_embedding(request.prompt_token_ids, request.dimensions,
                              request.use_activation is not False)

    @property
    def embedded(self) -> list[EmbedRequest]:
        """The embed requests this engine received, in order."""
        found = self.__dict__.get("_embedded")
        if found is None:
            found = self.__dict__["_embedded"] = []
        return found
