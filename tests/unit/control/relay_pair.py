"""Two fake-engine servers in this test process standing for serving
processes 0 and 1 of one launch (--api-server-count 2 with control): each
with the launch's relay token and both private sockets."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.servers import ThreadServer
from tokenwire.server.control.relay import TOKEN_ENV
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine

TOKEN = "relay-token-of-this-test-launch"


def start_pair(folder: Path, **extra: object) -> list[ThreadServer]:
    """Processes 0 and 1 with the launch's relay token in their environment,
    as frontends.control_sockets gives it."""
    sockets = (str(folder / "p0.sock"), str(folder / "p1.sock"))
    servers = []
    with pytest.MonkeyPatch.context() as env:
        env.setenv(TOKEN_ENV, TOKEN)
        for index in (0, 1):
            settings = ServerSettings(engine="fake", port=0, max_model_len=512,
                                      enable_control=True, control_sockets=sockets,
                                      process_index=index, unhealthy_while_paused=True,
                                      **extra)  # type: ignore[arg-type]
            servers.append(ThreadServer(settings, FakeEngine(max_model_len=512,
                                                             token_delay=0.004)).start())
    return servers
