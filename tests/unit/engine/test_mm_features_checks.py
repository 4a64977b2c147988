"""Client `features` on the tiny VLM (Idefics3) never reach the engine core
in a shape vLLM's model code fails on (Trust IV H-1): each adversarial item
(tests/vlm_features.py `malformed_features`) is either refused with
INVALID_ARGUMENT naming a `features` field, or it passes vLLM's own model
code for the image input: the family's `_parse_and_validate_image_input`,
its padding-tile removal, patch mask and the split by `num_patches`, run
here on what the check passed (vision tower and connector stand-ins that
keep shapes; the real engine runs them in tests/gateway/test_features_fuzz.py).

In process, no engine: vLLM's renderer for the tiny VLM's config."""

from __future__ import annotations

import types
from typing import Any

import pytest

from tests.conftest import TINY_VLM
from tokenwire.server.core.errors import InvalidArgument

pytestmark = pytest.mark.skipif(not (TINY_VLM / "config.json").exists(),
                                reason="make tiny-vlm")


@pytest.fixture(scope="module")
def media() -> Any:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.renderers import renderer_from_config

    from tokenwire.server.engine.vllm.mm_features import VllmMultimodal

    config = EngineArgs(model=str(TINY_VLM), max_model_len=2048,
                        limit_mm_per_prompt={"image": 2}).create_engine_config()
    llm = types.SimpleNamespace(model_config=config.model_config,
                                renderer=renderer_from_config(config))
    return VllmMultimodal(llm)


def items_of(features: dict[str, Any]) -> list[Any]:
    from google.protobuf import struct_pb2

    from tokenwire.server.inference.shared.token_media import token_media

    body = struct_pb2.Struct()
    body.update(features)
    found = token_media(parts=None, features=body, typed=None)
    assert found is not None
    return found.features


def model_side(media: Any, prepared: Any) -> list[tuple[int, ...]]:
    """vLLM's Idefics3 code for the encoder input of `prepared`: batched as
    the engine core batches (group_and_batch_mm_kwargs), parsed, padding
    tiles removed, patch mask and positions made, features split by
    num_patches; the vision tower and connector keep shapes."""
    import torch
    from vllm.model_executor.models import idefics3
    from vllm.multimodal.utils import group_and_batch_mm_kwargs

    hf = media._llm.model_config.hf_config
    vision = hf.vision_config
    per_tile = (vision.image_size // vision.patch_size) ** 2

    class Tower:
        embeddings = types.SimpleNamespace(
            patch_embedding=types.SimpleNamespace(weight=torch.zeros(1, dtype=torch.bfloat16)))

        def __call__(self, pixel_values: Any, patch_attention_mask: Any,
                     position_ids: Any = None) -> Any:
            assert pixel_values.shape[0] == patch_attention_mask.shape[0]
            assert bool(patch_attention_mask.flatten(1).any(dim=1).all())
            return torch.zeros(pixel_values.shape[0], per_tile, 8)

    inner = types.SimpleNamespace(config=hf, vision_model=Tower(), connector=lambda x: x)
    inner.get_patch_attention_mask = types.MethodType(
        idefics3.Idefics3Model.get_patch_attention_mask, inner)
    inner.image_pixels_to_features = types.MethodType(
        idefics3.Idefics3Model.image_pixels_to_features, inner)
    outer = types.SimpleNamespace(config=hf, model=inner)
    outer._process_image_pixels = types.MethodType(
        idefics3.Idefics3ForConditionalGeneration._process_image_pixels, outer)
    shapes = []
    items = prepared.engine_input["mm_kwargs"]["image"]
    for _, _, kwargs in group_and_batch_mm_kwargs([("image", i) for i in items]):
        parsed = idefics3.Idefics3ForConditionalGeneration._parse_and_validate_image_input(
            outer, **dict(kwargs))
        out = idefics3.Idefics3ForConditionalGeneration._process_image_input(outer, parsed)
        shapes += [tuple(o.shape) for o in out]
    return shapes


def test_every_adversarial_item_is_refused_or_passes_the_models_code(media: Any) -> None:
    from tests.vlm_features import malformed_features

    cases = malformed_features()
    assert len(cases) >= 50
    outcomes: dict[str, str] = {}
    for label, ids, features in cases:
        try:
            prepared = media.from_features(ids, items_of(features))
        except InvalidArgument as exc:
            assert exc.param.startswith("features"), (label, exc.param)
            assert exc.code.name == "INVALID_ARGUMENT"
            outcomes[label] = exc.reason
            continue
        shapes = model_side(media, prepared)  # raises where the engine would fail
        assert rows(media, ids, features) == [s[0] for s in shapes], label
        outcomes[label] = "ran"
    # The review's two shapes (engine-core failures before Trust IV) are refused.
    assert outcomes["no pixel_attention_mask"] == "FEATURES_INVALID"
    assert outcomes["one all-zero tile"] == "FEATURES_INVALID"
    assert outcomes["all tiles zero"] == "FEATURES_INVALID"
    for label in ("a NaN", "+inf", "1e30", "checkerboard mask", "all-zero mask",
                  "a mask from the bottom right", "Qwen-VL's image_grid_thw too"):
        assert outcomes[label] == "FEATURES_INVALID", label
    # Valid variants of vLLM's own item still run.
    for label in ("no num_patches", "float32 pixels", "bool mask",
                  "a smaller image in its tiles"):
        assert outcomes[label] == "ran", label


def rows(media: Any, ids: list[int], features: dict[str, Any]) -> list[int]:
    """What the vision tower's stand-in makes per image: the image tokens of
    its range times the connector's pixel-shuffle factor (scale_factor^2)."""
    hf = media._llm.model_config.hf_config
    return [sum(1 for t in ids[p["offset"]:p["offset"] + p["length"]]
                if t == hf.image_token_id) * hf.scale_factor ** 2
            for p in features["mm_placeholders"]["image"]]


def test_vllms_own_item_passes_and_runs(media: Any) -> None:
    from tests.vlm_features import vllm_features

    ref = vllm_features()
    prepared = media.from_features(ref["expanded"], items_of(ref["features"]))
    assert [s[0] for s in model_side(media, prepared)] == rows(media, ref["expanded"],
                                                               ref["features"])
