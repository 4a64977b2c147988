"""A gateway with --control in front of a fake-engine server with an admin
key: what the trainer tests (issue #28, docs/trainers.md) drive."""

from __future__ import annotations

import collections.abc
import contextlib

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import ThreadServer
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine

ADMIN_KEY = "trainer-admin-key"
ADMIN = {"authorization": f"Bearer {ADMIN_KEY}"}
MODEL = "fake-model"


@contextlib.contextmanager
def trainer_gateway(**settings: object) -> collections.abc.Iterator[tuple[str, FakeEngine]]:
    """(the gateway's base URL, the engine) for the block."""
    engine = FakeEngine(max_model_len=512)
    server = ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                         served_model_name=MODEL, enable_control=True,
                                         admin_api_key=ADMIN_KEY, **settings),  # type: ignore[arg-type]
                          engine).start()
    envoy = start_gateway(server.address, control=True)
    try:
        yield envoy.url, engine
    finally:
        stop_gateway(envoy)
        server.stop()
