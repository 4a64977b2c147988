"""Token-in with images over REST (issue #36 item 2): `renderers` 0.1.12's
own `generate` (renderers/client.py, what verifiers' RendererClient and
prime-rl call), unchanged, through a real Envoy to `tokenwire serve` on the
tiny random Idefics3.

- content_parts (`process_multimodal=False`): renderers posts the
  unexpanded ids and `content_parts`, and requires `prompt_token_ids` and
  `mm_placeholders` back; its turn 2 (`prompt_ids` = turn 1's expanded
  ids + completion + the new turn, the image again in `content_parts`)
  hits the image blocks.
- features: renderers builds them client-side only for Qwen-VL, Gemma 4
  and Nemotron 3.5 (their processors need torchvision, a CUDA-only wheel
  here), so the body renderers would post is built by vLLM's own renderer
  and `extract_mm_features` for the family that runs (tests/vlm_features.py),
  posted the way renderers posts it (the openai client's `post`), and read
  by renderers' own `parse_generate_response`; streamed too (SSE, vLLM's
  first-chunk `prompt_token_ids` and `mm_placeholders`).
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from tests.conftest import TINY_VLM
from tests.vlm_features import vllm_features


def tiny_vlm_renderer():  # type: ignore[no-untyped-def]
    """renderers' DefaultRenderer (the tokenizer's chat template) for the
    tiny Idefics3, able to render without processing images (as
    Qwen3VLRenderer's process_multimodal=False: one image token per image,
    which the server expands)."""
    from renderers.base import create_renderer
    from renderers.configs import DefaultRendererConfig
    from transformers import AutoTokenizer

    base = create_renderer(AutoTokenizer.from_pretrained(TINY_VLM), DefaultRendererConfig())

    class TinyVlmRenderer(type(base)):  # type: ignore[misc]
        supports_process_multimodal = True

        def render(self, messages, *, tools=None, add_generation_prompt=False,  # type: ignore[no-untyped-def]
                   process_multimodal=True):
            plain = [{**m, "content": [{"type": "image"} if p.get("type") == "image_url" else p
                                       for p in m["content"]]}
                     if isinstance(m.get("content"), list) else m for m in messages]
            return super().render(plain, tools=tools, add_generation_prompt=add_generation_prompt)

    base.__class__ = TinyVlmRenderer
    return base


def test_renderers_generate_content_parts_through_the_gateway(vlm_gateway_url: str) -> None:
    pytest.importorskip("renderers")
    import openai
    from renderers.client import generate

    ref = vllm_features()
    renderer = tiny_vlm_renderer()
    messages = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": ref["url"]}},
        {"type": "text", "text": "What?"}]}]

    async def run() -> tuple[dict, dict]:
        client = openai.AsyncOpenAI(base_url=f"{vlm_gateway_url}/v1", api_key="unused",
                                    max_retries=0)
        sp = {"max_tokens": 24, "temperature": 0.0, "ignore_eos": True}
        first = await generate(client=client, renderer=renderer, messages=messages,
                               model=str(TINY_VLM), sampling_params=sp, cache_salt="rl-1",
                               process_multimodal=False)
        follow = [*first["prompt_ids"], *first["completion_ids"],
                  *renderer.render([{"role": "user", "content": "More"}],
                                   add_generation_prompt=True).token_ids]
        second = await generate(client=client, renderer=renderer, messages=messages,
                                model=str(TINY_VLM), prompt_ids=follow, cache_salt="rl-1",
                                sampling_params={"max_tokens": 4}, process_multimodal=False)
        return first, {**second, "follow": follow}

    first, second = asyncio.run(run())
    assert first["renderer_prompt_ids"] == ref["ids"]  # renderers' ids, unexpanded
    assert first["prompt_ids"] == ref["expanded"]  # vLLM's expansion, from the server
    assert first["mm_placeholders"] == ref["features"]["mm_placeholders"]
    assert len(first["completion_ids"]) == len(first["completion_logprobs"]) == 24
    assert second["prompt_ids"] == second["follow"]  # already expanded: placed, not again
    image_len = ref["features"]["mm_placeholders"]["image"][0]["length"]
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] > image_len


def test_features_as_renderers_posts_them(vlm_gateway_url: str) -> None:
    pytest.importorskip("renderers")
    import openai
    from renderers.client import parse_generate_response

    ref = vllm_features()
    body = {"model": str(TINY_VLM), "token_ids": ref["expanded"], "features": ref["features"],
            "return_token_ids": True,
            "sampling_params": {"max_tokens": 4, "temperature": 0.0, "logprobs": 1,
                                "stop_token_ids": [2], "skip_special_tokens": False}}

    async def post(payload: dict) -> httpx.Response:
        client = openai.AsyncOpenAI(base_url=f"{vlm_gateway_url}/v1", api_key="unused",
                                    max_retries=0)
        return await client.post(f"{vlm_gateway_url}/inference/v1/generate",
                                 cast_to=httpx.Response, body=payload)

    data = parse_generate_response(asyncio.run(post(body)).content)
    assert data["prompt_token_ids"] == ref["expanded"]
    assert data["mm_placeholders"] == ref["features"]["mm_placeholders"]
    choice = data["choices"][0]
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    with httpx.stream("POST", f"{vlm_gateway_url}/inference/v1/generate",
                      json={**body, "stream": True}, timeout=120) as resp:
        events = [json.loads(line[6:]) for line in resp.iter_lines()
                  if line.startswith("data: {")]
    assert events[0]["prompt_token_ids"] == ref["expanded"]
    assert events[0]["mm_placeholders"] == ref["features"]["mm_placeholders"]
    assert [t for e in events for c in e["choices"] for t in c.get("token_ids") or []] == \
        choice["token_ids"]
    bad = {**body, "features": {**ref["features"], "kwargs_data": {"image": ["AAAA"]}}}
    resp = httpx.post(f"{vlm_gateway_url}/inference/v1/generate", json=bad, timeout=120)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "features.kwargs_data.image[0]"
