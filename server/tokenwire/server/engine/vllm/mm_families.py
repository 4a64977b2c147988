"""Each model family's processed image, as a client sends it in features:
its tensors checked against the served model's vision config (names,
shapes, dtypes) and put back as the BatchFeature the model's own processor
would have made for one image, with the embeddings the vision tower will
produce for it. Families not listed take content_parts only."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tokenwire.server.core.errors import InvalidArgument


@dataclasses.dataclass
class _Family:
    """How one model family's processed image is checked: its tensors into
    the BatchFeature the model's processor would have made for one image,
    and its embedding count."""

    batch: Callable[[dict[str, Any], Any, str], tuple[dict[str, Any], int]]
    dense: bool  # the placeholder is only the image token (Qwen-VL) or framed (Idefics3)
    frame: str = ""  # the HF processor attribute: the id a framed range starts and ends with


def _tensor(data: dict[str, Any], key: str, param: str, *, ndim: int, floating: bool) -> Any:
    import torch

    t = data.get(key)
    if not isinstance(t, torch.Tensor) or t.ndim != ndim or t.is_floating_point() != floating:
        kind = "floating" if floating else "integer"
        raise InvalidArgument(f"{param}: '{key}' must be a {ndim}-d {kind} tensor",
                              param=param, reason="FEATURES_INVALID")
    return t


def _idefics3(data: dict[str, Any], hf_config: Any, param: str) -> tuple[dict[str, Any], int]:
    import torch

    vision = hf_config.vision_config
    size, patch = int(vision.image_size), int(vision.patch_size)
    pixels = _tensor(data, "pixel_values", param, ndim=4, floating=True)
    tiles = int(pixels.shape[0])
    if tiles < 1 or tuple(pixels.shape[1:]) != (int(vision.num_channels), size, size):
        raise InvalidArgument(f"{param}: pixel_values must be [tiles, {vision.num_channels}, "
                              f"{size}, {size}], not {list(pixels.shape)}",
                              param=param, reason="FEATURES_INVALID")
    out = {"pixel_values": pixels.to(torch.float32),
           "num_patches": torch.tensor([tiles])}
    if "num_patches" in data and int(torch.as_tensor(data["num_patches"]).sum()) != tiles:
        raise InvalidArgument(f"{param}: num_patches must equal pixel_values' tiles ({tiles})",
                              param=param, reason="FEATURES_INVALID")
    if "pixel_attention_mask" in data:
        mask = _tensor(data, "pixel_attention_mask", param, ndim=3, floating=False)
        if tuple(mask.shape) != (tiles, size, size):
            raise InvalidArgument(f"{param}: pixel_attention_mask must be [{tiles}, {size}, "
                                  f"{size}]", param=param, reason="FEATURES_INVALID")
        out["pixel_attention_mask"] = mask.to(torch.bool)
    extra = set(data) - {"pixel_values", "num_patches", "pixel_attention_mask"}
    if extra:
        raise InvalidArgument(f"{param}: fields {sorted(extra)} are not this model's",
                              param=param, reason="FEATURES_INVALID")
    per_tile = (size // patch) ** 2 // int(hf_config.scale_factor) ** 2
    return out, tiles * per_tile


def _qwen_vl(data: dict[str, Any], hf_config: Any, param: str) -> tuple[dict[str, Any], int]:
    import torch

    vision = hf_config.vision_config
    merge = int(getattr(vision, "spatial_merge_size", 2))
    pixels = _tensor(data, "pixel_values", param, ndim=2, floating=True)
    grid = torch.as_tensor(data.get("image_grid_thw")).reshape(-1)
    if grid.numel() != 3 or grid.is_floating_point() or bool((grid <= 0).any()):
        raise InvalidArgument(f"{param}: image_grid_thw must be three positive integers",
                              param=param, reason="FEATURES_INVALID")
    t, h, w = (int(x) for x in grid)
    if h % merge or w % merge or int(pixels.shape[0]) != t * h * w:
        raise InvalidArgument(f"{param}: pixel_values rows must be t*h*w of image_grid_thw "
                              f"(h, w multiples of {merge})", param=param,
                              reason="FEATURES_INVALID")
    channels = getattr(vision, "in_channels", getattr(vision, "in_chans", 3))
    width = (int(channels) * int(getattr(vision, "temporal_patch_size", 2))
             * int(getattr(vision, "patch_size", 14)) ** 2)
    if int(pixels.shape[1]) != width:
        raise InvalidArgument(f"{param}: pixel_values rows must be {width} wide (channels x "
                              f"temporal patch x patch^2), not {int(pixels.shape[1])}",
                              param=param, reason="FEATURES_INVALID")
    extra = set(data) - {"pixel_values", "image_grid_thw"}
    if extra:
        raise InvalidArgument(f"{param}: fields {sorted(extra)} are not this model's",
                              param=param, reason="FEATURES_INVALID")
    return ({"pixel_values": pixels, "image_grid_thw": grid.reshape(1, 3).to(torch.int64)},
            t * h * w // merge**2)


# The families whose processed images the server can check (and so accept
# as features); the others take content_parts.
FAMILIES: dict[str, _Family] = {
    "Idefics3ForConditionalGeneration": _Family(_idefics3, dense=False,
                                                frame="fake_image_token_id"),
    "SmolVLMForConditionalGeneration": _Family(_idefics3, dense=False,
                                               frame="fake_image_token_id"),
    "Qwen2VLForConditionalGeneration": _Family(_qwen_vl, dense=True),
    "Qwen2_5_VLForConditionalGeneration": _Family(_qwen_vl, dense=True),
    "Qwen3VLForConditionalGeneration": _Family(_qwen_vl, dense=True),
}
