"""The pooling fronts (CreateEmbedding, Classify, Pool, CohereEmbed, Score,
Rerank): each one `PooledFront` over the same pooled step, as vLLM's
`PoolingServing` template: `prepare` (the body read and tokenized, off the
event loop when heavy, into a plan holding one engine request per input),
the step (every input pooled at once: `run_pool`), and `respond` (the
route's own answer shape, service.py, cohere.py, scores.py)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from tokenwire.server.core.domain import Caller, RunOutcome
from tokenwire.server.core.pooling import PoolOutput
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.front import PreparedFront
from tokenwire.server.inference.pooling import cohere, scores, service


class PooledFront(PreparedFront[Any, Any]):
    """A pooling route: its plan prepared by `prepare` (PreparedFront's
    plan), run by the shared pooled step, answered by `respond`."""

    def __init__(self, name: str,
                 prepare: Callable[[DataPlane, Any, Caller], Awaitable[Any]],
                 respond: Callable[[DataPlane, Any, list[PoolOutput]], Awaitable[Any]]):
        super().__init__(name, prepare)
        self._respond = respond

    async def run(self, plane: DataPlane, plan: Any, outcome: RunOutcome | None = None) -> Any:
        found = await service.run_pool(plan.requests, plane.engine)
        return await self._respond(plane, plan, found)


def _task(task: str | None) -> Callable[[DataPlane, Any, Caller], Awaitable[Any]]:
    return lambda plane, req, caller: service.prepare(plane, req, caller, task)


def _sync(respond: Callable[[Any, list[PoolOutput]], Any]
          ) -> Callable[[DataPlane, Any, list[PoolOutput]], Awaitable[Any]]:
    async def answer(plane: DataPlane, plan: Any, found: list[PoolOutput]) -> Any:
        return respond(plan, found)
    return answer


async def _pool_plan(plane: DataPlane, req: Any, caller: Caller) -> Any:
    return await service.rows_fit(plane, await service.prepare(plane, req, caller, None))


EMBEDDINGS = PooledFront("embeddings", _task("embed"), _sync(service.embedding_response))
CLASSIFY = PooledFront("classify", _task("classify"), _sync(service.classify_response))
POOL = PooledFront("pooling", _pool_plan, service.pool_response)
COHERE_EMBED = PooledFront("cohere_embed", cohere.prepare, _sync(cohere.respond))
SCORE = PooledFront("score", scores.prepare, scores.score_response)
RERANK = PooledFront("rerank", scores.prepare, scores.rerank_response)
