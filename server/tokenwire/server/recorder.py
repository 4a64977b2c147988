"""An engine wrapper that remembers what one request consumed and produced,
so the session and speculative prefill can reuse the serving functions
(run_chat, stream_chat, run_generate, stream_generate) unchanged."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, cast

from tokenwire.server.domain import Engine, EngineOutput, EngineRequest


class Recorder:
    """Delegates to an engine; records the prompt and per-choice ids."""

    def __init__(self, engine: Engine):
        self._engine = engine
        self.prompt_ids: list[int] = []
        self.completions: dict[int, list[int]] = {}
        self.finished = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    @property
    def engine(self) -> Engine:
        """This recorder, typed as the engine it wraps."""
        return cast(Engine, self)

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        self.prompt_ids = list(request.prompt_token_ids)
        async for out in self._engine.generate(request):
            if out.prompt_token_ids:
                self.prompt_ids = out.prompt_token_ids
            for c in out.choices:
                ids = self.completions.setdefault(c.index, [])
                if request.stream:
                    ids.extend(c.token_ids)  # deltas
                else:
                    ids[:] = c.token_ids  # final output: the whole completion
            self.finished = out.finished
            yield out

    def completion_list(self) -> list[list[int]]:
        return [self.completions.get(i, []) for i in range(max(self.completions, default=-1) + 1)]
