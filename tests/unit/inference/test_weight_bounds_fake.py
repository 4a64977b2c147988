"""Bounded staleness on the fake engine (issue #26): a request bounded to an
exact weight version or a maximum lag is admitted only where its bound
holds, and ended at the update that breaks it with finish_reason "abort",
every id sampled so far and a stop_reason naming the version change."""

from __future__ import annotations

import collections.abc

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import StreamReader, chat_request, error_info
from tests.servers import ThreadServer, fake_serving
from tests.session_rpc import RawSession, start_generate
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import (
    completion_pb2,
    control_pb2,
    control_pb2_grpc,
    generate_pb2,
    service_pb2_grpc,
)
from tokenwire.wire import (
    EXACT_VERSION_HEADER,
    MAX_LAG_HEADER,
    MIN_VERSION_HEADER,
    RETRY_SAFE_TRAILER,
)

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture()
def served(transport: str) -> collections.abc.Iterator[tuple[ThreadServer, FakeEngine]]:
    engine = FakeEngine(max_model_len=512, token_delay=0.004)
    with fake_serving(engine, enable_control=True, grpc_transport=transport) as server:
        yield server, engine


@pytest.fixture()
def stubs(served):
    server, engine = served
    with grpc.insecure_channel(server.address) as ch:
        control = control_pb2_grpc.ControlServiceStub(ch)
        control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
        yield service_pb2_grpc.TokenwireServiceStub(ch), control, engine


def _long_chat(**kw):
    return chat_request(**{"max_tokens": 400, "ignore_eos": True, "return_token_ids": True, **kw})


def _update(control, folder, version: str) -> None:
    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(folder), weight_version=version, pause_mode="keep"), timeout=30)


def _final(reader: StreamReader, timeout: float = 30):
    reader.join(timeout)
    assert not reader.is_alive(), "the stream did not end"
    assert reader.error is None, reader.error
    return [c for m in reader.msgs for c in m.choices if c.finish_reason][-1]


def _spans(choice) -> list[tuple[str, int, int]]:
    return [(s.version, s.start, s.end) for s in choice.weight_versions]


def _refused(call, code: grpc.StatusCode, reason: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as exc:
        call()
    assert exc.value.code() == code, exc.value.details()
    assert error_info(exc.value).reason == reason, exc.value.details()
    return exc.value


def test_a_pinned_request_straddling_a_keep_mode_update_ends_at_the_update(stubs, tmp_path) -> None:
    service, control, _ = stubs
    reader = StreamReader(service.StreamChatCompletion(
        _long_chat(), metadata=((EXACT_VERSION_HEADER, "v1"),), timeout=60))
    reader.wait_ids(5)
    _update(control, tmp_path, "v2")
    final = _final(reader)
    assert final.finish_reason == "abort"
    assert final.stop_reason.string_value.startswith(
        "WEIGHT_VERSION_CHANGED: weight version 'v1' -> 'v2'"
    )
    ids = reader.ids()
    assert 5 <= len(ids) < 400
    assert _spans(final) == [("v1", 0, len(ids))], "no token of another version"
    state = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state
    assert state.weight_version == "v2"


def test_an_unbounded_request_is_carried_across_the_same_update(stubs, tmp_path) -> None:
    service, control, _ = stubs
    reader = StreamReader(service.StreamChatCompletion(_long_chat(max_tokens=120), timeout=60))
    reader.wait_ids(5)
    _update(control, tmp_path, "v2")
    final = _final(reader)
    assert final.finish_reason == "length"
    assert [s[0] for s in _spans(final)] == ["v1", "v2"]


def test_max_weight_lag_1_ends_a_request_after_two_updates_not_after_one(stubs, tmp_path) -> None:
    service, control, _ = stubs
    reader = StreamReader(service.StreamChatCompletion(
        _long_chat(), metadata=((MAX_LAG_HEADER, "1"),), timeout=60))
    reader.wait_ids(5)
    _update(control, tmp_path, "v2")
    n = len(reader.ids())
    reader.wait_ids(n + 5)  # still running on v2
    assert reader.is_alive() and reader.error is None
    _update(control, tmp_path, "v3")
    final = _final(reader)
    assert final.finish_reason == "abort"
    assert final.stop_reason.string_value.startswith("WEIGHT_LAG_EXCEEDED:")
    assert [s[0] for s in _spans(final)] == ["v1", "v2"], "no token of v3"


def test_a_request_pinned_to_another_version_is_refused_retry_safe(stubs) -> None:
    service, _, engine = stubs
    before = len(engine.requests)  # the warm-up's
    err = _refused(lambda: service.CreateChatCompletion(
        chat_request(max_tokens=4), metadata=((EXACT_VERSION_HEADER, "v0"),), timeout=10),
        grpc.StatusCode.UNAVAILABLE, "WEIGHT_VERSION_MISMATCH")
    assert (RETRY_SAFE_TRAILER, "1") in (err.trailing_metadata() or ())
    assert "'v1'" in err.details() and "'v0'" in err.details()
    assert len(engine.requests) == before, "refused before any engine work"
    ok = service.CreateChatCompletion(chat_request(max_tokens=4),
                                      metadata=((EXACT_VERSION_HEADER, "v1"),), timeout=10)
    assert ok.choices[0].finish_reason == "length"


@pytest.mark.parametrize(("metadata", "param", "reason"), [
    (((MAX_LAG_HEADER, "-1"),), MAX_LAG_HEADER, "VALUE_OUT_OF_RANGE"),
    (((MAX_LAG_HEADER, "one"),), MAX_LAG_HEADER, "INVALID_FORMAT"),
    (((EXACT_VERSION_HEADER, ""),), EXACT_VERSION_HEADER, "EMPTY_VALUE"),
    (((EXACT_VERSION_HEADER, "v1"), (MAX_LAG_HEADER, "1")), MAX_LAG_HEADER, "FIELDS_CONFLICT"),
])
def test_bad_bounds_in_metadata_name_the_header(stubs, metadata, param, reason) -> None:
    service, _, _ = stubs
    err = _refused(lambda: service.CreateChatCompletion(chat_request(max_tokens=4),
                                                        metadata=metadata, timeout=10),
                   grpc.StatusCode.INVALID_ARGUMENT, reason)
    assert error_info(err).metadata["param"] == param


@pytest.mark.parametrize("header", [MIN_VERSION_HEADER, EXACT_VERSION_HEADER, MAX_LAG_HEADER])
def test_long_version_headers_are_refused_naming_the_header(stubs, header) -> None:
    """6,000 digits (gRPC's own 8 KiB metadata limit refuses 100,000 before
    any handler): more than int() converts, so x-min-weight-version was
    INTERNAL; every version header now refuses it as too long."""
    service, control, _ = stubs
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="7"), timeout=5)
    err = _refused(lambda: service.CreateChatCompletion(
        chat_request(max_tokens=2), metadata=((header, "9" * 6000),), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT, "VALUE_TOO_LONG")
    assert error_info(err).metadata["param"] == header


def test_a_min_version_of_256_characters_compares_by_its_number(stubs) -> None:
    service, control, _ = stubs
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="7"), timeout=5)
    ok = service.CreateChatCompletion(chat_request(max_tokens=2), timeout=10,
                                      metadata=((MIN_VERSION_HEADER, "0" * 255 + "6"),))
    assert ok.choices[0].finish_reason == "length"
    _refused(lambda: service.CreateChatCompletion(
        chat_request(max_tokens=2), metadata=((MIN_VERSION_HEADER, "0" * 255 + "8"),), timeout=10),
        grpc.StatusCode.UNAVAILABLE, "WEIGHT_VERSION_BEHIND")


def test_a_set_weight_version_ends_a_pinned_request_before_relabelling(stubs) -> None:
    service, control, _ = stubs
    reader = StreamReader(service.StreamChatCompletion(
        _long_chat(), metadata=((EXACT_VERSION_HEADER, "v1"),), timeout=60))
    reader.wait_ids(5)
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1b"), timeout=5)
    final = _final(reader)
    assert final.finish_reason == "abort"
    assert [s[0] for s in _spans(final)] == ["v1"]


# -- body fields: chat/completion nvext, Generate's root, Session starts -------

def test_body_fields_bound_chat_generate_and_completion(stubs, tmp_path) -> None:
    service, control, _ = stubs
    chat = StreamReader(service.StreamChatCompletion(
        _long_chat(nvext={"exact_weight_version": "v1"}), timeout=60))
    gen = StreamReader(service.StreamGenerate(json_format.ParseDict(
        {"token_ids": [5, 6, 7], "exact_weight_version": "v1",
         "sampling_params": {"max_tokens": 400, "ignore_eos": True}},
        generate_pb2.GenerateRequest()), timeout=60))
    comp = StreamReader(service.StreamCompletion(json_format.ParseDict(
        {"prompt": "Hello", "max_tokens": 400, "ignore_eos": True, "return_token_ids": True,
             "nvext": {"max_weight_lag": 0}},
        completion_pb2.CreateCompletionRequest()), timeout=60))
    for reader in (chat, gen, comp):
        reader.wait_ids(3)
    _update(control, tmp_path, "v2")
    for reader, why in ((chat, "WEIGHT_VERSION_CHANGED"), (gen, "WEIGHT_VERSION_CHANGED"),
                        (comp, "WEIGHT_LAG_EXCEEDED")):
        final = _final(reader)
        assert final.finish_reason == "abort"
        assert final.stop_reason.string_value.startswith(why + ":")
    state = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state
    assert dict(state.requests_ended_by_bound) == {
        "WEIGHT_VERSION_CHANGED": 2,
        "WEIGHT_LAG_EXCEEDED": 1,
    }
    assert state.bounded_requests == 0


def test_the_body_wins_over_the_metadata(stubs) -> None:
    service, _, _ = stubs
    ok = service.CreateChatCompletion(
        chat_request(max_tokens=4, nvext={"exact_weight_version": "v1"}),
        metadata=((EXACT_VERSION_HEADER, "v0"),),
        timeout=10,
    )
    assert ok.choices[0].finish_reason == "length"


@pytest.mark.parametrize(("nvext", "param", "reason"), [
    ({"max_weight_lag": -1}, "nvext.max_weight_lag", "VALUE_OUT_OF_RANGE"),
    ({"exact_weight_version": ""}, "nvext.exact_weight_version", "EMPTY_VALUE"),
    ({"exact_weight_version": "v1", "max_weight_lag": 0}, "nvext.max_weight_lag",
     "FIELDS_CONFLICT"),
])
def test_bad_bounds_in_the_body_name_the_field(stubs, nvext, param, reason) -> None:
    service, _, _ = stubs
    err = _refused(
        lambda: service.CreateChatCompletion(chat_request(max_tokens=4, nvext=nvext), timeout=10),
        grpc.StatusCode.INVALID_ARGUMENT,
        reason,
    )
    assert error_info(err).metadata["param"] == param


def test_a_session_start_carries_its_bound(stubs, tmp_path) -> None:
    service, control, _ = stubs
    session = RawSession(service)
    try:
        session.send(start_generate("wrong", token_ids=[5, 6], exact_weight_version="v0",
                                    sampling_params={"max_tokens": 4}))
        error = session.until_terminal("wrong")[-1].error
        assert (error.reason, error.param) == ("WEIGHT_VERSION_MISMATCH", "exact_weight_version")
        session.send(
            start_generate(
                "pinned",
                token_ids=[5, 6],
                exact_weight_version="v1",
                stream=True,
                sampling_params={"max_tokens": 400, "ignore_eos": True},
            )
        )
        session.until(lambda ev: ev.request_id == "pinned" and ev.generate_chunk.choices)
        _update(control, tmp_path, "v2")
        events = session.until_terminal("pinned")
        assert events[-1].WhichOneof("event") == "done"
        final = [c for ev in events for c in ev.generate_chunk.choices if c.finish_reason][-1]
        assert final.finish_reason == "abort"
        assert final.stop_reason.string_value.startswith("WEIGHT_VERSION_CHANGED:")
    finally:
        session.close()


# -- --salt-cache-by-version ---------------------------------------------------

@pytest.mark.parametrize("salted", [False, True])
def test_salting_by_version_makes_a_cached_prefix_miss_after_an_update(salted, tmp_path) -> None:
    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, enable_control=True, salt_cache_by_version=salted) as server:
        with grpc.insecure_channel(server.address) as ch:
            service = service_pb2_grpc.TokenwireServiceStub(ch)
            control = control_pb2_grpc.ControlServiceStub(ch)
            prompt = chat_request(max_tokens=2, messages=[{"role": "user", "content": "x" * 200}])

            def cached() -> int:
                return service.CreateChatCompletion(
                    prompt, timeout=10
                ).usage.prompt_tokens_details.cached_tokens

            cached()
            assert cached() > 0, "the prefix is cached on one version"
            control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                path=str(tmp_path), weight_version="v2", clear_cache=False), timeout=30)
            if salted:
                assert cached() == 0, "no block of the old weights is reused, without any reset"
                before, after = (r.cache_salt or "" for r in engine.requests[-2:])
                assert before.endswith(":default") and after.endswith(":v2") and "weights:" in after
                assert cached() > 0, "the new version's blocks are reused"
            else:
                assert cached() > 0, "without salting only a reset keeps old KV out"


# -- AnnounceWeightVersion: a replica that has not committed is fenced ---------

def test_an_announced_version_fences_lag_0_until_committed(stubs, tmp_path) -> None:
    service, control, _ = stubs
    state = control.AnnounceWeightVersion(
        control_pb2.AnnounceWeightVersionRequest(weight_version="v2"), timeout=5).state
    assert (state.announced_version, state.weight_version) == ("v2", "v1")
    err = _refused(lambda: service.CreateChatCompletion(
        chat_request(max_tokens=2, nvext={"max_weight_lag": 0}), timeout=10),
        grpc.StatusCode.UNAVAILABLE, "WEIGHT_LAG_BEHIND")
    assert (RETRY_SAFE_TRAILER, "1") in (err.trailing_metadata() or ())
    lag1 = service.CreateChatCompletion(
        chat_request(max_tokens=2, nvext={"max_weight_lag": 1}), timeout=10
    )
    assert lag1.choices[0].finish_reason == "length", "one behind is within a lag of 1"
    _update(control, tmp_path, "v2")
    state = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state
    assert (state.announced_version, state.weight_version) == ("", "v2"), (
        "committed: no longer pending"
    )
    ok = service.CreateChatCompletion(
        chat_request(max_tokens=2, nvext={"max_weight_lag": 0}), timeout=10
    )
    assert ok.choices[0].finish_reason == "length"
    # An announce withdrawn (a rolled-back fleet update) fences nothing.
    control.AnnounceWeightVersion(
        control_pb2.AnnounceWeightVersionRequest(weight_version="v3"), timeout=5
    )
    control.AnnounceWeightVersion(
        control_pb2.AnnounceWeightVersionRequest(weight_version=""), timeout=5
    )
    ok = service.CreateChatCompletion(
        chat_request(max_tokens=2, nvext={"max_weight_lag": 0}), timeout=10
    )
    assert ok.choices[0].finish_reason == "length"


@pytest.mark.parametrize(("server_salts", "request_salts"), [(False, True), (True, False)])
def test_salting_by_version_per_request(server_salts, request_salts, tmp_path) -> None:
    """nvext.salt_cache_by_version overrides --salt-cache-by-version for one request."""
    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, enable_control=True, salt_cache_by_version=server_salts) as server:
        with grpc.insecure_channel(server.address) as ch:
            service = service_pb2_grpc.TokenwireServiceStub(ch)
            control = control_pb2_grpc.ControlServiceStub(ch)
            prompt = chat_request(max_tokens=2, messages=[{"role": "user", "content": "y" * 200}],
                                  nvext={"salt_cache_by_version": request_salts})

            def cached() -> int:
                return service.CreateChatCompletion(
                    prompt, timeout=10
                ).usage.prompt_tokens_details.cached_tokens

            cached()
            assert cached() > 0
            control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                path=str(tmp_path), weight_version="v2", clear_cache=False), timeout=30)
            assert (cached() == 0) is request_salts
