"""`tokenwire up --replicas N` with vLLM's --kv-events-config: each replica's
engine publishes on ports of its own (the endpoint's and the replay
endpoint's port + replica index x data-parallel size), so N engines on one
host do not collide on one bind (ZMQ's "Address already in use")."""

from __future__ import annotations

import json

import pytest


def _configs(monkeypatch, *args: str) -> list[dict]:
    from tokenwire.cli import build_parser as top_parser
    from tokenwire.gateway.cli import plan_replicas
    from tokenwire.gateway.replica_kv_events import KV_EVENTS_FLAG

    monkeypatch.delenv("TOKENWIRE_API_KEY", raising=False)
    ns, extra = top_parser().parse_known_args(["up", "Qwen/X", *args])
    ns.extra = extra
    found = []
    for replica in plan_replicas(ns):
        argv = list(replica.argv)
        if KV_EVENTS_FLAG in argv:
            found.append(json.loads(argv[argv.index(KV_EVENTS_FLAG) + 1]))
        else:
            (inline,) = [a for a in argv if a.startswith(KV_EVENTS_FLAG + "=")]
            found.append(json.loads(inline.split("=", 1)[1]))
    return found


def test_each_replica_publishes_on_its_own_port(monkeypatch: pytest.MonkeyPatch) -> None:
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://*:5600",
              "replay_endpoint": "tcp://*:5700", "topic": "kv"}
    found = _configs(monkeypatch, "--replicas", "3", "--kv-events-config", json.dumps(config))
    assert [c["endpoint"] for c in found] == ["tcp://*:5600", "tcp://*:5601", "tcp://*:5602"]
    assert [c["replay_endpoint"] for c in found] == ["tcp://*:5700", "tcp://*:5701",
                                                     "tcp://*:5702"]
    assert all(c["topic"] == "kv" for c in found)


def test_data_parallel_ranks_keep_their_ports(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replica i's ranks publish on its port + rank: the next replica starts
    past them. Without an endpoint the config means vLLM's default one."""
    config = {"enable_kv_cache_events": True}
    found = _configs(monkeypatch, "--replicas", "2", "--data-parallel-size", "2",
                     f"--kv-events-config={json.dumps(config)}")
    assert [c.get("endpoint") for c in found] == [None, "tcp://*:5559"]


def test_what_binds_no_fixed_port_is_left_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    for endpoint in ("tcp://*:0", "ipc:///tmp/kv"):
        config = {"enable_kv_cache_events": True, "endpoint": endpoint}
        found = _configs(monkeypatch, "--replicas", "2", "--kv-events-config", json.dumps(config))
        assert [c["endpoint"] for c in found] == [endpoint, endpoint]
