"""Client features' kwargs_data decoded with vLLM's own MsgpackDecoder but
never with its pickle extension (even where the operator allows pickle for
vLLM's IPC) and only vLLM's field factories by name: bytes a caller sent
are data, each refusal an INVALID_ARGUMENT naming the item."""

from __future__ import annotations

import pickle

import msgspec
import pytest

from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.engine.vllm.mm_features import VllmMultimodal


def decode(raw: bytes):  # type: ignore[no-untyped-def]
    media = object.__new__(VllmMultimodal)
    media._decoder = None
    return media._decode(raw, "features.kwargs_data.image[0]")


def test_a_vllm_item_decodes() -> None:
    from vllm.multimodal.inputs import MultiModalKwargsItem
    from vllm.v1.serial_utils import MsgpackEncoder

    (raw,) = MsgpackEncoder(size_threshold=2**62).encode(MultiModalKwargsItem.dummy(8))
    assert decode(bytes(raw))["dummy"].numel() == 8


def test_pickle_is_refused_even_when_vllm_allows_it(monkeypatch) -> None:
    monkeypatch.setenv("VLLM_ALLOW_INSECURE_SERIALIZATION", "1")
    evil = msgspec.msgpack.encode(msgspec.msgpack.Ext(1, pickle.dumps(print)))
    with pytest.raises(InvalidArgument) as info:
        decode(evil)
    assert info.value.param == "features.kwargs_data.image[0]"


def test_only_vllms_field_factories() -> None:
    body = {"dummy": {"data": None, "field": ["__init_subclass__", {}]}}
    with pytest.raises(InvalidArgument):
        decode(msgspec.msgpack.encode(body))


def test_qwen_vl_tensors_checked_against_the_vision_config() -> None:
    """The Qwen-VL family's check (not servable here: its processor needs
    torchvision): rows t*h*w of the grid, each channels x temporal patch x
    patch^2 wide; embeddings t*h*w / merge^2."""
    from types import SimpleNamespace

    import torch

    from tokenwire.server.engine.vllm.mm_families import FAMILIES

    vision = SimpleNamespace(spatial_merge_size=2, in_chans=3, temporal_patch_size=2,
                             patch_size=14)
    config = SimpleNamespace(vision_config=vision)
    check = FAMILIES["Qwen2VLForConditionalGeneration"].batch
    grid = torch.tensor([[1, 4, 6]])
    batch, embeds = check({"pixel_values": torch.zeros(24, 1176), "image_grid_thw": grid},
                          config, "p")
    assert embeds == 6 and batch["image_grid_thw"].tolist() == [[1, 4, 6]]
    for bad in ({"pixel_values": torch.zeros(24, 1000), "image_grid_thw": grid},
                {"pixel_values": torch.zeros(23, 1176), "image_grid_thw": grid},
                {"pixel_values": torch.zeros(24, 1176), "image_grid_thw": torch.tensor([1, 3, 8])},
                {"pixel_values": torch.zeros(24, 1176), "image_grid_thw": grid, "extra": grid}):
        with pytest.raises(InvalidArgument) as info:
            check(bad, config, "p")
        assert info.value.reason == "FEATURES_INVALID"


def test_idefics3_tensors_checked_against_the_vision_config() -> None:
    from types import SimpleNamespace

    import torch

    from tokenwire.server.engine.vllm.mm_families import FAMILIES

    config = SimpleNamespace(scale_factor=2, vision_config=SimpleNamespace(
        image_size=64, patch_size=16, num_channels=3))
    check = FAMILIES["Idefics3ForConditionalGeneration"].batch
    ok = {"pixel_values": torch.zeros(5, 3, 64, 64), "num_patches": torch.tensor(5),
          "pixel_attention_mask": torch.ones(5, 64, 64, dtype=torch.bool)}
    batch, embeds = check(ok, config, "p")
    assert embeds == 5 * 4 and batch["num_patches"].tolist() == [5]
    for bad in ({**ok, "pixel_values": torch.zeros(5, 3, 32, 32)},
                {**ok, "num_patches": torch.tensor(4)},
                {**ok, "pixel_attention_mask": torch.ones(5, 32, 32, dtype=torch.bool)},
                {**ok, "pixel_values": torch.zeros(5, 3, 64, 64, dtype=torch.int64)}):
        with pytest.raises(InvalidArgument):
            check(bad, config, "p")
