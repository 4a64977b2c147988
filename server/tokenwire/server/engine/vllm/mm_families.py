"""Each model family's processed image, as a client sends it in features:
its tensors checked against the served model (names, shapes, dtypes, and
the values the model's code depends on) and put back as the BatchFeature
the model's own processor would have made for one image, with the
embeddings the vision tower will produce for it. Families not listed take
content_parts only.

What the checks hold to (a client item the engine core would fail on kills
the engine and every request batched with it, so nothing is left to the
model's code): exactly the fields the model's processor makes, none
missing and none extra; every floating value finite and within what the
processor can make from 8-bit pixels (`Served.bound`); the tensors cast to
the dtypes the processor's own items have (so they batch with them); and,
per family, the values the vision code reads (Idefics3: no tile that the
model would drop as padding, a pixel mask that is a rectangle from the top
left corner; Qwen-VL: one frame, a grid the merger divides); then the
model class's own input parsing runs on the item, batched as the engine
core batches it (`model_parses`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tokenwire.server.core.errors import InvalidArgument


@dataclasses.dataclass(frozen=True)
class Served:
    """What a family's check reads of the served model: its HF config, the
    dtype its processor's pixel tensors have, and the largest magnitude its
    processor makes from 8-bit pixels."""

    hf_config: Any
    dtype: Any  # a torch dtype
    bound: float

    @classmethod
    def of(cls, model_config: Any, processor: Any) -> Served:
        """The served model's (its vLLM model config and multimodal processor)."""
        image = getattr(processor.info.get_hf_processor(), "image_processor", None)
        return cls(model_config.hf_config, model_config.dtype, value_bound(image))


@dataclasses.dataclass
class _Family:
    """How one model family's processed image is checked: its tensors into
    the BatchFeature the model's processor would have made for one image,
    and its embedding count."""

    batch: Callable[[dict[str, Any], Served, str], tuple[dict[str, Any], int]]
    dense: bool  # the placeholder is only the image token (Qwen-VL) or framed (Idefics3)
    frame: str = ""  # the HF processor attribute: the id a framed range starts and ends with

    def placeholder_mask(self, ids: list[int], token: int, frame: int | None, embeds: int,
                         place: str) -> list[bool]:
        """Which of a range's `ids` are the model's image `token`; refused
        unless one per embedding of its item, and nothing else (dense) or
        framed by the `frame` id."""
        mask = [t == token for t in ids]
        found = sum(mask)
        framed = frame is None or (ids[0] == frame and ids[-1] == frame)
        if found != embeds or (self.dense and found != len(ids)) or not framed:
            raise InvalidArgument(
                f"{place}: the range holds {found} of the model's image token "
                f"({token}) in {len(ids)} ids; its item has {embeds} embeddings"
                + (" and the range must hold only that token" if self.dense else
                   f" and the range must start and end with its frame token ({frame})"),
                param=place, reason="PLACEHOLDER_MISMATCH")
        return mask


def _invalid(param: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{param}: {message}", param=param, reason="FEATURES_INVALID")


def _fields(data: dict[str, Any], param: str, required: set[str], optional: set[str]) -> None:
    missing = required - set(data)
    if missing:
        raise _invalid(param, f"fields {sorted(missing)} are required for this model "
                              f"(it takes {sorted(required | optional)})")
    extra = set(data) - required - optional
    if extra:
        raise _invalid(param, f"fields {sorted(extra)} are not this model's "
                              f"(it takes {sorted(required | optional)})")


def _tensor(data: dict[str, Any], key: str, param: str, *, ndim: int, floating: bool) -> Any:
    import torch

    t = data.get(key)
    ok = (isinstance(t, torch.Tensor) and t.ndim == ndim and not t.is_complex()
          and t.is_floating_point() == floating and (floating or t.dtype != torch.bool))
    if not ok:
        kind = "floating" if floating else "integer"
        raise _invalid(param, f"'{key}' must be a {ndim}-d {kind} tensor")
    return t


def _pixels(data: dict[str, Any], served: Served, param: str, ndim: int) -> Any:
    """`pixel_values`: finite, within the processor's range, in its dtype."""
    import torch

    t = _tensor(data, "pixel_values", param, ndim=ndim, floating=True)
    if t.numel() == 0:
        raise _invalid(param, "pixel_values is empty")
    wide = t.to(torch.float32)
    if not bool(torch.isfinite(wide).all()):
        raise _invalid(param, "pixel_values must be finite (no NaN or infinity)")
    top = float(wide.abs().max())
    if top > served.bound:
        raise _invalid(param, f"pixel_values must lie within ±{served.bound:.4g} (what this "
                              f"model's processor makes from 8-bit pixels), not {top:.4g}")
    return t.to(served.dtype).contiguous()


def _count(data: dict[str, Any], key: str, param: str) -> int:
    """A scalar (or one-element) integer count."""
    import torch

    t = data[key]
    if (not isinstance(t, torch.Tensor) or t.numel() != 1 or t.is_floating_point()
            or t.is_complex() or t.dtype == torch.bool):
        raise _invalid(param, f"'{key}' must be one integer")
    return int(t.reshape(-1)[0])


def _idefics3(data: dict[str, Any], served: Served, param: str) -> tuple[dict[str, Any], int]:
    import torch

    hf_config = served.hf_config
    vision = hf_config.vision_config
    size, patch = int(vision.image_size), int(vision.patch_size)
    _fields(data, param, {"pixel_values", "pixel_attention_mask"}, {"num_patches"})
    pixels = _pixels(data, served, param, ndim=4)
    tiles = int(pixels.shape[0])
    if tuple(pixels.shape[1:]) != (int(vision.num_channels), size, size):
        raise _invalid(param, f"pixel_values must be [tiles, {vision.num_channels}, {size}, "
                              f"{size}], not {list(pixels.shape)}")
    # vLLM's model drops a tile whose values are all zero (in its dtype) as
    # batch padding, and then has fewer tiles than num_patches says.
    zero = (pixels == 0).flatten(1).all(dim=1)
    if bool(zero.any()):
        raise _invalid(param, f"pixel_values tile {int(zero.nonzero()[0])} is all zeros (the "
                              "model drops such tiles as padding)")
    if "num_patches" in data and _count(data, "num_patches", param) != tiles:
        raise _invalid(param, f"num_patches must equal pixel_values' tiles ({tiles})")
    mask = data["pixel_attention_mask"]
    if (not isinstance(mask, torch.Tensor) or mask.is_floating_point() or mask.is_complex()
            or tuple(mask.shape) != (tiles, size, size)):
        raise _invalid(param, f"pixel_attention_mask must be a [{tiles}, {size}, {size}] "
                              "integer or bool tensor")
    mask = mask.to(torch.int64)
    if bool(((mask != 0) & (mask != 1)).any()):
        raise _invalid(param, "pixel_attention_mask must hold only 0 and 1")
    # The processor pads an image at the bottom and right: each tile's mask
    # is a rectangle of ones from the top left corner, at least one patch.
    rows, cols = mask[:, :, 0].sum(dim=1), mask[:, 0, :].sum(dim=1)
    r = torch.arange(size)
    rect = ((r[None, :, None] < rows[:, None, None]) & (r[None, None, :] < cols[:, None, None]))
    if bool((rows < 1).any() or (cols < 1).any()) or not bool((rect == (mask == 1)).all()):
        raise _invalid(param, "pixel_attention_mask must be, in every tile, a rectangle of "
                              "ones from the top left corner (at least one pixel)")
    out = {"pixel_values": pixels, "num_patches": torch.tensor([tiles]),
           "pixel_attention_mask": mask}
    per_tile = (size // patch) ** 2 // int(hf_config.scale_factor) ** 2
    return out, tiles * per_tile


def _qwen_vl(data: dict[str, Any], served: Served, param: str) -> tuple[dict[str, Any], int]:
    import torch

    vision = served.hf_config.vision_config
    merge = int(getattr(vision, "spatial_merge_size", 2))
    _fields(data, param, {"pixel_values", "image_grid_thw"}, set())
    pixels = _pixels(data, served, param, ndim=2)
    grid = data["image_grid_thw"]
    if (not isinstance(grid, torch.Tensor) or grid.numel() != 3 or grid.is_floating_point()
            or grid.is_complex() or grid.dtype == torch.bool or bool((grid <= 0).any())):
        raise _invalid(param, "image_grid_thw must be three positive integers")
    t, h, w = (int(x) for x in grid.reshape(-1))
    if t != 1:
        raise _invalid(param, f"image_grid_thw's t must be 1 for an image, not {t}")
    if h % merge or w % merge or int(pixels.shape[0]) != t * h * w:
        raise _invalid(param, "pixel_values rows must be t*h*w of image_grid_thw "
                              f"(h, w multiples of {merge})")
    channels = getattr(vision, "in_channels", getattr(vision, "in_chans", 3))
    width = (int(channels) * int(getattr(vision, "temporal_patch_size", 2))
             * int(getattr(vision, "patch_size", 14)) ** 2)
    if int(pixels.shape[1]) != width:
        raise _invalid(param, f"pixel_values rows must be {width} wide (channels x temporal "
                              f"patch x patch^2), not {int(pixels.shape[1])}")
    return ({"pixel_values": pixels, "image_grid_thw": grid.reshape(1, 3).to(torch.int64)},
            t * h * w // merge**2)


def value_bound(image_processor: Any) -> float:
    """The largest magnitude the HF image processor makes from 8-bit pixels
    (rescaled, normalized per channel), with a little room for rounding."""
    scale = float(getattr(image_processor, "rescale_factor", 1 / 255)) \
        if getattr(image_processor, "do_rescale", True) else 1.0
    top = 255 * scale
    if not getattr(image_processor, "do_normalize", False):
        return top * 1.01 + 1e-3
    mean = getattr(image_processor, "image_mean", None) or [0.0]
    std = getattr(image_processor, "image_std", None) or [1.0]
    mean = list(mean) if isinstance(mean, (list, tuple)) else [float(mean)]
    std = list(std) if isinstance(std, (list, tuple)) else [float(std)]
    worst = max(max(abs(0 - m), abs(top - m)) / max(abs(s), 1e-6)
                for m, s in zip(mean, std * len(mean) if len(std) == 1 else std, strict=False))
    return worst * 1.01 + 1e-3


def model_parses(archs: list[str], model_config: Any, modality: str, item: Any,
                 param: str) -> None:
    """A checked item batched as the engine core batches it (vLLM's
    group_and_batch_mm_kwargs) and parsed by the served model class's own
    `_parse_and_validate_<modality>_input` (it reads only the config): an
    item the model's parsing refuses is the caller's error here, not the
    engine core's."""
    import types

    from vllm.model_executor.models import ModelRegistry
    from vllm.multimodal.utils import group_and_batch_mm_kwargs

    cls, _ = ModelRegistry.resolve_model_cls(archs, model_config)
    parse = getattr(cls, f"_parse_and_validate_{modality}_input")
    try:
        for _, _, kwargs in group_and_batch_mm_kwargs([(modality, item)]):
            if parse(types.SimpleNamespace(config=model_config.hf_config), **dict(kwargs)) is None:
                raise ValueError("no input parsed")
    except Exception as exc:  # any refusal of the model's own parsing
        raise InvalidArgument(f"{param}: the model's input parsing refused the item "
                              f"({type(exc).__name__}: {str(exc)[:200]})", param=param,
                              reason="FEATURES_INVALID") from exc


class ImageTokens:
    """How many image tokens the served model's processor expands an image
    of a given size to (vLLM's `get_num_image_tokens`, the count its own
    budgets use), read from the size alone, before decoding; None where
    the model's processing info cannot say."""

    def __init__(self, llm: Any):
        self._llm = llm
        self._count: Callable[[int, int], int] | None = None
        self._failed = False

    @property
    def ready(self) -> bool:
        """Whether the count is built (the first call builds the model's
        processor: call it off the event loop)."""
        return self._count is not None or self._failed

    def of(self, width: int, height: int) -> int | None:
        if self._count is None and not self._failed:
            self._count = self._build()
            self._failed = self._count is None
        if self._count is None:
            return None
        try:
            return int(self._count(width, height))
        except Exception:  # a size the model's arithmetic refuses: the processor decides
            return None

    def _build(self) -> Callable[[int, int], int] | None:
        import inspect

        try:
            info = self._llm.renderer.get_mm_processor().info
            count = info.get_num_image_tokens
            hf = info.get_hf_processor()
            names = set(inspect.signature(count).parameters)
        except Exception:  # no multimodal processor, or no count for it
            return None
        extra: dict[str, Any] = {"mm_kwargs": {}} if "mm_kwargs" in names else {}
        if "processor" in names:
            extra["processor"] = hf
        if "image_processor" in names:
            extra["image_processor"] = getattr(hf, "image_processor", None)

        def tokens(width: int, height: int) -> int:
            return int(count(image_width=width, image_height=height, **extra))
        return tokens


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
