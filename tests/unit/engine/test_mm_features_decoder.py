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


def qwen_check(data: dict, param: str = "p"):  # type: ignore[no-untyped-def]
    from types import SimpleNamespace

    import torch

    from tokenwire.server.engine.vllm.mm_families import FAMILIES, Served

    vision = SimpleNamespace(spatial_merge_size=2, in_chans=3, temporal_patch_size=2,
                             patch_size=14)
    served = Served(SimpleNamespace(vision_config=vision), torch.bfloat16, 2.2)
    return FAMILIES["Qwen2VLForConditionalGeneration"].batch(data, served, param)


def test_qwen_vl_tensors_checked_against_the_vision_config() -> None:
    """The Qwen-VL family's check (not servable here: its processor needs
    torchvision): rows t*h*w of the grid, each channels x temporal patch x
    patch^2 wide; embeddings t*h*w / merge^2; exactly its two fields, one
    frame, finite values within the processor's range, in the model's
    dtype."""
    import torch

    grid = torch.tensor([[1, 4, 6]])
    pixels = torch.full((24, 1176), 0.5)
    batch, embeds = qwen_check({"pixel_values": pixels, "image_grid_thw": grid})
    assert embeds == 6 and batch["image_grid_thw"].tolist() == [[1, 4, 6]]
    assert batch["pixel_values"].dtype == torch.bfloat16
    nan = pixels.clone()
    nan[3, 3] = float("nan")
    for bad in ({"pixel_values": torch.zeros(24, 1000), "image_grid_thw": grid},
                {"pixel_values": torch.zeros(23, 1176), "image_grid_thw": grid},
                {"pixel_values": pixels, "image_grid_thw": torch.tensor([1, 3, 8])},
                {"pixel_values": pixels, "image_grid_thw": grid, "extra": grid},
                {"pixel_values": pixels},  # a missing grid was INTERNAL (Trust IV L-3)
                {"pixel_values": pixels, "image_grid_thw": torch.tensor([[1.0, 4.0, 6.0]])},
                {"pixel_values": torch.zeros(48, 1176), "image_grid_thw": torch.tensor([2, 4, 6])},
                {"pixel_values": nan, "image_grid_thw": grid},
                {"pixel_values": pixels * 100, "image_grid_thw": grid}):
        with pytest.raises(InvalidArgument) as info:
            qwen_check(bad)
        assert info.value.reason == "FEATURES_INVALID"


def test_idefics3_tensors_checked_against_the_vision_config() -> None:
    from types import SimpleNamespace

    import torch

    from tokenwire.server.engine.vllm.mm_families import FAMILIES, Served

    config = SimpleNamespace(scale_factor=2, vision_config=SimpleNamespace(
        image_size=64, patch_size=16, num_channels=3))
    served = Served(config, torch.bfloat16, 1.01)
    check = FAMILIES["Idefics3ForConditionalGeneration"].batch
    ok = {"pixel_values": torch.full((5, 3, 64, 64), 0.25), "num_patches": torch.tensor(5),
          "pixel_attention_mask": torch.ones(5, 64, 64, dtype=torch.bool)}
    batch, embeds = check(ok, served, "p")
    assert embeds == 5 * 4 and batch["num_patches"].tolist() == [5]
    assert batch["pixel_attention_mask"].dtype == torch.int64  # as vLLM's processor makes it
    for bad in ({**ok, "pixel_values": torch.zeros(5, 3, 32, 32)},
                {**ok, "num_patches": torch.tensor(4)},
                {**ok, "pixel_attention_mask": torch.ones(5, 32, 32, dtype=torch.bool)},
                {**ok, "pixel_values": torch.zeros(5, 3, 64, 64, dtype=torch.int64)},
                {**ok, "pixel_values": torch.zeros(5, 3, 64, 64)},  # padding tiles
                {k: v for k, v in ok.items() if k != "pixel_attention_mask"}):
        with pytest.raises(InvalidArgument):
            check(bad, served, "p")


def test_the_value_bound_is_the_processors_range() -> None:
    from types import SimpleNamespace

    from tokenwire.server.engine.vllm.mm_families import value_bound

    idefics = SimpleNamespace(do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                              image_mean=[0.5] * 3, image_std=[0.5] * 3)
    assert 1.0 < value_bound(idefics) < 1.02
    clip = SimpleNamespace(do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
                           image_mean=[0.48145466, 0.4578275, 0.40821073],
                           image_std=[0.26862954, 0.26130258, 0.27577711])
    assert 2.14 < value_bound(clip) < 2.2
    assert 1.0 < value_bound(SimpleNamespace(do_normalize=False)) < 1.02
