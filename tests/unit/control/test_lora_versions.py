"""Runtime LoRA adapters keep the attribution promise (issue #32 item 6):
the tokens an adapter sampled carry a version that names the adapter and
its load ("<version>+lora:<name>@<n>"); reloading an adapter under a name
loaded before (in place, or after an unload) resets the prefix cache,
whose blocks vLLM keys by the adapter's name and folder, not its load; and
the served model's name cannot be an adapter's (requests naming it get the
base model)."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest

from tests.rpc import chat_request, error_info
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc, service_pb2_grpc

SERVED = "fake-model"


@pytest.fixture()
def stubs():
    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, enable_control=True, served_model_name=SERVED,
                      weight_version="step-1") as server:
        with grpc.insecure_channel(server.address) as ch:
            yield (service_pb2_grpc.TokenwireServiceStub(ch),
                   control_pb2_grpc.ControlServiceStub(ch), engine)


def _load(control, name: str, path: Path, inplace: bool = False) -> None:
    control.LoadLoraAdapter(control_pb2.LoadLoraAdapterRequest(
        lora_name=name, lora_path=str(path), load_inplace=inplace), timeout=10)


def _adapter(tmp_path: Path, name: str) -> Path:
    folder = tmp_path / name
    folder.mkdir()
    (folder / "adapter_model.safetensors").write_bytes(b"adapter")
    return folder


def _spans(infer, model: str) -> list[str]:
    resp = infer.CreateChatCompletion(chat_request(model=model, max_tokens=3), timeout=10)
    return [s.version for s in resp.choices[0].weight_versions]


def test_the_spans_of_a_lora_request_name_the_adapter_and_its_load(stubs, tmp_path) -> None:
    infer, control, _ = stubs
    sql, poem = _adapter(tmp_path, "sql"), _adapter(tmp_path, "poem")
    _load(control, "sql", sql)
    _load(control, "poem", poem)
    assert _spans(infer, SERVED) == ["step-1"]  # the base model: its version alone
    assert _spans(infer, "sql") == ["step-1+lora:sql@1"]
    assert _spans(infer, "poem") == ["step-1+lora:poem@2"]
    _load(control, "sql", sql, inplace=True)  # rewritten in its folder, loaded again
    assert _spans(infer, "sql") == ["step-1+lora:sql@3"]
    control.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="step-2"),
                             timeout=10)
    assert _spans(infer, "sql") == ["step-2+lora:sql@3"]


def test_reloading_an_adapter_resets_the_prefix_cache(stubs, tmp_path) -> None:
    infer, control, engine = stubs
    sql = _adapter(tmp_path, "sql")
    _load(control, "sql", sql)
    prompt = chat_request(model="sql", max_tokens=2,
                          messages=[{"role": "user", "content": "x" * 200}])

    def cached() -> int:
        return infer.CreateChatCompletion(
            prompt, timeout=10
        ).usage.prompt_tokens_details.cached_tokens

    assert cached() == 0 and cached() > 0  # the adapter's own blocks are reused
    (sql / "adapter_model.safetensors").write_bytes(b"other adapter")
    _load(control, "sql", sql, inplace=True)
    assert cached() == 0  # the old adapter's KV is not reused by the new one
    assert cached() > 0
    control.UnloadLoraAdapter(control_pb2.UnloadLoraAdapterRequest(lora_name="sql"), timeout=10)
    _load(control, "sql", sql)  # the same name and folder again, after an unload
    assert cached() == 0
    resets = engine.resets
    _load(control, "poem", _adapter(tmp_path, "poem"))  # a name new here: nothing cached of it
    assert engine.resets == resets


def test_the_served_model_name_is_not_an_adapter_name(stubs, tmp_path) -> None:
    infer, control, engine = stubs
    with pytest.raises(grpc.RpcError) as exc:
        _load(control, SERVED, _adapter(tmp_path, "sql"))
    assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(exc.value)
    assert (info.reason, info.metadata["param"]) == ("LORA_NAME_IS_MODEL", "lora_name")
    assert engine.lora_names() == []
    assert _spans(infer, SERVED) == ["step-1"]
