"""The fake engine's pooling half (a test double of the vLLM adapter's
`pool`): embeddings are DIMENSIONS numbers per input made from its ids,
normalized (L2) unless use_activation is false, `dimensions` taking the
first ones as a matryoshka model does (any 1..DIMENSIONS); classification
scores LABELS' classes from the ids, softmaxed unless use_activation is
false, labelled by the top class; token-level tasks answer a row per
token (the same over the ids up to it). The model's pooling task is the
first of `pool_tasks`, the only one served (vLLM's rule)."""

from __future__ import annotations

import asyncio
import math

from tokenwire.server.core.domain import PoolOutput, PoolRequest
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.validation import check_pooling_task

DIMENSIONS = 8
LABELS = ("negative", "neutral", "positive")


def _raw(ids: list[int], size: int) -> list[float]:
    return [math.sin(sum((i + 1) * (t + k + 1) for i, t in enumerate(ids)) * 0.001)
            for k in range(size)]


def fake_embedding(ids: list[int], dimensions: int | None = None,
                   normalize: bool = True) -> list[float]:
    """What FakePooling answers for an embedding of `ids`."""
    raw = _raw(ids, DIMENSIONS)
    if normalize:
        norm = math.sqrt(sum(x * x for x in raw)) or 1.0
        raw = [x / norm for x in raw]
    return raw[:dimensions] if dimensions else raw


def fake_scores(ids: list[int], activation: bool = True) -> list[float]:
    """What FakePooling answers for a classification of `ids`."""
    raw = [3 * x for x in _raw(list(reversed(ids)), len(LABELS))]
    if not activation:
        return raw
    top = max(raw)
    exps = [math.exp(x - top) for x in raw]
    return [x / sum(exps) for x in exps]


class FakePooling:
    """Mixed into FakeEngine; tests make an engine a pooling one."""

    pooling = False
    pool_delay = 0.0  # seconds an input takes (cancellation tests)
    pool_tasks: tuple[str, ...] = ("embed", "classify", "token_embed", "token_classify")

    async def pool(self, request: PoolRequest) -> PoolOutput:
        if request.dimensions is not None and not 1 <= request.dimensions <= DIMENSIONS:
            raise InvalidArgument(
                f"dimensions: the model only supports dimensions in range [1, {DIMENSIONS}], "
                f"got {request.dimensions}", param="dimensions", reason="VALUE_OUT_OF_RANGE")
        self.pooled.append(request)
        if self.pool_delay:
            await asyncio.sleep(self.pool_delay)
        activation = request.use_activation is not False
        task = request.task or self.pool_tasks[0]
        check_pooling_task(task, self.pool_tasks[0], self.pool_tasks,
                           named=request.only_pooling_task)
        ids = request.prompt_token_ids
        if task.startswith("token_"):
            one = fake_scores if task == "token_classify" else (
                lambda prefix, act: fake_embedding(prefix, request.dimensions, act))
            rows = [one(ids[:k + 1], activation) for k in range(len(ids))]
            return PoolOutput([x for row in rows for x in row], rows=rows)
        if task == "classify":
            scores = fake_scores(request.prompt_token_ids, activation)
            return PoolOutput(scores, LABELS[scores.index(max(scores))])
        return PoolOutput(fake_embedding(request.prompt_token_ids, request.dimensions,
                                         activation))

    @property
    def pooled(self) -> list[PoolRequest]:
        """The pooling requests this engine received, in order."""
        found = self.__dict__.get("_pooled")
        if found is None:
            found = self.__dict__["_pooled"] = []
        return found
