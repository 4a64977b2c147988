"""ControlService on the fake engine: pause modes, weight updates with
version spans on every token, failed updates, access rules."""

from __future__ import annotations

import asyncio
import collections.abc
import time
from pathlib import Path

import grpc
import pytest

from tests.rpc import StreamReader, chat_request, error_info, stream_ids
from tests.servers import ThreadServer
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import (
    common_pb2,
    control_pb2,
    control_pb2_grpc,
    generate_pb2,
    models_pb2,
    service_pb2_grpc,
)

ADMIN = (("authorization", "Bearer admin-key"),)


def _start(**kw) -> tuple[ThreadServer, FakeEngine]:
    engine = FakeEngine(max_model_len=512, token_delay=0.004)
    settings = ServerSettings(engine="fake", port=0, max_model_len=512, enable_control=True, **kw)
    return ThreadServer(settings, engine).start(), engine


@pytest.fixture(scope="module")
def served() -> collections.abc.Iterator[tuple[ThreadServer, FakeEngine]]:
    server, engine = _start()
    yield server, engine
    server.stop()


@pytest.fixture()
def stubs(served):
    server, _ = served
    with grpc.insecure_channel(server.address) as ch:
        control = control_pb2_grpc.ControlServiceStub(ch)
        yield service_pb2_grpc.TokenwireServiceStub(ch), control
        control.Resume(control_pb2.ResumeRequest(force=True), timeout=10)  # never leave it paused


def _long_chat(**kw):
    return chat_request(max_tokens=80, ignore_eos=True, return_token_ids=True, **kw)


def test_keep_update_resume_splits_spans_and_loses_no_id(stubs, tmp_path: Path) -> None:
    infer, control = stubs
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=10)
    reader = StreamReader(infer.StreamChatCompletion(_long_chat(), timeout=60))
    reader.wait_ids(5)
    state = control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10).state
    assert state.paused and state.pause_mode == "keep"
    time.sleep(0.05)  # an output already in flight may still arrive
    frozen = len(stream_ids(reader.msgs).get(0, []))
    time.sleep(0.15)
    assert len(stream_ids(reader.msgs).get(0, [])) == frozen, "keep must freeze generation"
    assert infer.GetStats(models_pb2.GetStatsRequest(), timeout=5).paused
    resp = control.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=str(tmp_path), weight_version="v2"),
        timeout=10,
    )
    assert resp.state.paused, "the caller paused: the update must not resume"
    assert resp.state.weight_version == "v2" and resp.state.updates >= 1
    control.Resume(control_pb2.ResumeRequest(), timeout=10)
    reader.join(30)
    assert reader.error is None
    ids = stream_ids(reader.msgs)[0]
    assert len(ids) == 80
    last = [c for ch in reader.msgs for c in ch.choices if c.finish_reason][-1]
    spans = [(s.version, s.start, s.end) for s in last.weight_versions]
    assert spans[0][0] == "v1" and spans[-1] == ("v2", spans[-1][1], 80)
    assert len(spans) == 2 and spans[0][1] == 0 and spans[0][2] == spans[1][1] == frozen
    # A new request is attributed to v2 only, and the fingerprint says so.
    after = infer.CreateChatCompletion(chat_request(max_tokens=5, ignore_eos=True), timeout=10)
    assert [(s.version, s.start, s.end) for s in after.choices[0].weight_versions] == [("v2", 0, 5)]
    assert after.system_fingerprint == "v2"
    stats = infer.GetStats(models_pb2.GetStatsRequest(), timeout=5)
    assert not stats.paused and stats.weight_version == "v2"


def test_abort_mode_ends_streams_with_every_id_so_far(stubs) -> None:
    infer, control = stubs
    reader = StreamReader(infer.StreamChatCompletion(_long_chat(), timeout=60))
    reader.wait_ids(5)
    control.Pause(control_pb2.PauseRequest(mode="abort"), timeout=10)
    reader.join(10)
    assert reader.error is None, reader.error
    finals = [c for ch in reader.msgs for c in ch.choices if c.finish_reason]
    assert [c.finish_reason for c in finals] == ["abort"]
    ids = stream_ids(reader.msgs)[0]
    assert 5 <= len(ids) < 80
    span = finals[0].weight_versions
    assert span[-1].end == len(ids) and span[0].start == 0


def test_wait_mode_lets_running_requests_finish_and_new_ones_wait(stubs) -> None:
    infer, control = stubs
    reader = StreamReader(infer.StreamChatCompletion(_long_chat(), timeout=60))
    reader.wait_ids(3)
    control.Pause(control_pb2.PauseRequest(mode="wait"), timeout=20)
    reader.join(1)
    assert not reader.is_alive() and reader.error is None
    assert len(stream_ids(reader.msgs)[0]) == 80
    # While paused a new request waits; its own deadline bounds the wait.
    with pytest.raises(grpc.RpcError) as exc:
        infer.CreateChatCompletion(chat_request(max_tokens=3), timeout=0.5)
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    waiting = StreamReader(
        infer.StreamChatCompletion(chat_request(max_tokens=3, return_token_ids=True), timeout=20)
    )
    time.sleep(0.1)
    assert not any(c.token_ids for ch in waiting.msgs for c in ch.choices)
    control.Resume(control_pb2.ResumeRequest(), timeout=10)
    waiting.join(10)
    assert waiting.error is None and len(stream_ids(waiting.msgs)[0]) == 3


def test_update_from_path_pauses_and_resumes_itself_and_changes_output(
    stubs, tmp_path: Path
) -> None:
    infer, control = stubs
    before = infer.CreateChatCompletion(
        chat_request(max_tokens=8, return_token_ids=True), timeout=10
    )
    control.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=str(tmp_path), weight_version="v3"),
        timeout=10,
    )
    state = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state
    assert not state.paused and state.weight_version == "v3"
    after = infer.CreateChatCompletion(
        chat_request(max_tokens=8, return_token_ids=True), timeout=10
    )
    assert list(after.choices[0].token_ids) != list(before.choices[0].token_ids)
    gen = infer.Generate(
        generate_pb2.GenerateRequest(
            token_ids=[10, 11, 12], sampling_params=common_pb2.SamplingParams(max_tokens=4)
        ),
        timeout=10,
    )
    assert [(s.version, s.start, s.end) for s in gen.choices[0].weight_versions] == [("v3", 0, 4)]


def test_failed_load_poisons_the_version_and_resume_needs_force_or_a_good_load(
    tmp_path: Path,
) -> None:
    server, engine = _start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            infer = service_pb2_grpc.TokenwireServiceStub(ch)
            control = control_pb2_grpc.ControlServiceStub(ch)
            control.SetWeightVersion(
                control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5
            )
            generation = _state(control).generation
            reader = StreamReader(infer.StreamChatCompletion(_long_chat(), timeout=60))
            reader.wait_ids(5)
            broken = tmp_path / "broken"
            broken.mkdir()
            (broken / "BROKEN").write_text("x")
            with pytest.raises(grpc.RpcError) as exc:
                control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                    path=str(broken), weight_version="v2"), timeout=10)
            assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert error_info(exc.value).reason == "WEIGHT_LOAD_FAILED"
            state = _state(control)
            assert state.paused and state.load_failed and state.weight_path == ""
            assert state.weight_version == "v1+failed-load" == engine.version
            assert state.generation == generation + 1
            assert "broken checkpoint" in state.last_error
            # Resume is refused, naming the failed load; the error stays.
            with pytest.raises(grpc.RpcError) as exc:
                control.Resume(control_pb2.ResumeRequest(), timeout=5)
            assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert error_info(exc.value).reason == "WEIGHTS_FAILED_LOAD"
            assert str(broken) in exc.value.details()
            state = _state(control)
            assert state.paused and "broken checkpoint" in state.last_error
            # Only a load that succeeds replaces the label.
            with pytest.raises(grpc.RpcError) as exc:
                control.SetWeightVersion(
                    control_pb2.SetWeightVersionRequest(new_version="v2"), timeout=5
                )
            assert error_info(exc.value).reason == "WEIGHTS_FAILED_LOAD"
            # Forced: generation goes on, every token labelled as from mixed weights.
            state = control.Resume(control_pb2.ResumeRequest(force=True), timeout=5).state
            assert not state.paused and state.load_failed and state.last_error == ""
            reader.join(30)
            assert reader.error is None
            final = [c for ch in reader.msgs for c in ch.choices if c.finish_reason][-1]
            spans = [(s.version, s.start, s.end) for s in final.weight_versions]
            assert [v for v, _, _ in spans] == ["v1", "v1+failed-load"] and spans[-1][2] == 80
            after = infer.CreateChatCompletion(
                chat_request(max_tokens=3, ignore_eos=True), timeout=10
            )
            assert [(s.version, s.end) for s in after.choices[0].weight_versions] == [
                ("v1+failed-load", 3)
            ]
            assert after.system_fingerprint == "v1+failed-load"
            # A load that succeeds clears it all; Resume needs no force again.
            good = tmp_path / "good"
            good.mkdir()
            state = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                path=str(good), weight_version="v2"), timeout=10).state
            assert not state.load_failed and state.weight_version == "v2" and not state.paused
            assert state.weight_path == str(good.resolve()) and state.last_error == ""
            control.Pause(control_pb2.PauseRequest(), timeout=5)
            assert not control.Resume(control_pb2.ResumeRequest(), timeout=5).state.paused
    finally:
        server.stop()


@pytest.mark.parametrize(("call", "param"), [
    (lambda c: c.Pause(control_pb2.PauseRequest(mode="later"), timeout=5), "mode"),
    (lambda c: c.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(), timeout=5),
     "path"),
    (lambda c: c.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path="/nonexistent/ckpt"), timeout=5), "path"),
    (lambda c: c.SetWeightVersion(
        control_pb2.SetWeightVersionRequest(new_version="x" * 300), timeout=5), "new_version"),
    (lambda c: c.Sleep(control_pb2.SleepRequest(level=7), timeout=5), "level"),
    (lambda c: c.UpdateWeightsFromDisk(
        control_pb2.UpdateWeightsFromDiskRequest(model_path="/x", load_format="gguf"),
        timeout=5), "load_format"),
    (lambda c: c.LoadLoraAdapter(control_pb2.LoadLoraAdapterRequest(lora_name="a"), timeout=5),
     "lora_path"),
])
def test_bad_control_input_is_invalid_argument_naming_the_field(stubs, call, param) -> None:
    _, control = stubs
    with pytest.raises(grpc.RpcError) as exc:
        call(control)
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc.value).metadata["param"] == param
    assert not control.IsPaused(control_pb2.IsPausedRequest(), timeout=5).is_paused


def test_platform_limits_are_failed_precondition(stubs) -> None:
    _, control = stubs
    for call in (
        lambda: control.Sleep(control_pb2.SleepRequest(level=1), timeout=5),
        lambda: control.StartWeightUpdate(control_pb2.StartWeightUpdateRequest(), timeout=5),
    ):
        with pytest.raises(grpc.RpcError) as exc:
            call()
        assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION


def test_abort_requests_by_id_and_reset_cache(stubs, served) -> None:
    infer, control = stubs
    _, engine = served
    reader = StreamReader(infer.StreamChatCompletion(_long_chat(request_id="mine-1"), timeout=30))
    reader.wait_ids(2)
    running = sorted(engine.running)
    resp = control.AbortRequests(control_pb2.AbortRequestsRequest(request_ids=running), timeout=5)
    assert resp.status == "aborted" and resp.aborted == len(running)
    reader.join(10)
    assert [c.finish_reason for ch in reader.msgs for c in ch.choices if c.finish_reason] == [
        "abort"
    ]
    assert control.ResetPrefixCache(control_pb2.ResetPrefixCacheRequest(), timeout=5).success


def test_lora_load_select_list_unload(stubs, served, tmp_path: Path) -> None:
    infer, control = stubs
    _, engine = served
    loaded = control.LoadLoraAdapter(
        control_pb2.LoadLoraAdapterRequest(lora_name="sql", lora_path=str(tmp_path)), timeout=5)
    assert list(loaded.lora_adapters) == ["sql"]
    resp = infer.CreateChatCompletion(chat_request(model="sql", max_tokens=2), timeout=10)
    assert resp.model == "sql" and engine.requests[-1].lora == "sql"
    infer.Generate(
        generate_pb2.GenerateRequest(
            model="sql", token_ids=[10, 11], sampling_params=common_pb2.SamplingParams(max_tokens=2)
        ),
        timeout=10,
    )
    assert engine.requests[-1].lora == "sql"
    infer.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
    assert engine.requests[-1].lora is None
    models = infer.ListModels(models_pb2.ListModelsRequest(), timeout=5).data
    assert [(m.id, m.parent) for m in models][1:] == [("sql", models[0].id)]
    with pytest.raises(grpc.RpcError) as exc:
        control.LoadLoraAdapter(
            control_pb2.LoadLoraAdapterRequest(lora_name="sql", lora_path=str(tmp_path)), timeout=5)
    assert exc.value.code() == grpc.StatusCode.ALREADY_EXISTS
    assert list(control.UnloadLoraAdapter(
        control_pb2.UnloadLoraAdapterRequest(lora_name="sql"), timeout=5).lora_adapters) == []
    with pytest.raises(grpc.RpcError) as exc:
        control.UnloadLoraAdapter(control_pb2.UnloadLoraAdapterRequest(lora_name="sql"), timeout=5)
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    with pytest.raises(grpc.RpcError) as exc:
        infer.CreateChatCompletion(chat_request(model="sql", max_tokens=2), timeout=10)
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    assert error_info(exc.value).metadata["param"] == "model"


def test_control_is_off_unless_enabled(fake_server) -> None:
    with grpc.insecure_channel(fake_server.address) as ch:
        with pytest.raises(grpc.RpcError) as exc:
            control_pb2_grpc.ControlServiceStub(ch).Pause(control_pb2.PauseRequest(), timeout=5)
    assert exc.value.code() == grpc.StatusCode.UNIMPLEMENTED


def test_admin_key_guards_control_and_the_inference_key_does_not() -> None:
    server, _ = _start(api_key="infer-key", admin_api_key="admin-key")
    try:
        with grpc.insecure_channel(server.address) as ch:
            control = control_pb2_grpc.ControlServiceStub(ch)
            infer = service_pb2_grpc.TokenwireServiceStub(ch)
            for md in ((("authorization", "Bearer infer-key"),), ()):
                with pytest.raises(grpc.RpcError) as exc:
                    control.Pause(control_pb2.PauseRequest(), timeout=5, metadata=md)
                assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert error_info(exc.value).metadata["param"] == "authorization"
            assert control.Pause(control_pb2.PauseRequest(), timeout=5, metadata=ADMIN).state.paused
            assert not control.Resume(
                control_pb2.ResumeRequest(), timeout=5, metadata=ADMIN
            ).state.paused
            # The inference key still serves inference.
            ok = infer.CreateChatCompletion(chat_request(max_tokens=2), timeout=5,
                                            metadata=(("authorization", "Bearer infer-key"),))
            assert ok.choices[0].finish_reason
    finally:
        server.stop()


def test_same_key_for_inference_and_admin_is_refused() -> None:
    engine = FakeEngine(max_model_len=512)
    settings = ServerSettings(engine="fake", port=0, max_model_len=512, enable_control=True,
                              api_key="k", admin_api_key="k")
    from tokenwire.server.runtime.app import start

    with pytest.raises(ValueError, match="must differ"):
        asyncio.run(start(settings, engine))


def test_spans_reach_session_events_and_engine_data(stubs) -> None:
    from tests.session_rpc import RawSession, by_request, start_chat, start_generate

    infer, control = stubs
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="s1"), timeout=10)
    s = RawSession(infer)
    s.send(
        start_chat("c", max_tokens=4, ignore_eos=True, nvext={"extra_fields": ["engine_data"]}),
        start_chat("cs", stream=True, max_tokens=3, ignore_eos=True),
        start_generate("g", token_ids=[5, 6], sampling_params={"max_tokens": 2}),
    )
    s.half_close()
    events = by_request(s.drain())
    chat = events["c"][0].chat_result
    assert [(w.version, w.start, w.end) for w in chat.choices[0].weight_versions] == [("s1", 0, 4)]
    ed = chat.choices[0].nvext.engine_data
    assert [(w.version, w.start, w.end) for w in ed.weight_versions] == [("s1", 0, 4)]
    assert [(w.version, w.end) for w in chat.nvext.engine_data.weight_versions] == [("s1", 4)]
    last = [c for ev in events["cs"] if ev.HasField("chat_chunk") for c in ev.chat_chunk.choices
            if c.finish_reason][-1]
    assert [(w.version, w.start, w.end) for w in last.weight_versions] == [("s1", 0, 3)]
    gen = events["g"][0].generate_result
    assert [(w.version, w.end) for w in gen.choices[0].weight_versions] == [("s1", 2)]


def test_lora_modules_at_start_load_good_ones_and_skip_bad_ones(tmp_path: Path) -> None:
    server, _ = _start(lora_modules=(f"good={tmp_path}", "bad=/no/such/adapter", "junk"))
    try:
        with grpc.insecure_channel(server.address) as ch:
            infer = service_pb2_grpc.TokenwireServiceStub(ch)
            models = infer.ListModels(models_pb2.ListModelsRequest(), timeout=5).data
            assert [m.id for m in models][1:] == ["good"]
            assert (
                infer.CreateChatCompletion(
                    chat_request(model="good", max_tokens=2), timeout=10
                ).model
                == "good"
            )
            assert (
                infer.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
                .choices[0]
                .finish_reason
            )
    finally:
        server.stop()


def _state(control) -> control_pb2.ControlState:
    return control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state


def test_state_reports_the_weights_folder_and_the_update_generation(tmp_path: Path) -> None:
    server, _ = _start()
    try:
        with grpc.insecure_channel(server.address) as ch:
            control = control_pb2_grpc.ControlServiceStub(ch)
            start = _state(control)
            assert (start.weight_path, start.generation, start.load_failed) == (
                "/fake/model",
                0,
                False,
            )
            link = tmp_path / "latest"
            (tmp_path / "step-1").mkdir()
            link.symlink_to(tmp_path / "step-1")
            after = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                path=str(link), weight_version="s1"), timeout=10).state
            # The real folder: a later change of the link does not change what it names.
            assert after.weight_path == str((tmp_path / "step-1").resolve())
            assert after.generation == 1 and not after.load_failed
            control.SetWeightVersion(
                control_pb2.SetWeightVersionRequest(new_version="s1b"), timeout=5
            )
            assert _state(control).generation == 2
    finally:
        server.stop()
