"""What vLLM itself gives for a token-in prompt with an image on the tiny
random VLM, computed in the test process by vLLM's own renderer: the
unexpanded ids, the image as a data URL, the expanded ids, and the
`features` vLLM's /render returns (`extract_mm_features`, vLLM's JSON) —
the reference the multimodal token-in tests compare against."""

from __future__ import annotations

import base64
import functools
import io
from typing import Any

from tests.conftest import TINY_VLM


@functools.cache
def vllm_features() -> dict[str, Any]:
    from PIL import Image
    from transformers import AutoTokenizer
    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.scale_out.token_in_token_out.mm_features import extract_mm_features
    from vllm.inputs import TokensPrompt
    from vllm.renderers import renderer_from_config

    config = EngineArgs(model=str(TINY_VLM), max_model_len=2048,
                        limit_mm_per_prompt={"image": 2}).create_engine_config()
    renderer = renderer_from_config(config)
    tok = AutoTokenizer.from_pretrained(TINY_VLM)
    image = Image.new("RGB", (100, 60), (200, 30, 30))
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    text = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "What?"}]}],
        add_generation_prompt=True, tokenize=False)
    ids = tok.encode(text, add_special_tokens=False)
    (rendered,) = renderer.render_cmpl([TokensPrompt(prompt_token_ids=list(ids),
                                                     multi_modal_data={"image": [image]})])
    features = extract_mm_features(rendered).model_dump(exclude_none=True)
    return {"ids": ids, "url": url, "expanded": list(rendered["prompt_token_ids"]),
            "features": features}


def malformed_features() -> list[tuple[str, list[int], dict[str, Any]]]:
    """Adversarial `features` for the tiny VLM's one image: (label, token
    ids, vLLM's features JSON), each a mutation of vLLM's own item (fields
    missing or extra or from another family, dtypes, shapes, zero tiles,
    NaN/inf, out-of-range values, masks, counts that disagree with the
    placeholders, hashes, modalities, bytes that are not vLLM's msgpack).
    Some are valid variants (another float dtype, a bool mask, a smaller
    image in its tile): the server must either refuse an item naming the
    field or run it; the engine must never fail on one."""
    import msgspec
    import torch
    from vllm.multimodal.inputs import (
        MultiModalFieldElem,
        MultiModalKwargsItem,
    )
    from vllm.v1.serial_utils import MsgpackDecoder, MsgpackEncoder

    ref = vllm_features()
    f, ids = ref["features"], ref["expanded"]
    place = f["mm_placeholders"]["image"][0]
    raw = base64.b64decode(f["kwargs_data"]["image"][0])
    base = MsgpackDecoder(t=MultiModalKwargsItem).decode(raw)
    flat = base["pixel_values"].field
    batched = base["num_patches"].field
    pixels = base["pixel_values"].data
    mask = base["pixel_attention_mask"].data
    tiles = int(pixels.shape[0])

    def encode(item: dict[str, Any]) -> str:
        elems = {k: v if isinstance(v, MultiModalFieldElem)
                 else MultiModalFieldElem(data=v, field=batched if k == "num_patches" else flat)
                 for k, v in item.items()}
        (buf,) = MsgpackEncoder(size_threshold=2**62).encode(MultiModalKwargsItem(elems))
        return base64.b64encode(bytes(buf)).decode()

    def body(kwargs: str, **over: Any) -> dict[str, Any]:
        return {**f, "kwargs_data": {"image": [kwargs]}, **over}

    def item(**change: Any) -> dict[str, Any]:
        out: dict[str, Any] = {"pixel_values": pixels, "pixel_attention_mask": mask,
                               "num_patches": base["num_patches"].data}
        for k, v in change.items():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    def tile_zero(n: int) -> Any:
        p = pixels.clone()
        p[n] = 0
        return p

    def poked(value: float) -> Any:
        p = pixels.float().clone()
        p[1, 2, 3, 4] = value
        return p

    def masked(fill: Any) -> Any:
        m = mask.clone()
        fill(m)
        return m

    def rect(m: Any) -> None:
        m.zero_()
        m[:, :32, :40] = 1

    def corner(m: Any) -> None:
        m.zero_()
        m[:, 32:, 32:] = 1

    def checker(m: Any) -> None:
        m[:, ::2, ::2] = 0

    cases: list[tuple[str, dict[str, Any]]] = [
        # fields
        ("no pixel_attention_mask", item(pixel_attention_mask=None)),
        ("no pixel_values", item(pixel_values=None)),
        ("no num_patches", item(num_patches=None)),
        ("no fields", {}),
        ("Qwen-VL's image_grid_thw too", item(image_grid_thw=torch.tensor([[1, 8, 8]]))),
        ("image_embeds too", item(image_embeds=torch.zeros(tiles, 16, 8))),
        ("an unknown field", item(foo=torch.zeros(3))),
        ("Qwen-VL's fields only", {"pixel_values": torch.zeros(64, 1176),
                                   "image_grid_thw": torch.tensor([[1, 8, 8]])}),
        ("image_embeds instead", {"image_embeds": torch.zeros(tiles, 16, 64)}),
        ("pixel_values as a list", item(pixel_values=[[1.0, 2.0]])),
        # dtypes
        ("int64 pixels", item(pixel_values=pixels.to(torch.int64))),
        ("float16 pixels", item(pixel_values=pixels.to(torch.float16))),
        ("float64 pixels", item(pixel_values=pixels.to(torch.float64))),
        ("float32 pixels", item(pixel_values=pixels.to(torch.float32))),
        ("bool pixels", item(pixel_values=pixels != 0)),
        ("uint8 pixels", item(pixel_values=(pixels.float() * 100).to(torch.uint8))),
        ("float mask", item(pixel_attention_mask=mask.to(torch.float32))),
        ("bool mask", item(pixel_attention_mask=mask.to(torch.bool))),
        ("int8 mask", item(pixel_attention_mask=mask.to(torch.int8))),
        ("float num_patches", item(num_patches=torch.tensor(float(tiles)))),
        ("two num_patches", item(num_patches=torch.tensor([tiles, tiles]))),
        ("num_patches disagrees", item(num_patches=torch.tensor(tiles - 1))),
        ("zero num_patches", item(num_patches=torch.tensor(0))),
        ("negative num_patches", item(num_patches=torch.tensor(-1))),
        ("huge num_patches", item(num_patches=torch.tensor(2**40))),
        # shapes
        ("3-d pixels", item(pixel_values=pixels[0])),
        ("half-size tiles", item(pixel_values=pixels[:, :, :32, :32])),
        ("one channel", item(pixel_values=pixels[:, :1])),
        ("no tiles", item(pixel_values=pixels[:0], pixel_attention_mask=mask[:0])),
        ("fewer tiles than the mask", item(pixel_values=pixels[:-1])),
        ("more tiles than the placeholders",
         item(pixel_values=torch.cat([pixels, pixels[:1]]),
              pixel_attention_mask=torch.cat([mask, mask[:1]]),
              num_patches=torch.tensor(tiles + 1))),
        ("narrow mask", item(pixel_attention_mask=mask[:, :, :32])),
        ("fewer mask tiles", item(pixel_attention_mask=mask[:-1])),
        ("2-d mask", item(pixel_attention_mask=mask[0])),
        # values
        ("one all-zero tile", item(pixel_values=tile_zero(2))),
        ("all tiles zero", item(pixel_values=torch.zeros_like(pixels))),
        ("a NaN", item(pixel_values=poked(float("nan")))),
        ("+inf", item(pixel_values=poked(float("inf")))),
        ("-inf", item(pixel_values=poked(float("-inf")))),
        ("1e30", item(pixel_values=poked(1e30))),
        ("1e4", item(pixel_values=poked(1e4))),
        ("subnormal tile", item(pixel_values=torch.full_like(pixels, 1e-45, dtype=torch.float32))),
        ("all-zero mask", item(pixel_attention_mask=torch.zeros_like(mask))),
        ("one all-zero mask tile", item(pixel_attention_mask=masked(lambda m: m[1].zero_()))),
        ("checkerboard mask", item(pixel_attention_mask=masked(checker))),
        ("a smaller image in its tiles", item(pixel_attention_mask=masked(rect))),
        ("a mask from the bottom right", item(pixel_attention_mask=masked(corner))),
        ("mask of 2s", item(pixel_attention_mask=mask * 2)),
        ("mask of -1s", item(pixel_attention_mask=-mask)),
    ]
    out = [(label, ids, body(encode(kw))) for label, kw in cases]
    good = f["kwargs_data"]["image"][0]
    text = ids[:place["offset"]] + [1] * place["length"] + ids[place["offset"] + place["length"]:]
    unframed = list(ids)
    unframed[place["offset"]] = 1
    out += [
        ("a shorter placeholder", ids, body(good, mm_placeholders={
            "image": [{**place, "length": place["length"] - 1}]})),
        ("a shifted placeholder", ids, body(good, mm_placeholders={
            "image": [{**place, "offset": place["offset"] - 1}]})),
        ("overlapping placeholders", ids, {
            "mm_hashes": {"image": [f["mm_hashes"]["image"][0]] * 2},
            "mm_placeholders": {"image": [place, place]},
            "kwargs_data": {"image": [good, good]}}),
        ("two items for one image's ids", ids, {
            "mm_hashes": {"image": [f["mm_hashes"]["image"][0]] * 2},
            "mm_placeholders": {"image": [place, {**place, "offset": place["offset"] + 1}]},
            "kwargs_data": {"image": [good, good]}}),
        ("more hashes than items", ids, body(good, mm_hashes={
            "image": [f["mm_hashes"]["image"][0], "x"]})),
        ("a video", ids, {k: {"video": v["image"]} for k, v in body(good).items()}),
        ("an audio clip", ids, {k: {"audio": v["image"]} for k, v in body(good).items()}),
        ("no image tokens in the range", text, body(good)),
        ("no frame token", unframed, body(good)),
        ("empty kwargs_data", ids, body("")),
        ("not msgpack", ids, body(base64.b64encode(b"\x93not msgpack").decode())),
        ("a pickle extension", ids, body(base64.b64encode(msgspec.msgpack.encode(
            msgspec.msgpack.Ext(1, b"\x80\x04N."))).decode())),
        ("a msgpack list", ids, body(base64.b64encode(msgspec.msgpack.encode([1, 2])).decode())),
        ("an unknown field factory", ids, body(base64.b64encode(msgspec.msgpack.encode(
            {"pixel_values": {"data": None, "field": ["__init__", {}]}})).decode())),
        ("a tensor of an unknown dtype", ids, body(base64.b64encode(msgspec.msgpack.encode(
            {"pixel_values": {"data": ["nn", [1], b"\0\0\0\0"],
                              "field": ["flat", {}]}})).decode())),
    ]
    return out
