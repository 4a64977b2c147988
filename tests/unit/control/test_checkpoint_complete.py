"""A partial checkpoint is refused before anything pauses (issue #32, LOW):
vLLM's reload only warns about the weights a checkpoint lacks and keeps
their old values (control/checkpoint.py)."""

from __future__ import annotations

import collections.abc
import json
import struct
from pathlib import Path

import grpc
import pytest

from tests.rpc import error_info
from tests.servers import ThreadServer, fake_serving
from tokenwire.server.control.checkpoint import check_complete, tensor_names
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc

TINY = Path(__file__).resolve().parents[3] / ".models" / "tiny-random-llama"


def _safetensors(path: Path, names: list[str], cut: int = 0) -> None:
    """A safetensors file holding one float32 per name (`cut` bytes short)."""
    header = {n: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]}
              for i, n in enumerate(names)}
    raw = json.dumps(header).encode()
    data = struct.pack("<Q", len(raw)) + raw + b"\0" * (4 * len(names))
    path.write_bytes(data[:len(data) - cut])


def _checkpoint(folder: Path, *shards: list[str], cut: int = 0) -> Path:
    folder.mkdir(parents=True)
    for i, names in enumerate(shards):
        _safetensors(folder / f"model-{i:05d}.safetensors", names, cut if i == 0 else 0)
    return folder


@pytest.fixture()
def served(tmp_path: Path) -> collections.abc.Iterator[tuple[ThreadServer, FakeEngine]]:
    engine = FakeEngine(max_model_len=512)
    engine.weight_files = "*.safetensors"  # as vLLM
    with fake_serving(engine, enable_control=True, weights_root=str(tmp_path)) as server:
        yield server, engine


def _load(control, folder: Path, version: str) -> control_pb2.ControlState:
    return control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
        path=str(folder), weight_version=version), timeout=10).state


def test_a_checkpoint_lacking_a_tensor_or_cut_short_is_refused(served, tmp_path: Path) -> None:
    server, engine = served
    names = ["embed.weight", "layers.0.mlp.weight", "layers.0.attn.weight", "norm.weight"]
    whole = _checkpoint(tmp_path / "step-1", names[:2], names[2:])
    partial = _checkpoint(tmp_path / "step-2", names[:2])  # the second shard never written
    cut = _checkpoint(tmp_path / "step-3", names[:2], names[2:], cut=3)
    with grpc.insecure_channel(server.address) as ch:
        control = control_pb2_grpc.ControlServiceStub(ch)
        assert _load(control, whole, "s1").weight_version == "s1"
        for folder, what in ((partial, "lacks 2 of the served model's 4 tensors"),
                             (cut, "not a whole safetensors file")):
            with pytest.raises(grpc.RpcError) as exc:
                _load(control, folder, "s2")
            assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            info = error_info(exc.value)
            assert (info.reason, info.metadata["param"]) == ("CHECKPOINT_INCOMPLETE", "path")
            assert what in exc.value.details()
            state = control.GetControlState(control_pb2.GetControlStateRequest(), timeout=5).state
            assert not state.paused and not state.load_failed and state.weight_version == "s1"
        assert engine.loaded_paths == [str(whole.resolve())]
        # The same tensors in other shards: whole.
        resharded = _checkpoint(tmp_path / "step-4", names[:1], names[1:])
        assert _load(control, resharded, "s4").weight_version == "s4"


@pytest.mark.skipif(not TINY.is_dir(), reason="make tiny-model")
def test_the_tiny_models_checkpoint_with_a_tensor_dropped_is_refused(tmp_path: Path) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file

    served = tensor_names(str(TINY), "*.safetensors")
    assert served and "model.embed_tokens.weight" in served
    with safe_open(str(TINY / "model.safetensors"), "pt") as f:
        tensors = {name: f.get_tensor(name) for name in f.keys()}
    dropped = sorted(served)[-1]
    del tensors[dropped]
    folder = tmp_path / "step-1"
    folder.mkdir()
    save_file(tensors, str(folder / "model.safetensors"))
    with pytest.raises(InvalidArgument) as exc:
        check_complete(str(folder), str(folder), "path", "*.safetensors", served)
    assert exc.value.reason == "CHECKPOINT_INCOMPLETE" and dropped in exc.value.message
    assert check_complete(str(TINY), str(TINY), "path", "*.safetensors", served) == served
