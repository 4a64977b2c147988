"""Callers' request ids are labels (issue #32 item 5): two requests in flight
with the same caller id each get their own engine id, so one's weight bound
and its end at an update never touch the other; AbortRequests by a caller
id ends every request carrying it (admin only), by an engine id just that
one."""

from __future__ import annotations

import collections.abc

import grpc
import pytest

from tests.rpc import StreamReader, chat_request
from tests.servers import fake_serving
from tokenwire.server.core.request_ids import EngineRequestIds
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc, service_pb2_grpc

SAME = "trainer-chosen-id"


@pytest.fixture()
def stubs() -> collections.abc.Iterator[tuple[object, object, FakeEngine]]:
    engine = FakeEngine(max_model_len=512, token_delay=0.004)
    with fake_serving(engine, enable_control=True) as server, \
            grpc.insecure_channel(server.address) as ch:
        control = control_pb2_grpc.ControlServiceStub(ch)
        control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
        yield service_pb2_grpc.TokenwireServiceStub(ch), control, engine


def _stream(service, max_tokens: int, **nvext) -> StreamReader:
    return StreamReader(service.StreamChatCompletion(chat_request(
        request_id=SAME, max_tokens=max_tokens, ignore_eos=True, return_token_ids=True,
        nvext=nvext), timeout=60))


def _final(reader: StreamReader):
    reader.join(30)
    assert not reader.is_alive() and reader.error is None, reader.error
    return [c for m in reader.msgs for c in m.choices if c.finish_reason][-1]


def _state(control):
    return control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state


def test_an_update_ends_only_the_request_whose_bound_it_breaks(stubs, tmp_path) -> None:
    service, control, engine = stubs
    pinned = _stream(service, 400, exact_weight_version="v1")
    pinned.wait_ids(3)
    lagging = _stream(service, 60, max_weight_lag=1)
    lagging.wait_ids(3)
    assert _state(control).bounded_requests == 2, "both records are tracked"
    seen = [r.request_id for r in engine.requests[-2:]]
    assert seen[0] == SAME and seen[1] != SAME and seen[1].startswith(SAME), seen
    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(tmp_path), weight_version="v2", pause_mode="keep"), timeout=30)
    ended, finished = _final(pinned), _final(lagging)
    assert ended.finish_reason == "abort"
    assert ended.stop_reason.string_value.startswith("WEIGHT_VERSION_CHANGED:")
    assert finished.finish_reason == "length" and len(lagging.ids()) == 60, "all its ids"
    assert [s.version for s in finished.weight_versions] == ["v1", "v2"]
    assert {m.id for r in (pinned, lagging) for m in r.msgs} == {SAME}, "the caller's id, unchanged"
    state = _state(control)
    assert state.bounded_requests == 0
    assert dict(state.requests_ended_by_bound) == {"WEIGHT_VERSION_CHANGED": 1}


def test_abort_by_a_caller_id_ends_every_request_carrying_it(stubs) -> None:
    service, control, _ = stubs
    first, second = _stream(service, 400), _stream(service, 400)
    first.wait_ids(2)
    second.wait_ids(2)
    resp = control.AbortRequests(control_pb2.AbortRequestsRequest(request_ids=[SAME]), timeout=5)
    assert resp.aborted == 1, "as vLLM answers: the ids asked"
    assert [_final(r).finish_reason for r in (first, second)] == ["abort", "abort"]


def test_abort_by_an_engine_id_ends_just_that_request(stubs) -> None:
    service, control, engine = stubs
    first = _stream(service, 400)
    first.wait_ids(2)
    second = _stream(service, 30)
    second.wait_ids(2)
    other = engine.requests[-1].request_id
    assert other != SAME
    control.AbortRequests(control_pb2.AbortRequestsRequest(request_ids=[other]), timeout=5)
    assert _final(second).finish_reason == "abort"
    first.wait_ids(len(first.ids()) + 3)
    assert first.is_alive(), "the other request with the caller's id runs on"
    control.AbortRequests(control_pb2.AbortRequestsRequest(request_ids=[SAME]), timeout=5)
    assert _final(first).finish_reason == "abort"


def test_engine_ids_are_unique_in_flight_and_resolve_by_label() -> None:
    ids = EngineRequestIds()
    a, b, c = ids.claim("x"), ids.claim("x"), ids.claim("y")
    assert a == "x" and b not in ("x", "y") and c == "y"
    d = ids.claim(b)  # a caller may choose another request's engine id as its own
    assert d not in (a, b, c) and ids.label(d) == b and ids.label(b) == "x"
    assert sorted(ids.resolve(["x"])) == sorted([a, b])
    assert sorted(ids.resolve([b])) == sorted([b, d]), "the engine id, and its label's"
    assert ids.resolve(["nobody"]) == ["nobody"]
    ids.release(a)
    assert ids.claim("x") == "x", "free again once the first ended"
    assert len(ids) == 4
