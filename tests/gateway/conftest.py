"""Gateway fixtures: a real Envoy in front of a real tokenwire server.

- ``flaky_server`` / ``gateway``: a ThreadServer on FlakyEngine (fast, and
  it can fail on purpose) behind Envoy with a 1 MiB body limit.
- ``real_gateway``: Envoy in front of the session's ``real_server``.
- ``vlm_gateway_url``: Envoy in front of the session's ``vlm_server`` (the
  tiny VLM), its URL.
All Envoys are session-scoped and stopped at teardown.
"""

from __future__ import annotations

import collections.abc

import grpc
import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.flaky_engine import FlakyEngine
from tests.servers import ProcessServer, ThreadServer, fake_serving
from tokenwire.gateway.process import EnvoyProcess
from tokenwire.v1 import service_pb2_grpc

MODEL = "fake-model"
BODY_LIMIT = 1 << 20


@pytest.fixture(scope="session")
def flaky_engine() -> FlakyEngine:
    return FlakyEngine(max_model_len=512, block_size=16)


@pytest.fixture(scope="session")
def flaky_server(flaky_engine: FlakyEngine) -> collections.abc.Iterator[ThreadServer]:
    # trust_tenant_header: the gateway is the trusted hop
    with fake_serving(flaky_engine, served_model_name=MODEL, trust_tenant_header=True) as server:
        yield server


@pytest.fixture(scope="session")
def flaky_stub(
    flaky_server: ThreadServer,
) -> collections.abc.Iterator[service_pb2_grpc.TokenwireServiceStub]:
    with grpc.insecure_channel(flaky_server.address) as channel:
        yield service_pb2_grpc.TokenwireServiceStub(channel)


@pytest.fixture(scope="session")
def gateway(flaky_server: ThreadServer) -> collections.abc.Iterator[EnvoyProcess]:
    envoy = start_gateway(flaky_server.address, max_request_bytes=BODY_LIMIT)
    yield envoy
    stop_gateway(envoy)


@pytest.fixture(scope="session")
def rest(gateway: EnvoyProcess) -> collections.abc.Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        yield client


@pytest.fixture(scope="session")
def real_gateway(real_server: ProcessServer) -> collections.abc.Iterator[EnvoyProcess]:
    envoy = start_gateway(real_server.address)
    yield envoy
    stop_gateway(envoy)


@pytest.fixture(scope="session")
def vlm_gateway_url(vlm_server: ProcessServer) -> collections.abc.Iterator[str]:
    envoy = start_gateway(vlm_server.address)
    yield envoy.url
    stop_gateway(envoy)
