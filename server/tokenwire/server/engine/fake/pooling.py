"""The fake engine's pooling half (a test double of the vLLM adapter's
`pool`): embeddings are DIMENSIONS numbers per input made from its ids,
normalized (L2) unless use_activation is false, `dimensions` taking the
first ones as a matryoshka model does (any 1..DIMENSIONS); classification
scores LABELS' classes from the ids, softmaxed unless use_activation is
false, labelled by the top class; token-level tasks answer a row per
token (the same over the ids up to it), as an array (float64: the fake's
numbers exactly), as the adapter answers the engine's. The model's pooling task is the
first of `pool_tasks`, the only one served (vLLM's rule).

Scoring as vLLM's: a classifier with one label (`labels`) is a
cross-encoder (the pair's prompt: the query's ids with BOS, then the
document's, segment ids 0 then 1; the score its sigmoid), an embedding
model a bi-encoder (cosine), a token-embedding one late-interaction
(MaxSim)."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.pooling import PoolOutput, PoolRequest
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


def fake_scores(ids: list[int], activation: bool = True, count: int = len(LABELS)
                ) -> list[float]:
    """What FakePooling answers for a classification of `ids` (`count`
    classes; one class: a cross-encoder's score, sigmoid as vLLM's)."""
    raw = [3 * x for x in _raw(list(reversed(ids)), count)]
    if not activation:
        return raw
    if count == 1:
        return [1 / (1 + math.exp(-raw[0]))]
    top = max(raw)
    exps = [math.exp(x - top) for x in raw]
    return [x / sum(exps) for x in exps]


class FakePooling:
    """Mixed into FakeEngine; tests make an engine a pooling one."""

    pooling = False
    pool_delay = 0.0  # seconds an input takes (cancellation tests)
    pool_tasks: tuple[str, ...] = ("embed", "classify", "token_embed", "token_classify")
    labels: tuple[str, ...] = LABELS  # the classifier's; one: a cross-encoder
    instructions: dict[str, str] = {}  # Cohere input_type -> prompt prefix

    def task_instructions(self) -> dict[str, str]:
        return dict(self.instructions)

    def has_chat_template(self) -> bool:
        return True  # (ChatML)

    async def token_width(self, task: str, dimensions: int | None) -> int | None:
        task = task or self.pool_tasks[0]
        if task == "token_embed":
            return dimensions or DIMENSIONS
        return len(self.labels) if task == "token_classify" else None

    async def score_type(self) -> str | None:
        if not self.pooling:
            return None
        task = self.pool_tasks[0]
        if task == "classify":
            return "cross-encoder" if len(self.labels) == 1 else None
        return {"embed": "bi-encoder", "token_embed": "late-interaction"}.get(task)

    def _cut(self, ids: list[int], truncate: int | None, side: str | None) -> slice:
        keep = self.max_model_len if truncate == -1 else truncate  # type: ignore[attr-defined]
        if keep is None or len(ids) <= keep:
            return slice(None)
        return slice(len(ids) - keep, None) if side == "left" else slice(None, keep)

    def pooling_tokens(self, text: str, *, add_special_tokens: bool, truncate: int | None,
                       side: str | None) -> list[int]:
        ids = self.encode(text, add_special_tokens=add_special_tokens)  # type: ignore[attr-defined]
        return list(ids[self._cut(ids, truncate, side)])

    def score_prompt(self, query: str, document: str, *, max_query_tokens: int = 0,
                     max_doc_tokens: int = 0, template_kwargs: dict[str, Any] | None = None,
                     truncate: int | None = None, side: str | None = None,
                     ) -> tuple[list[int], list[int] | None]:
        if max_query_tokens:
            query = self.truncate_text(query, max_query_tokens)
        if max_doc_tokens:
            document = self.truncate_text(document, max_doc_tokens)
        first = self.encode(query, add_special_tokens=True)  # type: ignore[attr-defined]
        second = self.encode(document, add_special_tokens=False)  # type: ignore[attr-defined]
        ids, types = first + second, [0] * len(first) + [1] * len(second)
        cut = self._cut(ids, truncate, side)
        return ids[cut], types[cut]

    def truncate_text(self, text: str, max_tokens: int) -> str:
        ids = self.encode(text, add_special_tokens=False)  # type: ignore[attr-defined]
        return str(self.decode(ids[:max_tokens]))  # type: ignore[attr-defined]

    def similarity(self, query: PoolOutput, document: PoolOutput) -> float:
        if query.rows is not None and document.rows is not None:  # MaxSim, on the arrays
            return float((query.rows @ document.rows.T).max(axis=1).sum())
        dot = sum(a * b for a, b in zip(query.data, document.data, strict=True))
        norms = (math.sqrt(sum(a * a for a in query.data))
                 * math.sqrt(sum(b * b for b in document.data)))
        return dot / norms if norms else 0.0

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
            import numpy as np

            rows = np.array([one(ids[:k + 1], activation) for k in range(len(ids))])
            return PoolOutput([], rows=rows.reshape(len(ids), -1))
        if task == "classify":
            ids = request.prompt_token_ids
            if request.token_type_ids is not None:  # the segments count, as a BERT's do
                ids = [t + 7 * s for t, s in zip(ids, request.token_type_ids, strict=True)]
            scores = fake_scores(ids, activation, len(self.labels))
            return PoolOutput(scores, self.labels[scores.index(max(scores))])
        return PoolOutput(fake_embedding(request.prompt_token_ids, request.dimensions,
                                         activation))

    @property
    def pooled(self) -> list[PoolRequest]:
        """The pooling requests this engine received, in order."""
        found = self.__dict__.get("_pooled")
        if found is None:
            found = self.__dict__["_pooled"] = []
        return found
