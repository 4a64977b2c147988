"""Envoy in front of a fake server on pygrpc-native's transport
(--grpc-transport native), for the gateway modules marked
`pytest.mark.transports` (tests/conftest.py): their `gateway` fixture is
this one on [native], the shared one (tests/gateway/conftest.py) on [aio]."""

from __future__ import annotations

import collections.abc
import contextlib

from tests.gateway.conftest import BODY_LIMIT, MODEL
from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.flaky_engine import FlakyEngine
from tests.servers import fake_serving
from tokenwire.gateway.process import EnvoyProcess


@contextlib.contextmanager
def native_gateway() -> collections.abc.Iterator[EnvoyProcess]:
    """The shared gateway's setup on a native server of its own (no
    --trust-tenant-header: with it the server would fall back to grpc.aio,
    runtime/transport.py; these modules name no tenant)."""
    engine = FlakyEngine(max_model_len=512, block_size=16)
    with fake_serving(engine, served_model_name=MODEL, grpc_transport="native") as server:
        assert server.transport == "native"
        envoy = start_gateway(server.address, max_request_bytes=BODY_LIMIT)
        try:
            yield envoy
        finally:
            stop_gateway(envoy)


@contextlib.contextmanager
def gateway_on(transport: str, shared: EnvoyProcess) -> collections.abc.Iterator[EnvoyProcess]:
    """The gateway for `transport`: the session's shared one on aio."""
    if transport == "aio":
        yield shared
        return
    with native_gateway() as envoy:
        yield envoy
