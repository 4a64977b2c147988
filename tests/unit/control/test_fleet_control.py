"""Fleet-wide weight updates (issue #15 item 4, issue #23 item 3): pause →
update → resume on every replica as one operation. When one replica fails,
every replica that began loading reloads the folder it reported serving
before (or --rollback-path) under its old version; one whose rollback fails
or cannot run stays paused; one that never began loading is not touched;
`ok` is decided after the resumes, and the report holds what each server
says at the end."""

from __future__ import annotations

import os
import threading
import time

import grpc
import pytest

from tests.rpc import error_info
from tests.servers import ThreadServer, fake_serving
from tokenwire.client import Client
from tokenwire.client.fleet import update_fleet
from tokenwire.server.core.errors import Unavailable
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
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


def folders(tmp_path, *names: str) -> list[str]:
    out = []
    for name in names:
        (tmp_path / name).mkdir()
        out.append(os.path.realpath(tmp_path / name))
    return out


def said(address: str) -> tuple[str, bool, bool, str]:
    """What the server says now (version, paused, load_failed, weight_path)."""
    with Client(address, timeout=10) as client:
        s = client.control.state()
    return s.weight_version, s.paused, s.load_failed, s.weight_path


def reported(r) -> tuple[str, bool | None, bool | None, str]:
    return r.version, r.paused, r.load_failed, r.weight_path


def test_every_replica_moves_to_the_new_version(fleet, tmp_path) -> None:
    engines, servers = fleet
    (new,) = folders(tmp_path, "step-2")
    report = update_fleet([s.address for s in servers], new, version="step-2")
    assert report.ok and report.version == "step-2", report
    for r in report.replicas:
        assert (r.old_version, r.old_path, r.paused_for_update, r.updated, r.resumed) == (
            "step-1", "/fake/model", True, True, True)
        assert reported(r) == ("step-2", False, False, new)
        assert not r.rolled_back and not r.left_paused and not r.errors
    assert [serves(s.address) for s in servers] == ["step-2"] * 3
    assert all(e.loaded_paths == [new] for e in engines)


def test_one_failure_rolls_every_replica_back(fleet, tmp_path) -> None:
    engines, servers = fleet
    new, old = folders(tmp_path, "step-2", "step-1")
    engines[1].fail_reloads = 1  # replica 1 cannot read the new checkpoint
    report = update_fleet([s.address for s in servers], new, version="step-2",
                          rollback_path=old)
    assert not report.ok and report.version == "step-1"
    r0, r1, r2 = report.replicas
    assert r1.errors and "WEIGHT_LOAD_FAILED" in r1.errors[0]
    for r in report.replicas:
        assert r.resumed and r.rolled_back and reported(r) == ("step-1", False, False, old)
    assert r0.updated and not r1.updated and r2.updated
    assert [serves(s.address) for s in servers] == ["step-1"] * 3
    assert engines[0].loaded_paths == [new, old]
    assert engines[1].loaded_paths == [old]  # its failed load, then the old weights


def test_rollback_reloads_the_folder_each_replica_served(fleet, tmp_path) -> None:
    """Without --rollback-path each replica goes back to the folder it
    reported before the update (not the model it was started with)."""
    engines, servers = fleet
    a, c, new = folders(tmp_path, "a", "c", "step-3")
    assert update_fleet([s.address for s in servers[:2]], a, version="step-2").ok
    with Client(servers[2].address, timeout=10) as client:  # replica 2 got there another way
        client.control.update_weights_from_path(c, "step-2")
    engines[1].fail_reloads = 1
    report = update_fleet([s.address for s in servers], new, version="step-3")
    assert not report.ok and report.version == "step-2"
    assert [r.old_path for r in report.replicas] == [a, a, c]
    assert [e.loaded_paths[-1] for e in engines] == [a, a, c]
    assert [reported(r) for r in report.replicas] == [
        ("step-2", False, False, a), ("step-2", False, False, a), ("step-2", False, False, c)]
    assert all(r.rolled_back and r.resumed for r in report.replicas)
    assert [serves(s.address) for s in servers] == ["step-2"] * 3


def test_an_unchanged_folder_rolls_back_with_its_fingerprint(fleet, tmp_path) -> None:
    """Issue #32 item 3: each replica reports what the files of its folder
    were when it loaded them; the rollback sends that fingerprint, and a
    folder still holding those files is reloaded."""
    engines, servers = fleet
    a, new = folders(tmp_path, "a", "step-3")
    (tmp_path / "a" / "model.safetensors").write_bytes(b"weights of step-2")
    assert update_fleet([s.address for s in servers], a, version="step-2").ok
    engines[1].fail_reloads = 1
    report = update_fleet([s.address for s in servers], new, version="step-3")
    assert not report.ok and report.version == "step-2"
    for r in report.replicas:
        assert r.old_path == a and r.old_fingerprint.startswith("files-v1:1:")
        assert r.rolled_back and r.resumed and reported(r) == ("step-2", False, False, a)
    assert [e.loaded_paths[-1] for e in engines] == [a, a, a]
    assert [serves(s.address) for s in servers] == ["step-2"] * 3


def test_a_folder_rewritten_in_place_is_not_rolled_back(fleet, tmp_path) -> None:
    """Issue #32 item 3: the folder a replica served was overwritten in place
    (same name, other weights) after it was loaded: reloading it would label
    the new files with the old version. Its server refuses the rollback
    (WEIGHTS_CHANGED) before loading anything, and the replica stays paused
    with the reason in its report."""
    engines, servers = fleet
    a, new = folders(tmp_path, "a", "step-3")
    weights = tmp_path / "a" / "model.safetensors"
    weights.write_bytes(b"weights of step-2")
    assert update_fleet([s.address for s in servers], a, version="step-2").ok
    stat = weights.stat()
    weights.write_bytes(b"weights of step-9")  # same size, and the old mtime put back
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    engines[1].fail_reloads = 1
    report = update_fleet([s.address for s in servers], new, version="step-3")
    assert not report.ok
    for r, s in zip(report.replicas, servers, strict=True):
        assert r.update_started and not r.rolled_back and r.left_paused and not r.resumed
        assert any(e.startswith("rollback: FAILED_PRECONDITION [WEIGHTS_CHANGED]")
                   for e in r.errors), r.errors
        assert any(e.startswith("left paused") for e in r.errors)
        assert r.paused is True and reported(r) == said(s.address)
    assert [e.loaded_paths for e in engines] == [[a, new], [a], [a, new]]  # a not reloaded
    assert [r.version for r in report.replicas] == ["step-3", "step-2+failed-load", "step-3"]


def test_a_rollback_to_the_new_folder_is_refused(fleet, tmp_path) -> None:
    """Issue #32 item 3: the new weights were written over the folder the
    replicas served (or --rollback-path names the new folder): a rollback
    to it would reload the new weights under the old version, so it is
    refused and the replicas that began loading stay paused."""
    engines, servers = fleet
    a, new = folders(tmp_path, "a", "step-3")
    assert update_fleet([s.address for s in servers], a, version="step-2").ok
    engines[1].fail_reloads = 1
    report = update_fleet([s.address for s in servers], a + "/.", version="step-3")
    assert not report.ok
    for r in report.replicas:
        assert r.old_path == a and not r.rolled_back and r.left_paused and r.paused is True
        assert any(e.startswith("rollback: FAILED_PRECONDITION [ROLLBACK_TO_NEW_PATH]")
                   for e in r.errors), r.errors
    assert [e.loaded_paths for e in engines] == [[a, a], [a], [a, a]]
    for s in servers:  # explicit --rollback-path to the new folder: refused the same way
        with Client(s.address, timeout=10) as client:
            client.control.update_weights_from_path(a, "step-2")
    engines[0].fail_reloads = 1
    report = update_fleet([s.address for s in servers], new, version="step-3", rollback_path=new)
    assert not report.ok
    assert all(r.left_paused and not r.rolled_back for r in report.replicas)
    assert all(any("ROLLBACK_TO_NEW_PATH" in e for e in r.errors) for r in report.replicas)


def test_a_replica_whose_update_was_refused_is_not_rolled_back(fleet, tmp_path) -> None:
    """The server checks the path before pausing: INVALID_ARGUMENT means it
    never began loading, so it keeps its weights untouched."""
    engines, servers = fleet
    new, old = folders(tmp_path, "step-2", "step-1")
    plane = servers[1]._running.control
    real = plane.update_from_path

    async def missing_here(path, *args, **kwargs):  # the folder does not exist on replica 1
        return await real(path + "-not-on-this-replica", *args, **kwargs)

    plane.update_from_path = missing_here
    report = update_fleet([s.address for s in servers], new, version="step-2",
                          rollback_path=old)
    r0, r1, r2 = report.replicas
    assert "INVALID_ARGUMENT [PATH_NOT_FOUND]" in r1.errors[0]
    assert not r1.update_started and not r1.rolled_back and r1.resumed
    assert engines[1].loaded_paths == []
    assert r0.rolled_back and r2.rolled_back and engines[0].loaded_paths == [new, old]
    assert not report.ok and report.version == "step-1"
    assert [serves(s.address) for s in servers] == ["step-1"] * 3


def test_no_known_path_leaves_the_replica_paused(fleet, tmp_path) -> None:
    """A replica that does not know the folder of its weights (after a weight
    transfer) and no --rollback-path: its rollback is refused and it stays
    paused; the report says what its server says."""
    engines, servers = fleet
    a, new = folders(tmp_path, "a", "step-3")
    assert update_fleet([s.address for s in servers], a, version="step-2").ok
    servers[1]._running.control.weight_path = ""  # as after a weight transfer
    engines[2].fail_reloads = 1
    report = update_fleet([s.address for s in servers], new, version="step-3")
    r0, r1, r2 = report.replicas
    assert not report.ok and report.version == ""
    assert any("ROLLBACK_PATH_UNKNOWN" in e for e in r1.errors)
    assert r1.updated and not r1.rolled_back and r1.left_paused and not r1.resumed
    assert any(e.startswith("left paused") for e in r1.errors)
    # What server 1 says: paused, on the new weights under the new version.
    assert reported(r1) == said(servers[1].address) == ("step-3", True, False, new)
    assert engines[1].loaded_paths == [a, new]
    for r, s in ((r0, servers[0]), (r2, servers[2])):
        assert r.rolled_back and r.resumed and reported(r) == ("step-2", False, False, a)
        assert serves(s.address) == "step-2"


def test_a_failed_rollback_leaves_the_replica_paused(fleet, tmp_path) -> None:
    engines, servers = fleet
    new, old = folders(tmp_path, "step-2", "step-1")
    (tmp_path / "step-1" / "BROKEN").touch()  # the rollback's load fails too
    engines[1].fail_reloads = 1
    report = update_fleet([s.address for s in servers], new, version="step-2",
                          rollback_path=old)
    assert not report.ok
    for r, s in zip(report.replicas, servers, strict=True):
        assert r.update_started and not r.rolled_back and r.left_paused and not r.resumed
        assert any(e.startswith("rollback: FAILED_PRECONDITION [WEIGHT_LOAD_FAILED]")
                   for e in r.errors)
        assert r.paused is True and reported(r) == said(s.address)


def test_ok_is_decided_after_the_resumes(fleet, tmp_path) -> None:
    _, servers = fleet
    (new,) = folders(tmp_path, "step-2")

    async def refuse(*args, **kwargs):
        raise Unavailable("resume failed on this replica", reason="ENGINE_UNAVAILABLE")

    servers[2]._running.control.resume = refuse
    report = update_fleet([s.address for s in servers], new, version="step-2")
    assert not report.ok
    r2 = report.replicas[2]
    assert r2.updated and not r2.resumed and r2.paused is True
    assert any(e.startswith("resume: UNAVAILABLE") for e in r2.errors)
    assert all(r.resumed and r.paused is False for r in report.replicas[:2])


def test_an_unreachable_replica_changes_nothing(fleet, tmp_path) -> None:
    engines, servers = fleet
    report = update_fleet([servers[0].address, "127.0.0.1:1"], str(tmp_path), version="step-2",
                          rollback_path=str(tmp_path), timeout=3)
    assert not report.ok and report.version == ""
    r0, r1 = report.replicas
    assert r1.errors and not r1.paused_for_update and r1.paused is None
    assert not r0.paused_for_update and reported(r0)[:3] == ("step-1", False, False)
    assert not engines[0].loaded_paths and serves(servers[0].address) == "step-1"


def test_a_failed_pause_resumes_the_others_and_loads_nothing(fleet, tmp_path) -> None:
    engines, servers = fleet

    async def refuse(*args, **kwargs):
        raise Unavailable("pause failed on this replica", reason="ENGINE_UNAVAILABLE")

    servers[1]._running.control.pause = refuse
    report = update_fleet([s.address for s in servers], str(tmp_path), version="step-2")
    assert not report.ok and report.version == "step-1"
    r0, r1, r2 = report.replicas
    assert r1.errors[0].startswith("pause: UNAVAILABLE") and not r1.paused_for_update
    assert r0.resumed and r2.resumed and not r0.update_started
    assert all(reported(r) == ("step-1", False, False, "/fake/model") for r in report.replicas)
    assert not any(e.loaded_paths for e in engines)


def test_cli_fleet_update_prints_the_report(fleet, tmp_path, capsys) -> None:
    import json

    from tokenwire.cli import main

    _, servers = fleet
    code = main(["control", "--fleet", ",".join(s.address for s in servers), "update-weights",
                 str(tmp_path), "--version", "step-3", "--rollback-path", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["ok"] and [r["version"] for r in out["replicas"]] == ["step-3"] * 3
    assert [r["paused"] for r in out["replicas"]] == [False] * 3
    assert main(["control", *(a for s in servers for a in ("--fleet", s.address)), "status"]) == 0
    states = json.loads(capsys.readouterr().out)
    assert {s["weight_version"] for s in states.values()} == {"step-3"}


def test_unhealthy_while_paused_takes_a_replica_out_of_rotation() -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with fake_serving(FakeEngine(), enable_control=True, unhealthy_while_paused=True) as server:
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


def test_the_target_version_is_announced_before_loading_and_fences_lag_0(fleet, tmp_path) -> None:
    """Bounded staleness (issue #26): a replica still loading counts as one
    update behind the announced version, so a request bounded by
    max_weight_lag 0 is refused there retry-safe; each report says when its
    replica committed; once committed the announce is gone."""
    engines, servers = fleet
    (new,) = folders(tmp_path, "step-2")
    engines[1].hold.add("reload")  # replica 1 is slow to load
    reports = []
    worker = threading.Thread(target=lambda: reports.append(
        update_fleet([s.address for s in servers], new, version="step-2")))
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while True:
            with Client(servers[1].address, timeout=10) as client:
                state = client.control.state()
            if state.announced_version == "step-2" and state.paused:
                break
            assert time.monotonic() < deadline, state
            time.sleep(0.01)
        req = chat_pb2.CreateChatCompletionRequest(max_tokens=2)
        req.messages.add(role="user").content.string_value = "hi"
        req.nvext.max_weight_lag = 0
        with grpc.insecure_channel(servers[1].address) as channel:
            with pytest.raises(grpc.RpcError) as exc:
                service_pb2_grpc.TokenwireServiceStub(channel).CreateChatCompletion(req, timeout=10)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_info(exc.value).reason == "WEIGHT_LAG_BEHIND"
    finally:
        engines[1].hold.discard("reload")
        worker.join(60)
    (report,) = reports
    assert report.ok, report
    assert all(r.announced and r.committed_at is not None for r in report.replicas)
    for s in servers:
        with Client(s.address, timeout=10) as client:
            assert client.control.state().announced_version == ""
        with grpc.insecure_channel(s.address) as channel:
            ok = service_pb2_grpc.TokenwireServiceStub(channel).CreateChatCompletion(
                req, timeout=10
            )
        assert ok.choices[0].weight_versions[0].version == "step-2"


def test_a_failed_update_withdraws_the_announce(fleet, tmp_path) -> None:
    _, servers = fleet
    report = update_fleet([s.address for s in servers], str(tmp_path / "missing"), version="step-2")
    assert not report.ok and all(r.announced for r in report.replicas)
    for s in servers:
        with Client(s.address, timeout=10) as client:
            assert client.control.state().announced_version == ""
