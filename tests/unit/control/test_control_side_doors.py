"""Control on the fake engine (issue #32, Trust III): the trainer routes that
reach the workers are weight changes like any other, and a worker method
that hangs does not hold the control lock."""

from __future__ import annotations

import collections.abc
import inspect
from pathlib import Path

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import StreamReader, chat_request, error_info
from tests.servers import ThreadServer, fake_serving
from tokenwire.server.control.servicer import REDACTED, redact_secrets
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import (
    common_pb2,
    control_pb2,
    control_pb2_grpc,
    generate_pb2,
    service_pb2_grpc,
)
from tokenwire.wire import EXACT_VERSION_HEADER

PRIME_RL_UPDATE = "update_weights_from_path"  # prime-rl's worker method


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    (tmp_path / "root").mkdir()
    return tmp_path / "root"


@pytest.fixture()
def served(request, root: Path) -> collections.abc.Iterator[tuple[ThreadServer, FakeEngine]]:
    """A server of its own, rooted at `root`, prime-rl's worker method allowed;
    more settings from @pytest.mark.parametrize("served", [dict])."""
    engine = FakeEngine(max_model_len=512, token_delay=0.004)
    settings = {"weights_root": str(root), "collective_rpc_allow": (PRIME_RL_UPDATE, "probe"),
                **getattr(request, "param", {})}
    with fake_serving(engine, enable_control=True, **settings) as server:
        yield server, engine
        engine.hold.clear()


@pytest.fixture()
def stubs(served):
    server, engine = served
    with grpc.insecure_channel(server.address) as ch:
        yield (service_pb2_grpc.TokenwireServiceStub(ch), control_pb2_grpc.ControlServiceStub(ch),
               engine)


def _state(control) -> control_pb2.ControlState:
    return control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state


def _refused(call, code: grpc.StatusCode, reason: str) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as exc:
        call()
    assert exc.value.code() == code, exc.value.details()
    assert error_info(exc.value).reason == reason, exc.value.details()
    return exc.value


def _final(reader: StreamReader):
    reader.join(30)
    return [c for m in reader.msgs for c in m.choices if c.finish_reason][-1]


def _weight_dir(control, folder: Path, timeout: float = 10) -> control_pb2.UpdateWeightsResponse:
    return control.UpdateWeights(control_pb2.UpdateWeightsRequest(weight_dir=str(folder)),
                                 timeout=timeout)


# -- 2: prime-rl's /update_weights {weight_dir} through its worker extension -------

def test_a_worker_weight_dir_update_is_a_weight_change(stubs, root: Path) -> None:
    infer, control, engine = stubs
    step = root / "step-1"
    step.mkdir()
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
    before = _state(control)
    resets = engine.resets
    reader = StreamReader(infer.StreamChatCompletion(
        chat_request(max_tokens=200, ignore_eos=True, return_token_ids=True),
        metadata=((EXACT_VERSION_HEADER, "v1"),), timeout=60))
    reader.wait_ids(3)
    resp = _weight_dir(control, step)
    assert resp.applied == f"weight_dir:{PRIME_RL_UPDATE}"
    assert engine.rpcs[-1] == (PRIME_RL_UPDATE, [str(step.resolve())], {})
    assert engine.loaded_paths == []  # the worker loaded, not tokenwire
    state = resp.state
    assert state.generation == before.generation + 1 and state.updates == before.updates + 1
    assert state.weight_path == str(step.resolve()) and not state.load_failed
    assert not state.paused and engine.resets == resets + 1
    # The request bound to the weights before the update was ended by it.
    final = _final(reader)
    assert final.finish_reason == "abort"
    assert final.stop_reason.string_value.startswith("WEIGHT_VERSION_CHANGED:")
    assert dict(_state(control).requests_ended_by_bound) == {"WEIGHT_VERSION_CHANGED": 1}


def test_a_worker_weight_dir_outside_the_root_is_refused_before_anything(stubs, tmp_path) -> None:
    _, control, engine = stubs
    outside = tmp_path / "outside"
    outside.mkdir()
    for folder in (outside, tmp_path / "missing"):
        err = _refused(lambda f=folder: _weight_dir(control, f), grpc.StatusCode.INVALID_ARGUMENT,
                       "PATH_OUTSIDE_WEIGHTS_ROOT")
        assert error_info(err).metadata["param"] == "weight_dir"
    assert engine.rpcs == [] and not _state(control).paused


@pytest.mark.parametrize("served", [{"collective_rpc_allow": (
    PRIME_RL_UPDATE, "reload_weights", "add_lora", "probe")}], indirect=True)
def test_a_raw_collective_rpc_of_a_weight_changing_method_is_refused(stubs, root: Path) -> None:
    """The worker's loader, allowed for /update_weights {weight_dir}, is not
    callable through /collective_rpc, where it would change the weights with
    no pause, label, generation or cache reset; nor is any other allowed
    weight-changing method."""
    _, control, engine = stubs
    before = _state(control)
    details = {}
    for method in (PRIME_RL_UPDATE, "reload_weights", "add_lora"):
        request = control_pb2.CollectiveRpcRequest(method=method)
        request.args.append(str(root))
        err = _refused(lambda r=request: control.CollectiveRpc(r, timeout=5),
                       grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_CHANGE_ROUTE_REQUIRED")
        assert error_info(err).metadata["param"] == "method"
        details[method] = err.details()
    assert "/update_weights {weight_dir}" in details[PRIME_RL_UPDATE]
    # One the operator did not allow is refused as before, for that.
    _refused(lambda: control.CollectiveRpc(control_pb2.CollectiveRpcRequest(method="load_model"),
                                           timeout=5),
             grpc.StatusCode.PERMISSION_DENIED, "COLLECTIVE_RPC_NOT_ALLOWED")
    after = _state(control)
    assert engine.rpcs == [] and after.generation == before.generation and not after.paused
    # An allowed method that changes nothing still runs.
    assert len(control.CollectiveRpc(control_pb2.CollectiveRpcRequest(method="probe"),
                                     timeout=5).results) == 1


# Issue 42 L-5: vLLM's worker methods that change the engine or write files.
NOT_READ_ONLY = ("checkpoint_restore", "start_draft_weight_update", "discard", "list_loras",
                 "save_sharded_state", "save_tensorized_model", "update_config", "profile",
                 "__init__", "_private")
ROUTED = ("reset_weights", "sleep", "wake_up", "init_weight_transfer_engine")


@pytest.mark.parametrize("served", [{"collective_rpc_allow": (
    *NOT_READ_ONLY, *ROUTED, "check_health", "get_supported_tasks", "probe")}], indirect=True)
def test_a_raw_collective_rpc_calls_only_vllms_read_only_methods_and_extensions(stubs) -> None:
    """Allowed or not, a raw CollectiveRpc never calls a method of vLLM's
    workers that changes the weights (refused naming its route), that
    changes the engine or writes files on the host, or a private name; it
    calls vLLM's read-only ones and a worker extension's methods the
    operator allowed."""
    _, control, engine = stubs
    before = _state(control)
    for method in NOT_READ_ONLY:
        err = _refused(lambda m=method: control.CollectiveRpc(
            control_pb2.CollectiveRpcRequest(method=m), timeout=5),
            grpc.StatusCode.FAILED_PRECONDITION, "WORKER_METHOD_NOT_READ_ONLY")
        assert error_info(err).metadata["param"] == "method"
    for method in ROUTED:
        err = _refused(lambda m=method: control.CollectiveRpc(
            control_pb2.CollectiveRpcRequest(method=m), timeout=5),
            grpc.StatusCode.FAILED_PRECONDITION, "WEIGHT_CHANGE_ROUTE_REQUIRED")
        assert "(" in err.details()  # the route that runs it as a weight change
    after = _state(control)
    assert engine.rpcs == [] and after.generation == before.generation and not after.paused
    assert after.weight_version == before.weight_version
    for method in ("check_health", "get_supported_tasks", "probe"):
        answer = control.CollectiveRpc(control_pb2.CollectiveRpcRequest(method=method), timeout=5)
        assert len(answer.results) == 1
    assert [m for m, _, _ in engine.rpcs] == ["check_health", "get_supported_tasks", "probe"]
    # Not allowed: refused for that, as before.
    _refused(lambda: control.CollectiveRpc(control_pb2.CollectiveRpcRequest(
        method="get_model_inspection"), timeout=5),
        grpc.StatusCode.PERMISSION_DENIED, "COLLECTIVE_RPC_NOT_ALLOWED")


def test_the_list_of_vllms_worker_methods_is_the_installed_vllms() -> None:
    """control/workers.py names every public attribute of vLLM's workers
    (a new vLLM method fails here until it is classified read-only or not)."""
    worker_base = pytest.importorskip("vllm.v1.worker.worker_base")
    gpu_worker = pytest.importorskip("vllm.v1.worker.gpu_worker")
    cpu_worker = pytest.importorskip("vllm.v1.worker.cpu_worker")
    from tokenwire.server.control.workers import READ_ONLY_VLLM_METHODS, VLLM_WORKER_METHODS

    names = {name for cls in (worker_base.WorkerBase, worker_base.WorkerWrapperBase,
                              gpu_worker.Worker, cpu_worker.CPUWorker)
             for name, _ in inspect.getmembers(cls) if not name.startswith("_")}
    assert names == VLLM_WORKER_METHODS
    assert READ_ONLY_VLLM_METHODS < VLLM_WORKER_METHODS


def test_a_failed_worker_load_is_labelled_and_stays_paused(stubs, root: Path) -> None:
    _, control, engine = stubs
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
    generation = _state(control).generation
    engine.fail_rpcs.add(PRIME_RL_UPDATE)
    _refused(lambda: _weight_dir(control, root), grpc.StatusCode.FAILED_PRECONDITION,
             "COLLECTIVE_RPC_FAILED")
    state = _state(control)
    assert state.load_failed and state.paused and state.weight_version == "v1+failed-load"
    assert engine.version == "v1+failed-load" and state.generation == generation + 1
    assert PRIME_RL_UPDATE in state.last_error
    _refused(lambda: control.Resume(control_pb2.ResumeRequest(), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHTS_FAILED_LOAD")
    engine.fail_rpcs.clear()  # the worker loads again: clean
    state = _weight_dir(control, root).state
    assert not state.load_failed and state.weight_path == str(root.resolve())


# -- LOW: a worker method that hangs gets the control timeout ------------------------

SHORT = {"control_timeout_seconds": 0.5}


@pytest.mark.parametrize("served", [SHORT], indirect=True)
def test_a_hanging_worker_method_releases_the_control_lock(stubs) -> None:
    _, control, engine = stubs
    engine.hold.add("rpc")  # the worker method never returns
    with pytest.raises(grpc.RpcError) as exc:
        control.CollectiveRpc(control_pb2.CollectiveRpcRequest(method="probe"), timeout=30)
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    assert engine.rpcs[-1][0] == "probe"
    # The next operation runs: the hung call does not hold the lock.
    assert control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=30).state.paused
    assert not control.Resume(control_pb2.ResumeRequest(), timeout=30).state.paused


@pytest.mark.parametrize("served", [SHORT], indirect=True)
def test_a_hanging_worker_load_is_labelled_as_failed(stubs, root: Path) -> None:
    _, control, engine = stubs
    engine.hold.add("rpc")
    with pytest.raises(grpc.RpcError) as exc:
        _weight_dir(control, root, timeout=30)
    assert exc.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    # Once the worker call's own limit (the control timeout) ends it: labelled, paused.
    state = control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=30).state
    assert state.load_failed and state.paused and state.weight_version == "default+failed-load"


# -- LOW: folder checks probe nothing outside the root and follow no file link out ---

def test_folder_checks_reveal_nothing_outside_the_root(stubs, root: Path, tmp_path) -> None:
    _, control, engine = stubs
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "weights.safetensors").write_bytes(b"")
    answers = []
    for folder in (secret, tmp_path / "no-such-folder", root / ".." / "secret"):
        err = _refused(lambda f=folder: control.UpdateWeightsFromPath(
            control_pb2.UpdateWeightsFromPathRequest(path=str(f)), timeout=5),
            grpc.StatusCode.INVALID_ARGUMENT, "PATH_OUTSIDE_WEIGHTS_ROOT")
        answers.append(err.details().replace(str(folder), "<path>"))
    assert len(set(answers)) == 1, answers  # existing or not: the same answer
    _refused(lambda: control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(root / "missing")), timeout=5), grpc.StatusCode.INVALID_ARGUMENT, "PATH_NOT_FOUND")
    assert engine.loaded_paths == []


def test_a_weight_file_linked_out_of_the_root_is_refused(stubs, root: Path, tmp_path) -> None:
    _, control, engine = stubs
    (tmp_path / "stolen.safetensors").write_bytes(b"")
    step = root / "step-1"
    step.mkdir()
    (step / "model.safetensors").symlink_to(tmp_path / "stolen.safetensors")
    lora = root / "lora"
    lora.mkdir()
    (lora / "adapter_model.safetensors").symlink_to(tmp_path / "stolen.safetensors")
    calls = [
        ("path", lambda: control.UpdateWeightsFromPath(
            control_pb2.UpdateWeightsFromPathRequest(path=str(step)), timeout=5)),
        ("weight_dir", lambda: _weight_dir(control, step)),
        ("lora_path", lambda: control.LoadLoraAdapter(control_pb2.LoadLoraAdapterRequest(
            lora_name="a", lora_path=str(lora)), timeout=5)),
    ]
    for param, call in calls:
        err = _refused(call, grpc.StatusCode.INVALID_ARGUMENT, "PATH_OUTSIDE_WEIGHTS_ROOT")
        assert error_info(err).metadata["param"] == param
        assert "model.safetensors" in err.details()
    assert engine.loaded_paths == [] and engine.rpcs == [] and engine.loras == {}
    # A link that stays inside the root is followed as before.
    (step / "model.safetensors").unlink()
    (root / "shared.safetensors").write_bytes(b"")
    (step / "model.safetensors").symlink_to(root / "shared.safetensors")
    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(path=str(step)),
                                  timeout=5)
    assert engine.loaded_paths == [str(step.resolve())]


# -- LOW: GetServerInfo names no secret ---------------------------------------------

def test_server_info_redacts_the_hf_token(stubs) -> None:
    _, control, engine = stubs
    engine.hf_token = "hf_SECRETSECRET"
    for fmt in ("json", "text"):
        info = control.GetServerInfo(control_pb2.GetServerInfoRequest(config_format=fmt), timeout=5)
        assert "hf_SECRETSECRET" not in str(info)
    info = json_format.MessageToDict(control.GetServerInfo(
        control_pb2.GetServerInfoRequest(config_format="json"), timeout=5))["vllmConfig"]
    assert info["model_config"]["hf_token"] == REDACTED
    assert info["model_config"]["max_num_batched_tokens"] == 8192  # not a secret


def test_secret_like_keys_are_redacted_at_any_depth() -> None:
    config = {"model_config": {"hf_token": "hf_x", "tokenizer": "t", "skip_tokenizer_init": False,
                               "returned_token_ids": [1], "max_num_batched_tokens": 5},
              "kv_transfer_config": {"kv_connector_extra_config": [
                  {"api_key": "k", "aws_secret_access_key": "s", "password": "p", "token": None}]}}
    assert redact_secrets(config) == {
        "model_config": {"hf_token": REDACTED, "tokenizer": "t", "skip_tokenizer_init": False,
                         "returned_token_ids": [1], "max_num_batched_tokens": 5},
        "kv_transfer_config": {"kv_connector_extra_config": [
            {"api_key": REDACTED, "aws_secret_access_key": REDACTED, "password": REDACTED,
             "token": None}]}}


# -- LOW: Sleep(level=2) discards the weights ------------------------------------

def _generate_spans(infer) -> list[tuple[str, int, int]]:
    out = infer.Generate(generate_pb2.GenerateRequest(
        token_ids=[5, 6], sampling_params=common_pb2.SamplingParams(max_tokens=2)), timeout=10)
    return [(s.version, s.start, s.end) for s in out.choices[0].weight_versions]


def test_weights_discarded_by_sleep_level_2_are_not_served_until_a_load(stubs, root: Path) -> None:
    infer, control, engine = stubs
    engine.sleep_mode = True
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="v1"), timeout=5)
    control.Sleep(control_pb2.SleepRequest(level=1), timeout=5)  # level 1 keeps the weights
    control.WakeUp(control_pb2.WakeUpRequest(), timeout=5)
    state = _state(control)
    assert not state.load_failed and not state.paused and state.weight_version == "v1"
    assert _generate_spans(infer) == [("v1", 0, 2)]
    control.Sleep(control_pb2.SleepRequest(level=2), timeout=5)
    state = _state(control)
    assert state.load_failed and state.weight_version == engine.version == "v1+failed-load"
    assert "level=2" in state.last_error
    # Awake, the engine holds garbage weights: generation stays paused, Resume is refused.
    control.WakeUp(control_pb2.WakeUpRequest(), timeout=5)
    state = _state(control)
    assert state.paused and engine._hold_new and not state.sleeping
    _refused(lambda: control.Resume(control_pb2.ResumeRequest(), timeout=5),
             grpc.StatusCode.FAILED_PRECONDITION, "WEIGHTS_FAILED_LOAD")
    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(root), weight_version="v2"), timeout=10)
    assert not control.Resume(control_pb2.ResumeRequest(), timeout=5).state.paused
    assert _generate_spans(infer) == [("v2", 0, 2)]


def test_a_wake_up_keeps_the_pause_it_found(stubs) -> None:
    _, control, engine = stubs
    engine.sleep_mode = True
    control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=5)
    control.Sleep(control_pb2.SleepRequest(level=1, mode="keep"), timeout=5)
    control.WakeUp(control_pb2.WakeUpRequest(), timeout=5)
    assert _state(control).paused and engine._hold_new  # the record and the engine agree
