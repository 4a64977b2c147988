"""A planted engine death for `tokenwire up` tests: the fake engine of
every `tokenwire serve` started with `planted_env(tmp_path)` dies, as vLLM's
engine core does on a fatal error, on a request whose prompt holds TRIGGER:
that request and every one in flight fail with UNAVAILABLE ENGINE_DEAD,
and its health probe fails from then on, so the server's watchdog reports
NOT_SERVING and `tokenwire serve` exits 1 (runtime/app.py).

The servers are subprocesses of `tokenwire up`: a `sitecustomize` module
on their PYTHONPATH patches FakeEngine as each interpreter starts."""

from __future__ import annotations

import os
import pathlib
from collections.abc import AsyncIterator

from tests.servers import ROOT

TRIGGER = "KILL_THE_ENGINE"


def plant() -> None:
    from tokenwire.server.core import errors
    from tokenwire.server.core.domain import EngineOutput, EngineRequest
    from tokenwire.server.engine.fake.engine import FakeEngine

    generate = FakeEngine.generate

    def dead() -> errors.Unavailable:
        return errors.Unavailable("the engine died: planted by the test", reason="ENGINE_DEAD")

    async def dying(self: FakeEngine, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        if TRIGGER in self.decode(request.prompt_token_ids):
            self.healthy = False
        if not self.healthy:
            raise dead()
        async for out in generate(self, request):
            if not self.healthy:  # died while this one ran
                raise dead()
            yield out

    FakeEngine.generate = dying  # type: ignore[method-assign]


def planted_env(folder: pathlib.Path) -> dict[str, str]:
    """The environment for `tokenwire up` whose servers' engines can die."""
    (folder / "sitecustomize.py").write_text(
        "from tests.gateway.dying_engine import plant\nplant()\n")
    path = os.pathsep.join(p for p in (str(folder), str(ROOT), os.environ.get("PYTHONPATH", ""))
                           if p)
    return {**os.environ, "PYTHONPATH": path}
