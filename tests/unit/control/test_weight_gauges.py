"""The served weights as gauges on the metrics port (issue #44 item 5), for a
router's endpoint attributes: the version name, its trailing number, the lag
behind the announced version and the update generation. Driven through the
ControlService on the fake engine; each gauge is checked against what the
replica's own admission does with the same state (docs/deploy.md)."""

from __future__ import annotations

import collections.abc
import urllib.request
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.rpc import chat_request, error_info
from tests.servers import ThreadServer
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc, service_pb2_grpc

Gauges = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[ThreadServer, int]]:
    engine = FakeEngine(max_model_len=512)
    settings = ServerSettings(engine="fake", port=0, max_model_len=512, enable_control=True,
                              weight_version="step-1")
    server = ThreadServer(settings, engine).start()
    port = server._running.metrics.serve("127.0.0.1", 0, engine=False)  # type: ignore[attr-defined]
    yield server, port
    server.stop()


@pytest.fixture()
def stubs(served):
    server, port = served
    with grpc.insecure_channel(server.address) as ch:
        yield (service_pb2_grpc.TokenwireServiceStub(ch), control_pb2_grpc.ControlServiceStub(ch),
               port)


def gauges(port: int) -> Gauges:
    """The tokenwire_weight_* samples of the page, by name and labels."""
    page = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(page)
            for s in family.samples if s.name.startswith("tokenwire_weight_")}


def scalar(g: Gauges, name: str) -> float:
    return g[(name, ())]


def _update(control, path: Path, version: str) -> None:
    control.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=str(path), weight_version=version),
        timeout=30)


def _lag0(service):
    return service.CreateChatCompletion(
        chat_request(max_tokens=2, nvext={"max_weight_lag": 0}), timeout=10)


def test_gauges_follow_updates_relabels_and_announces(stubs, tmp_path: Path) -> None:
    service, control, port = stubs
    g = gauges(port)
    assert g[("tokenwire_weight_version_info", (("version", "step-1"),))] == 1
    assert g[("tokenwire_weight_version_number", (("prefix", "step-"),))] == 1
    assert scalar(g, "tokenwire_weight_version_lag_updates") == 0
    generation = scalar(g, "tokenwire_weight_update_generation")

    # A weight update: a new name, a higher number, one more generation.
    _update(control, tmp_path, "step-12")
    g = gauges(port)
    assert g[("tokenwire_weight_version_info", (("version", "step-12"),))] == 1
    assert ("tokenwire_weight_version_info", (("version", "step-1"),)) not in g
    assert g[("tokenwire_weight_version_number", (("prefix", "step-"),))] == 12
    assert scalar(g, "tokenwire_weight_update_generation") == generation + 1

    # Announced, not committed: one update behind; admission refuses lag 0
    # (retry-safe) exactly while the gauge says 1.
    control.AnnounceWeightVersion(
        control_pb2.AnnounceWeightVersionRequest(weight_version="step-13"), timeout=5)
    assert scalar(gauges(port), "tokenwire_weight_version_lag_updates") == 1
    with pytest.raises(grpc.RpcError) as refused:
        _lag0(service)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(refused.value).reason == "WEIGHT_LAG_BEHIND"
    _update(control, tmp_path, "step-13")
    g = gauges(port)
    assert scalar(g, "tokenwire_weight_version_lag_updates") == 0
    assert g[("tokenwire_weight_version_number", (("prefix", "step-"),))] == 13
    assert scalar(g, "tokenwire_weight_update_generation") == generation + 2
    assert _lag0(service).choices[0].finish_reason == "length"

    # A relabel (SetWeightVersion) is a weight change too; a name without a
    # trailing number has no number sample (a router cannot order it).
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="rc"), timeout=10)
    g = gauges(port)
    assert g[("tokenwire_weight_version_info", (("version", "rc"),))] == 1
    assert not any(name == "tokenwire_weight_version_number" for name, _ in g)
    assert scalar(g, "tokenwire_weight_update_generation") == generation + 3


def test_exact_version_gauge_matches_admission(stubs, tmp_path: Path) -> None:
    """A replica whose info gauge names another version refuses an exact
    bound retry-safe (WEIGHT_VERSION_MISMATCH): the router's filter and the
    replica's admission read the same state."""
    service, control, port = stubs
    _update(control, tmp_path, "step-20")
    assert ("tokenwire_weight_version_info", (("version", "step-20"),)) in gauges(port)
    ok = service.CreateChatCompletion(
        chat_request(max_tokens=2), metadata=[("x-exact-weight-version", "step-20")], timeout=10)
    assert ok.choices[0].finish_reason == "length"
    with pytest.raises(grpc.RpcError) as refused:
        service.CreateChatCompletion(
            chat_request(max_tokens=2), metadata=[("x-exact-weight-version", "step-19")],
            timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(refused.value).reason == "WEIGHT_VERSION_MISMATCH"
    assert ("tokenwire-retry-safe", "1") in (refused.value.trailing_metadata() or ())
