"""Control on the fake engine, for weight attribution (issue #23): timeouts
that leave engine work running, the weight-transfer path, and which folders
a load may read."""

from __future__ import annotations

import collections.abc
import functools
import time
from pathlib import Path

import grpc
import pytest

from tests.rpc import StreamReader, chat_request, error_info
from tests.servers import ThreadServer, fake_serving
from tokenwire.server.control.checks import check_folder
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import common_pb2, control_pb2, control_pb2_grpc, generate_pb2, service_pb2_grpc


@pytest.fixture()
def served(request) -> collections.abc.Iterator[tuple[ThreadServer, FakeEngine]]:
    """A server of its own; settings from @pytest.mark.parametrize("served", [dict])."""
    engine = FakeEngine(max_model_len=512, token_delay=0.004)
    with fake_serving(engine, enable_control=True, **getattr(request, "param", {})) as server:
        yield server, engine
        engine.hold.clear()


@pytest.fixture()
def stubs(served):
    server, engine = served
    with grpc.insecure_channel(server.address) as ch:
        yield (
            service_pb2_grpc.TokenwireServiceStub(ch),
            control_pb2_grpc.ControlServiceStub(ch),
            engine,
        )


def _state(control) -> control_pb2.ControlState:
    return control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state


def _eventually(check: collections.abc.Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _refused(call, code: grpc.StatusCode, reason: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as exc:
        call()
    assert exc.value.code() == code, exc.value.details()
    assert error_info(exc.value).reason == reason, exc.value.details()
    return exc.value


def _long_chat(**kw):
    return chat_request(max_tokens=80, ignore_eos=True, return_token_ids=True, **kw)


def _spans(choice) -> list[tuple[str, int, int]]:
    return [(s.version, s.start, s.end) for s in choice.weight_versions]


def _final(reader: StreamReader):
    return [c for m in reader.msgs for c in m.choices if c.finish_reason][-1]


# -- 10: a deadline stops the waiting, not the engine -------------------------

SHORT = {"control_timeout_seconds": 0.5}


@pytest.mark.parametrize("served", [SHORT], indirect=True)
def test_a_load_that_outlives_its_deadline_is_labelled_as_failed_once_it_ends(
    stubs, tmp_path
) -> None:
    _, control, engine = stubs
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
    engine.hold.add("reload")  # the engine is slow to load
    _refused(lambda: control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(tmp_path), weight_version="v2"), timeout=30),
        grpc.StatusCode.DEADLINE_EXCEEDED, "CONTROL_TIMEOUT")
    # The engine is still loading: the next operation waits for it, it does not run beside it.
    err = _refused(lambda: control.Pause(control_pb2.PauseRequest(), timeout=30),
                   grpc.StatusCode.DEADLINE_EXCEEDED, "CONTROL_TIMEOUT")
    assert "still busy with: loading weights" in err.details()
    assert engine.loaded_paths == []
    engine.hold.clear()  # the load ends after its caller stopped waiting
    _eventually(lambda: _state(control).load_failed, "the late load was never accounted for")
    state = _state(control)
    # Recorded state and engine agree: paused, and labelled as possibly mixed weights.
    assert engine.loaded_paths == [str(tmp_path.resolve())]
    assert state.weight_version == engine.version == "v1+failed-load"
    assert state.paused and engine._hold_new and state.pause_mode == "keep"
    assert "stopped waiting" in state.last_error and state.weight_path == ""
    _refused(lambda: control.Resume(control_pb2.ResumeRequest(), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHTS_FAILED_LOAD")
    # Loading again (the engine is quick now) clears it.
    state = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(tmp_path), weight_version="v2"), timeout=30).state
    assert state.weight_version == engine.version == "v2" and not state.load_failed
    assert state.paused, "the failed update had paused: the caller resumes"
    control.Resume(control_pb2.ResumeRequest(), timeout=5)
    assert not engine._hold_new


@pytest.mark.parametrize("served", [SHORT], indirect=True)
def test_a_pause_that_outlives_its_deadline_is_recorded_once_the_engine_pauses(stubs) -> None:
    _, control, engine = stubs
    engine.hold.add("pause")
    _refused(lambda: control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=30),
             grpc.StatusCode.DEADLINE_EXCEEDED, "CONTROL_TIMEOUT")
    engine.hold.clear()
    _eventually(lambda: _state(control).paused, "the engine paused, the record never did")
    state = _state(control)
    assert engine._hold_new and state.pause_mode == "keep"
    assert control.IsPaused(control_pb2.IsPausedRequest(), timeout=5).is_paused
    assert not control.Resume(control_pb2.ResumeRequest(), timeout=5).state.paused
    assert not engine._hold_new


# -- 11: the weight-transfer path pauses, resets and labels -------------------

def _transfer(control, version: str, **update_info) -> control_pb2.ControlState:
    control.StartWeightUpdate(control_pb2.StartWeightUpdateRequest(), timeout=10)
    request = control_pb2.UpdateWeightsRequest()
    request.update_info.SetInParent()  # vLLM's body names update_info, even when empty
    request.update_info.update(update_info)
    control.UpdateWeights(request, timeout=10)
    return control.FinishWeightUpdate(
        control_pb2.FinishWeightUpdateRequest(weight_version=version), timeout=10).state


def test_a_transfer_pauses_at_start_and_resets_and_resumes_at_finish(stubs, tmp_path) -> None:
    infer, control, engine = stubs
    engine.transfer_backend = True
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="t0"), timeout=5)
    prompt = chat_request(max_tokens=2, messages=[{"role": "user", "content": "x" * 200}])
    infer.CreateChatCompletion(prompt, timeout=10)
    assert (
        infer.CreateChatCompletion(prompt, timeout=10).usage.prompt_tokens_details.cached_tokens > 0
    )
    generation = _state(control).generation
    reader = StreamReader(infer.StreamChatCompletion(_long_chat(), timeout=60))
    reader.wait_ids(5)
    control.InitWeightTransfer(control_pb2.InitWeightTransferRequest(), timeout=10)
    control.StartWeightUpdate(control_pb2.StartWeightUpdateRequest(), timeout=10)
    state = _state(control)
    assert state.paused and state.pause_mode == "keep", (
        "tokens sampled mid-transfer would mix weights"
    )
    # Mid-transfer: no resume, no other load.
    _refused(lambda: control.Resume(control_pb2.ResumeRequest(), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_TRANSFER_IN_PROGRESS")
    _refused(lambda: control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(tmp_path)), timeout=5), grpc.StatusCode.FAILED_PRECONDITION,
        "WEIGHT_TRANSFER_IN_PROGRESS")
    request = control_pb2.UpdateWeightsRequest()
    request.update_info.update({"names": ["w"]})
    control.UpdateWeights(request, timeout=10)
    state = control.FinishWeightUpdate(
        control_pb2.FinishWeightUpdateRequest(weight_version="t1"), timeout=10).state
    assert not state.paused and state.weight_version == "t1" and state.generation == generation + 1
    assert state.weight_path == "" and not state.load_failed
    assert engine.transfers == ["init", "start", "update", "finish"]
    reader.join(30)
    assert reader.error is None and len(reader.ids()) == 80
    spans = _spans(_final(reader))
    assert [v for v, _, _ in spans] == ["t0", "t1"] and spans[1][2] == 80
    # The prefix cache held the old weights' KV: reset.
    after = infer.CreateChatCompletion(prompt, timeout=10)
    assert after.usage.prompt_tokens_details.cached_tokens == 0
    assert _spans(after.choices[0]) == [("t1", 0, 2)]


def test_a_transfer_the_caller_paused_for_stays_paused(stubs) -> None:
    _, control, engine = stubs
    engine.transfer_backend = True
    control.Pause(control_pb2.PauseRequest(mode="abort"), timeout=5)
    state = _transfer(control, "t1")
    assert state.paused and state.pause_mode == "abort" and state.weight_version == "t1"


def test_a_failed_transfer_step_poisons_the_version_until_a_clean_transfer_finishes(stubs) -> None:
    _, control, engine = stubs
    engine.transfer_backend = True
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="t0"), timeout=5)
    control.StartWeightUpdate(control_pb2.StartWeightUpdateRequest(), timeout=10)
    request = control_pb2.UpdateWeightsRequest()
    request.update_info.update({"fail": True})
    _refused(lambda: control.UpdateWeights(request, timeout=10),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_TRANSFER_FAILED")
    state = _state(control)
    assert state.load_failed and state.paused and state.weight_version == "t0+failed-load"
    _refused(lambda: control.Resume(control_pb2.ResumeRequest(), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHTS_FAILED_LOAD")
    # The trainer sends the batch again and finishes: the failed batch may have left
    # tensors the resent one does not cover, so the label stays and generation stays paused.
    request.update_info.update({"fail": False})
    control.UpdateWeights(request, timeout=10)
    generation = _state(control).generation
    err = _refused(lambda: control.FinishWeightUpdate(
        control_pb2.FinishWeightUpdateRequest(weight_version="t1"), timeout=10),
        grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_TRANSFER_INCOMPLETE")
    assert "'t1' is not applied" in err.details()
    state = _state(control)
    assert state.load_failed and state.paused and state.weight_version == "t0+failed-load"
    assert state.generation == generation + 1 and "update weights" in state.last_error
    assert engine.transfers[-1] == "finish"  # the engine's transfer is ended: a new one may start
    _refused(lambda: control.Resume(control_pb2.ResumeRequest(), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHTS_FAILED_LOAD")
    # A whole transfer with no failed step clears it (the failed one had paused: the caller
    # resumes).
    state = _transfer(control, "t1")
    assert not state.load_failed and state.paused and state.weight_version == "t1"
    assert not control.Resume(control_pb2.ResumeRequest(), timeout=5).state.paused


def test_a_forced_resume_abandons_a_transfer_with_a_poisoned_label(stubs) -> None:
    infer, control, engine = stubs
    engine.transfer_backend = True
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="t0"), timeout=5)
    control.StartWeightUpdate(control_pb2.StartWeightUpdateRequest(), timeout=10)
    state = control.Resume(control_pb2.ResumeRequest(force=True), timeout=5).state
    assert not state.paused and state.load_failed and state.weight_version == "t0+failed-load"
    out = infer.Generate(generate_pb2.GenerateRequest(
        token_ids=[5, 6], sampling_params=common_pb2.SamplingParams(max_tokens=2)), timeout=10)
    assert _spans(out.choices[0]) == [("t0+failed-load", 0, 2)]
    _refused(lambda: control.FinishWeightUpdate(control_pb2.FinishWeightUpdateRequest(), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_TRANSFER_NOT_STARTED")


def test_updates_and_finish_need_a_start(stubs) -> None:
    _, control, engine = stubs
    engine.transfer_backend = True
    request = control_pb2.UpdateWeightsRequest()
    request.update_info.update({"names": ["w"]})
    _refused(lambda: control.UpdateWeights(request, timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_TRANSFER_NOT_STARTED")
    assert not _state(control).paused and not _state(control).load_failed


def test_a_start_the_engine_refuses_leaves_generation_running(stubs) -> None:
    _, control, engine = stubs  # no transfer backend (as on CPU)
    _refused(lambda: control.StartWeightUpdate(control_pb2.StartWeightUpdateRequest(), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_TRANSFER_FAILED")
    state = _state(control)
    assert not state.paused and not state.load_failed and not engine._hold_new


# -- LOW: which folders a load may read ---------------------------------------

def _folder(path: Path, *files: str) -> Path:
    path.mkdir(parents=True)
    for name in files:
        (path / name).write_bytes(b"")
    return path


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return _folder(tmp_path / "root")


@pytest.fixture()
def rooted(root: Path, request) -> collections.abc.Iterator[tuple[ThreadServer, FakeEngine]]:
    engine = FakeEngine(max_model_len=512)
    engine.weight_files = "*.safetensors"  # as vLLM
    with fake_serving(engine, enable_control=True, weights_root=str(root)) as server:
        yield server, engine


def test_loads_outside_the_weights_root_or_without_safetensors_are_refused(
    rooted, root, tmp_path
) -> None:
    server, engine = rooted
    outside = _folder(tmp_path / "outside", "model.safetensors")
    (root / "link").symlink_to(outside)
    _folder(root / "pickles", "pytorch_model.bin", "optimizer.pt", "config.json")
    _folder(root / "step-1", "model-00001-of-00001.safetensors", "config.json")
    bad = [
        ("path", str(outside), "PATH_OUTSIDE_WEIGHTS_ROOT"),
        ("path", str(root / ".." / "outside"), "PATH_OUTSIDE_WEIGHTS_ROOT"),
        ("path", str(root / "link"), "PATH_OUTSIDE_WEIGHTS_ROOT"),
        ("path", str(root / "pickles"), "WEIGHTS_NOT_SAFETENSORS"),
        ("path", str(root), "WEIGHTS_NOT_SAFETENSORS"),
        ("model_path", str(outside), "PATH_OUTSIDE_WEIGHTS_ROOT"),
    ]
    with grpc.insecure_channel(server.address) as ch:
        control = control_pb2_grpc.ControlServiceStub(ch)
        for param, path, reason in bad:
            if param == "path":
                call = functools.partial(
                    control.UpdateWeightsFromPath,
                    control_pb2.UpdateWeightsFromPathRequest(path=path),
                    timeout=5,
                )
            else:
                call = functools.partial(
                    control.UpdateWeightsFromDisk,
                    control_pb2.UpdateWeightsFromDiskRequest(model_path=path),
                    timeout=5,
                )
            err = _refused(call, grpc.StatusCode.INVALID_ARGUMENT, reason)
            assert error_info(err).metadata["param"] == param
            assert not _state(control).paused, "bad input must harm nothing"
        assert engine.loaded_paths == []
        state = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
            path=str(root / "step-1"), weight_version="s1"), timeout=5).state
        assert state.weight_path == str((root / "step-1").resolve())
        assert engine.loaded_paths == [str((root / "step-1").resolve())]


def test_lora_adapters_outside_the_root_or_pickled_are_refused(rooted, root, tmp_path) -> None:
    server, engine = rooted
    outside = _folder(tmp_path / "outside-lora", "adapter_model.safetensors")
    _folder(root / "lora-bin", "adapter_model.bin", "adapter_config.json")
    good = _folder(root / "lora", "adapter_model.safetensors", "adapter_config.json")
    with grpc.insecure_channel(server.address) as ch:
        control = control_pb2_grpc.ControlServiceStub(ch)
        for path, reason in ((outside, "PATH_OUTSIDE_WEIGHTS_ROOT"),
                             (root / "lora-bin", "WEIGHTS_NOT_SAFETENSORS")):
            call = functools.partial(control.LoadLoraAdapter, control_pb2.LoadLoraAdapterRequest(
                lora_name="a", lora_path=str(path)), timeout=5)
            err = _refused(call, grpc.StatusCode.INVALID_ARGUMENT, reason)
            assert error_info(err).metadata["param"] == "lora_path"
        assert engine.loras == {}
        control.LoadLoraAdapter(control_pb2.LoadLoraAdapterRequest(
            lora_name="a", lora_path=str(good)), timeout=5)
        assert engine.loras == {"a": str(good.resolve())}


def test_the_start_up_model_is_loadable_outside_the_root(root, tmp_path) -> None:
    model = _folder(tmp_path / "model", "model.safetensors")
    assert check_folder(str(model), "path", root=str(root), also=str(model.resolve()),
                        files="*.safetensors") == str(model.resolve())
    with pytest.raises(InvalidArgument) as exc:
        check_folder(str(model), "path", root=str(root), files="*.safetensors")
    assert exc.value.reason == "PATH_OUTSIDE_WEIGHTS_ROOT" and exc.value.param == "path"


# -- issue 42 L-2: a load without a version still changes the label -----------------

def test_a_versionless_load_gets_a_label_of_its_own_and_splits_the_spans(
        stubs, tmp_path) -> None:
    """A load that names no version (prime-rl's /update_weights {weight_dir},
    SGLang's /update_weights_from_disk without weight_version) is labelled
    `<last named version>#<its generation>`: a request that straddles it shows
    two spans; another such load gets the next label (not `#a#b`); a failed
    load's `+failed-load` is cleared by a versionless load that succeeds."""
    infer, control, engine = stubs
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
    reader = StreamReader(infer.StreamChatCompletion(_long_chat(), timeout=60))
    reader.wait_ids(5)
    state = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(tmp_path)), timeout=10).state  # keep mode: the stream goes on
    first = f"v1#{state.generation}"
    assert state.weight_version == engine.version == first and not state.paused
    reader.join(30)
    spans = _spans(_final(reader))
    assert [s[0] for s in spans] == ["v1", first] and spans[0][2] == spans[1][1] > 0
    # prime-rl's body (no worker extension: vLLM's reload), then SGLang's.
    state = control.UpdateWeights(control_pb2.UpdateWeightsRequest(weight_dir=str(tmp_path)),
                                  timeout=10).state
    assert state.weight_version == f"v1#{state.generation}" != first
    engine.fail_reloads = 1
    _refused(lambda: control.UpdateWeightsFromDisk(control_pb2.UpdateWeightsFromDiskRequest(
        model_path=str(tmp_path)), timeout=10),
        grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_LOAD_FAILED")
    failed = _state(control)
    assert failed.weight_version == f"v1#{failed.generation - 1}+failed-load"
    state = control.UpdateWeightsFromDisk(control_pb2.UpdateWeightsFromDiskRequest(
        model_path=str(tmp_path)), timeout=10).state
    assert state.weight_version == engine.version == f"v1#{state.generation}"
    assert not state.load_failed and state.paused  # the failed load had paused
    control.Resume(control_pb2.ResumeRequest(), timeout=5)  # not refused: the label is clean
    # A named version is taken as named; the next versionless load builds on it.
    state = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(tmp_path), weight_version="step-7"), timeout=10).state
    assert state.weight_version == "step-7"
    state = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(tmp_path)), timeout=10).state
    assert state.weight_version == f"step-7#{state.generation}"
    # A weight transfer finished without a version, likewise.
    engine.transfer_backend = True
    state = _transfer(control, "")
    assert state.weight_version == engine.version == f"step-7#{state.generation}"
