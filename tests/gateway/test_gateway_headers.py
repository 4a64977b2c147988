"""What a caller cannot forge at the gateway, and whose the affinity key is
(issue #23, LOW items), through the real Envoy.

- An upstream that echoes the metadata it received shows that headers only
  the gateway may set (Envoy's x-envoy-*, x-tokenwire-affinity,
  x-tenant-id) never arrive from a caller, and that x-forwarded-for (Envoy's
  use_remote_address) always does.
- Two fake replicas show that the affinity hash includes the caller's
  credential: one session id under many keys spreads over both replicas,
  while one key keeps it on one.
"""

from __future__ import annotations

import collections.abc
import concurrent.futures
import json
import time

import grpc
import httpx
import pytest
from google.protobuf import json_format
from grpc_health.v1 import health, health_pb2_grpc

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import ThreadServer
from tokenwire.gateway.config import AFFINITY_HEADER
from tokenwire.gateway.process import EnvoyProcess
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import chat_pb2, models_pb2, service_pb2_grpc

FORGED = {"x-envoy-original-path": "/forged", "x-envoy-retry-on": "5xx",
          "x-envoy-upstream-rq-timeout-ms": "1", "x-envoy-forged": "1",
          AFFINITY_HEADER: "forged-key", "x-tenant-id": "forged-tenant"}


class _Echo(grpc.GenericRpcHandler):
    """Every call (but health) answers a GetHealthResponse whose status is
    the JSON of the metadata it received."""

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
            seen = [[k, v] for k, v in context.invocation_metadata() if isinstance(v, str)]
            return models_pb2.GetHealthResponse(status=json.dumps(seen)).SerializeToString()

        return grpc.unary_unary_rpc_method_handler(echo)


@pytest.fixture(scope="module")
def echo_gateway() -> collections.abc.Iterator[EnvoyProcess]:
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(4))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    server.add_generic_rpc_handlers((_Echo(),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    envoy = start_gateway(f"127.0.0.1:{port}")
    yield envoy
    stop_gateway(envoy)
    server.stop(0)


def _received(status: str) -> dict[str, str]:
    return dict(json.loads(status))


def _assert_not_forged(seen: dict[str, str]) -> None:
    for name, value in FORGED.items():
        assert seen.get(name) != value, f"{name}: {value} reached the server"
    assert not any(k.startswith("x-envoy-") and seen[k] in FORGED.values() for k in seen)
    assert AFFINITY_HEADER not in seen and "x-tenant-id" not in seen
    # Envoy's use_remote_address: the caller's address (for a loopback caller,
    # Envoy's own) is always appended, so the server knows a proxy was there.
    assert seen.get("x-forwarded-for"), seen


def test_native_grpc_callers_cannot_forge_gateway_headers(echo_gateway) -> None:
    with grpc.insecure_channel(echo_gateway.address) as channel:
        stub = service_pb2_grpc.TokenwireServiceStub(channel)
        reply = stub.GetHealth(models_pb2.GetHealthRequest(), metadata=tuple(FORGED.items()),
                               timeout=10)
    _assert_not_forged(_received(reply.status))


def test_rest_callers_cannot_forge_gateway_headers(echo_gateway) -> None:
    with httpx.Client(base_url=echo_gateway.url, timeout=30) as rest:
        r = rest.get("/health", headers=FORGED)
    assert r.status_code == 200, r.text
    _assert_not_forged(_received(r.json()["status"]))


# -- the affinity key is the caller's ------------------------------------------

WORKERS = ("replica-a", "replica-b")


@pytest.fixture(scope="module")
def fleet() -> collections.abc.Iterator[EnvoyProcess]:
    servers = [ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                           served_model_name="fake-model", worker_id=name),
                            FakeEngine(max_model_len=512)).start() for name in WORKERS]
    envoy = start_gateway("127.0.0.1:1", upstreams=tuple(s.address for s in servers),
                          health_check_interval_s=0.5)
    deadline = time.monotonic() + 20  # both replicas pass their first health checks
    with grpc.insecure_channel(envoy.address) as channel:
        while len({_worker(channel, "") for _ in range(12)}) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
    yield envoy
    stop_gateway(envoy)
    for server in servers:
        server.stop()


def _worker(channel: grpc.Channel, key: str, session: str = "") -> str:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1,
            "nvext": {"extra_fields": ["worker_id"]}}
    metadata = [("authorization", f"Bearer {key}")] if key else []
    if session:
        metadata.append(("x-session-id", session))
    req = json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())
    stub = service_pb2_grpc.TokenwireServiceStub(channel)
    return stub.CreateChatCompletion(req, metadata=metadata, timeout=10).nvext.worker_id


def _rest_worker(rest: httpx.Client, key: str, user: str) -> str:
    body = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "user": user,
            "nvext": {"extra_fields": ["worker_id"]}}
    r = rest.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"})
    assert r.status_code == 200, r.text
    return r.json()["nvext"]["worker_id"]


def test_one_session_id_under_different_keys_is_not_one_routing_key(fleet) -> None:
    keys = [f"sk-tenant-{i:02d}" for i in range(16)]
    with grpc.insecure_channel(fleet.address) as channel:
        for key in keys[:3]:  # one key, one session: one replica
            assert len({_worker(channel, key, "shared-conv") for _ in range(4)}) == 1
        spread = {_worker(channel, key, "shared-conv") for key in keys}
    assert spread == set(WORKERS), "the same session id of 16 callers hashed alike"


def test_one_body_key_under_different_keys_is_not_one_routing_key(fleet) -> None:
    keys = [f"sk-tenant-{i:02d}" for i in range(16)]
    with httpx.Client(base_url=fleet.url, timeout=30) as rest:
        for key in keys[:3]:
            assert len({_rest_worker(rest, key, "user-1") for _ in range(4)}) == 1
        spread = {_rest_worker(rest, key, "user-1") for key in keys}
    assert spread == set(WORKERS), "the same body key of 16 callers hashed alike"
