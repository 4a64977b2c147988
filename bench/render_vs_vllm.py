"""Side by side: vLLM's own OpenAI server (`--enable-scale-out`, which its
render routes need) and tokenwire (serve + Envoy) on the tiny VLM
(`make tiny-vlm`), the same render bodies: /v1/chat/completions/render,
/v1/messages/render, /v1/responses/render and a text chat. Prints what
differs (keys, ids, features, sampling parameters; kwargs_data decoded
with vLLM's decoder), and sends vLLM's rendered body to tokenwire's Generate.

    .venv/bin/python -m bench.render_vs_vllm    (about 2 minutes here)

Results: docs/multimodal.md ("Render, then Generate").
"""

from __future__ import annotations

import base64
import io
import sys
from typing import Any

import httpx
from PIL import Image

from bench import systems
from bench.vllm_side import side_by_side

VLM = str(systems.ROOT / ".models" / "tiny-random-vlm")
ENGINE = ["--max-model-len", "2048", "--block-size", "32", "--limit-mm-per-prompt",
          '{"image": 2}']


def _image() -> tuple[str, str]:
    buf = io.BytesIO()
    Image.new("RGB", (100, 60), (200, 30, 30)).save(buf, "PNG")
    b64 = base64.b64encode(buf.getvalue()).decode()
    return b64, "data:image/png;base64," + b64


def _bodies() -> dict[str, tuple[str, dict[str, Any]]]:
    b64, url = _image()
    text = {"type": "text", "text": "Describe:"}
    image_url = {"type": "image_url", "image_url": {"url": url}}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": b64}}
    return {
        "chat": ("/v1/chat/completions/render", {
            "model": VLM, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": [text, image_url]}]}),
        "messages": ("/v1/messages/render", {
            "model": VLM, "max_tokens": 4, "temperature": 0,
            "messages": [{"role": "user", "content": [text, image]}]}),
        "responses": ("/v1/responses/render", {
            "model": VLM, "max_output_tokens": 4, "temperature": 0, "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Describe:"},
                                             {"type": "input_image", "image_url": url,
                                              "detail": "auto"}]}]}),
        "text chat": ("/v1/chat/completions/render", {
            "model": VLM, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}),
    }


def _tensors_equal(a: str, b: str) -> bool:
    """Two base64 kwargs_data items decode (vLLM's decoder) to equal tensors."""
    import torch

    from tokenwire.server.engine.vllm.mm_features import _callers_decoder

    dec = _callers_decoder()
    x, y = dec.decode(base64.b64decode(a)), dec.decode(base64.b64decode(b))
    if sorted(x) != sorted(y):
        return False
    for key in x:
        p, q = x[key].data, y[key].data
        same = torch.equal(p, q) if isinstance(p, torch.Tensor) else p == q
        if not same:
            return False
    return True


def _compare(name: str, ja: dict[str, Any], jb: dict[str, Any]) -> None:
    print(f"  keys only vLLM prints: {sorted(set(ja) - set(jb))}; only tokenwire: "
          f"{sorted(set(jb) - set(ja))}")
    print(f"  token_ids equal: {ja.get('token_ids') == jb.get('token_ids')} "
          f"({len(ja.get('token_ids') or [])} ids)")
    fa, fb = ja.get("features") or {}, jb.get("features") or {}
    if fa or fb:
        for key in ("mm_hashes", "mm_placeholders"):
            print(f"  features.{key} equal: {fa.get(key) == fb.get(key)}")
        ka, kb = (fa.get("kwargs_data") or {}).get("image", []), (
            fb.get("kwargs_data") or {}).get("image", [])
        same = len(ka) == len(kb) and all(_tensors_equal(a, b) for a, b in zip(ka, kb, strict=True))
        print(f"  features.kwargs_data: bytes equal {ka == kb}, decoded tensors equal {same}")
    spa, spb = ja.get("sampling_params") or {}, jb.get("sampling_params") or {}
    diff = {k: (spa.get(k), spb.get(k)) for k in sorted(set(spa) | set(spb))
            if spa.get(k) != spb.get(k)}
    print(f"  sampling_params differ (vLLM, tokenwire): {diff}")


def main() -> int:
    with side_by_side(VLM, ENGINE, kv_bytes=256 << 20, log_name="render-vs-vllm.log",
                      vllm_only=("--enable-scale-out",)) as pair:
        for name, (path, body) in _bodies().items():
            answers = pair.post(name, path, body)
            if answers is None:
                continue
            a, b = answers
            _compare(name, a.json(), b.json())
            if name != "text chat":  # vLLM's rendered body, run by tokenwire's Generate
                g = httpx.post(f"{pair.tokenwire}/inference/v1/generate", json=a.json(),
                               timeout=120)
                print(f"  vLLM's rendered body -> tokenwire's /inference/v1/generate: "
                      f"{g.status_code}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
