"""A fleet behind one Envoy (issue #15): two fake-engine replicas, Envoy's
consistent hash on the affinity key (X-Session-ID, else the REST body's
session_id / cache_salt / user), least-loaded without a key, retry on
another replica of what never reached an engine, version-aware routing,
and failover when a replica dies."""

from __future__ import annotations

import collections
import time
from typing import Any

import grpc
import httpx
import pytest
from google.protobuf import json_format

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import ThreadServer
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import chat_pb2, service_pb2_grpc

WORKERS = ("replica-a", "replica-b")
VERSIONS = {"replica-a": "step-5", "replica-b": "step-7"}


def replica(name: str) -> ThreadServer:
    settings = ServerSettings(engine="fake", port=0, max_model_len=512,
                              served_model_name="fake-model",
                              worker_id=name, weight_version=VERSIONS[name])
    return ThreadServer(settings, FakeEngine(max_model_len=512)).start()


@pytest.fixture(scope="module")
def fleet():
    servers = {name: replica(name) for name in WORKERS}
    envoy = start_gateway("127.0.0.1:1", upstreams=tuple(s.address for s in servers.values()),
                          health_check_interval_s=0.5)
    deadline = time.monotonic() + 20  # both replicas pass their first health checks
    with httpx.Client(base_url=envoy.url, timeout=30) as rest:
        while len(served(rest, 12)) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        yield envoy, servers, rest
    stop_gateway(envoy)
    for server in servers.values():
        server.stop()


def chat(**fields: Any) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2,
            "nvext": {"extra_fields": ["worker_id"]}, **fields}


def worker(rest: httpx.Client, headers: dict[str, str] | None = None, **fields: Any) -> str:
    r = rest.post("/v1/chat/completions", json=chat(**fields), headers=headers or {})
    assert r.status_code == 200, r.text
    return r.json()["nvext"]["worker_id"]


def served(rest: httpx.Client, n: int) -> collections.Counter[str]:
    return collections.Counter(worker(rest) for _ in range(n))


def test_same_session_lands_on_one_replica(fleet) -> None:
    _, _, rest = fleet
    for key in ("conv-1", "conv-2", "conv-3", "conv-4"):
        assert len({worker(rest, {"X-Session-ID": key}) for _ in range(6)}) == 1
    spread = {worker(rest, {"X-Session-ID": f"conv-{i}"}) for i in range(24)}
    assert spread == set(WORKERS), "different sessions use both replicas"


@pytest.mark.parametrize("field", ["session_id", "cache_salt", "user"])
def test_body_keys_give_affinity(fleet, field) -> None:
    _, _, rest = fleet
    for i in range(3):
        assert len({worker(rest, **{field: f"{field}-{i}"}) for _ in range(5)}) == 1


def test_trainer_routing_key_gives_affinity(fleet) -> None:
    """slime sends its session as X-SMG-Routing-Key (SGLang Model Gateway's
    consistent hashing, issue #28): one replica per key, keys spread."""
    _, _, rest = fleet
    for i in range(3):
        assert len({worker(rest, {"X-SMG-Routing-Key": f"traj-{i}"}) for _ in range(5)}) == 1
    spread = {worker(rest, {"X-SMG-Routing-Key": f"traj-{i}"}) for i in range(24)}
    assert spread == set(WORKERS)


def test_nvext_cache_salt_gives_affinity(fleet) -> None:
    _, _, rest = fleet
    body = chat(nvext={"cache_salt": "tenant-salt", "extra_fields": ["worker_id"]})
    got = {
        rest.post("/v1/chat/completions", json=body).json()["nvext"]["worker_id"] for _ in range(5)
    }
    assert len(got) == 1


def test_native_grpc_session_metadata_gives_affinity(fleet) -> None:
    envoy, _, _ = fleet
    req = json_format.ParseDict(chat(), chat_pb2.CreateChatCompletionRequest())
    with grpc.insecure_channel(envoy.address) as channel:
        stub = service_pb2_grpc.TokenwireServiceStub(channel)
        got = {stub.CreateChatCompletion(req, metadata=(("x-session-id", "grpc-conv"),),
                                         timeout=10).nvext.worker_id for _ in range(6)}
    assert len(got) == 1


def test_without_a_key_both_replicas_serve(fleet) -> None:
    _, _, rest = fleet
    assert set(served(rest, 16)) == set(WORKERS)


def test_min_weight_version_picks_a_replica_that_has_it(fleet) -> None:
    _, _, rest = fleet
    # step-6: only replica-b (step-7) qualifies; the other refuses retry-safe
    # and Envoy retries on the next replica.
    got = collections.Counter(worker(rest, {"X-Min-Weight-Version": "step-6"}) for _ in range(8))
    assert got == {"replica-b": 8}
    r = rest.post("/v1/chat/completions", json=chat(), headers={"X-Min-Weight-Version": "step-9"})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "weight_version_behind"


def test_exact_weight_version_picks_the_replica_that_serves_it(fleet) -> None:
    """Bounded staleness (issue #26): a request pinned to a version (header
    or body) runs on the replica that committed it; the other refuses it
    retry-safe (WEIGHT_VERSION_MISMATCH) and Envoy retries; none: 503."""
    _, _, rest = fleet
    got = collections.Counter(worker(rest, {"X-Exact-Weight-Version": "step-7"}) for _ in range(8))
    assert got == {"replica-b": 8}
    body = {"extra_fields": ["worker_id"], "exact_weight_version": "step-5"}
    got = collections.Counter(worker(rest, nvext=body) for _ in range(8))
    assert got == {"replica-a": 8}
    r = rest.post("/v1/chat/completions", json=chat(), headers={"X-Exact-Weight-Version": "step-6"})
    assert r.status_code == 503
    assert r.json()["error"]["code"] == "weight_version_mismatch"
    r = rest.post("/v1/chat/completions", json=chat(), headers={"X-Max-Weight-Lag": "-1"})
    assert r.status_code == 400
    assert r.json()["error"]["param"] == "x-max-weight-lag"


def test_a_dead_replica_is_routed_around(fleet) -> None:
    _, servers, rest = fleet
    servers["replica-a"].stop()
    # Every call succeeds: connect failures are retried on the other
    # replica, then health checks take the dead one out.
    got = collections.Counter(worker(rest, {"X-Session-ID": f"after-{i}"}) for i in range(20))
    assert got == {"replica-b": 20}
