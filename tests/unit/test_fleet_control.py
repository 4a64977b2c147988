"""Fleet-wide weight updates (issue #15 item 4): pause → update → resume on
every replica as one operation; when one replica fails, every replica ends
resumed on its old weights and version, and the report says what happened
on each."""

from __future__ import annotations

import grpc
import pytest

from tests.servers import ThreadServer
from tokenwire.client.fleet import update_fleet
from tokenwire.server.fake_engine import FakeEngine
from tokenwire.server.settings import ServerSettings
from tokenwire.v1 import chat_pb2, service_pb2_grpc


@pytest.fixture()
def fleet():
    engines = [FakeEngine(max_model_len=512) for _ in range(3)]
    servers = [ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                           served_model_name="fake-model", enable_control=True,
                                           weight_version="step-1"), e).start() for e in engines]
    yield engines, servers
    for s in servers:
        s.stop()


def serves(address: str) -> str:
    """A chat call's weight version (it is generated, so the replica resumed)."""
    req = chat_pb2.CreateChatCompletionRequest(max_tokens=2)
    req.messages.add(role="user").content.string_value = "hi"
    with grpc.insecure_channel(address) as channel:
        resp = service_pb2_grpc.TokenwireServiceStub(channel).CreateChatCompletion(req, timeout=10)
    return resp.choices[0].weight_versions[0].version


def test_every_replica_moves_to_the_new_version(fleet, tmp_path) -> None:
    engines, servers = fleet
    report = update_fleet([s.address for s in servers], str(tmp_path), version="step-2",
                          rollback_path=str(tmp_path))
    assert report.ok and report.version == "step-2", report
    for r in report.replicas:
        assert (r.old_version, r.version, r.paused, r.updated, r.resumed) == (
            "step-1", "step-2", True, True, True)
        assert not r.rolled_back and not r.errors
    assert [serves(s.address) for s in servers] == ["step-2"] * 3
    assert all(e.loaded_paths == [str(tmp_path)] for e in engines)


def test_one_failure_rolls_every_replica_back(fleet, tmp_path) -> None:
    engines, servers = fleet
    new, old = tmp_path / "step-2", tmp_path / "step-1"
    new.mkdir()
    old.mkdir()
    engines[1].fail_reloads = 1  # replica 1 cannot read the new checkpoint
    report = update_fleet([s.address for s in servers], str(new), version="step-2",
                          rollback_path=str(old))
    assert not report.ok and report.version == "step-1"
    r0, r1, r2 = report.replicas
    assert r1.errors and "WEIGHT_LOAD_FAILED" in r1.errors[0]
    for r in report.replicas:
        assert r.version == "step-1" and r.resumed and r.rolled_back
    assert r0.updated and not r1.updated and r2.updated
    assert [serves(s.address) for s in servers] == ["step-1"] * 3
    assert engines[0].loaded_paths == [str(new), str(old)]
    assert engines[1].loaded_paths == [str(old)]  # its failed load, then the old weights


def test_a_failed_pause_changes_nothing(fleet, tmp_path) -> None:
    engines, servers = fleet
    report = update_fleet([servers[0].address, "127.0.0.1:1"], str(tmp_path), version="step-2",
                          rollback_path=str(tmp_path), timeout=3)
    assert not report.ok
    assert report.replicas[1].errors and not report.replicas[1].paused
    assert not engines[0].loaded_paths and serves(servers[0].address) == "step-1"


def test_cli_fleet_update_prints_the_report(fleet, tmp_path, capsys) -> None:
    import json

    from tokenwire.cli import main

    _, servers = fleet
    code = main(["control", "--fleet", ",".join(s.address for s in servers), "update-weights",
                 str(tmp_path), "--version", "step-3", "--rollback-path", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"] and [r["version"] for r in out["replicas"]] == ["step-3"] * 3
    assert main(["control", *(a for s in servers for a in ("--fleet", s.address)), "status"]) == 0
    states = json.loads(capsys.readouterr().out)
    assert {s["weight_version"] for s in states.values()} == {"step-3"}


def test_unhealthy_while_paused_takes_a_replica_out_of_rotation() -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from tokenwire.client import Client

    server = ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512, enable_control=True,
                                         unhealthy_while_paused=True), FakeEngine()).start()
    try:
        def health() -> int:
            with grpc.insecure_channel(server.address) as channel:
                return health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=5).status

        assert health() == health_pb2.HealthCheckResponse.SERVING
        with Client(server.address) as client:
            client.control.pause("keep")
            assert health() == health_pb2.HealthCheckResponse.NOT_SERVING
            client.control.resume()
        assert health() == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop()
