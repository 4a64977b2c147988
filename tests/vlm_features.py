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
