"""Chat with images over REST (issue #36): the official openai SDK,
unchanged but for base_url, through Envoy (the transcoder carries OpenAI's
image_url parts in `content`) to `tokenwire serve` on the tiny random VLM;
return_token_ids answers the expanded ids and vLLM's mm_placeholders shape,
streamed too; a URL off the allow-list is a 400 naming the field."""

from __future__ import annotations

import base64
import io

import openai
import pytest
from PIL import Image

from tests.conftest import TINY_VLM


@pytest.fixture(scope="module")
def client(vlm_gateway_url: str) -> openai.OpenAI:
    """The openai SDK through the session's Envoy in front of vlm_server."""
    return openai.OpenAI(base_url=f"{vlm_gateway_url}/v1", api_key="unused", max_retries=0)


def image_url() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (100, 60), (200, 30, 30)).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def messages(url: str) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def test_an_image_chat_through_the_gateway(client: openai.OpenAI) -> None:
    resp = client.chat.completions.create(
        model=str(TINY_VLM), messages=messages(image_url()), max_tokens=4, temperature=0,
        extra_body={"return_token_ids": True})
    body = resp.model_dump()
    ids = body["prompt_token_ids"]
    (place,) = body["mm_placeholders"]["image"]
    assert set(place) == {"offset", "length"}
    assert ids[place["offset"]:place["offset"] + place["length"]].count(49153) == 20
    assert len(body["choices"][0]["token_ids"]) == 4
    stream = client.chat.completions.create(
        model=str(TINY_VLM), messages=messages(image_url()), max_tokens=4, temperature=0,
        stream=True, extra_body={"return_token_ids": True})
    chunks = [c.model_dump() for c in stream]
    assert chunks[0]["prompt_token_ids"] == ids
    assert chunks[0]["mm_placeholders"] == body["mm_placeholders"]
    streamed = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids") or []]
    assert streamed == body["choices"][0]["token_ids"]


def test_a_url_off_the_allow_list_is_a_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model=str(TINY_VLM), messages=messages("http://169.254.169.254/latest/meta-data"),
            max_tokens=2)
    assert info.value.body["param"] == "messages[0].content[1].image_url.url"


def test_render_then_generate_with_an_image_over_rest(client: openai.OpenAI) -> None:
    """vLLM's POST /v1/chat/completions/render with an image answers the
    expanded token_ids and vLLM's `features` (mm_hashes, mm_placeholders,
    base64 kwargs_data); that body posted to /inference/v1/generate runs it
    as the chat does (greedy)."""
    import httpx

    base = str(client.base_url).removesuffix("/v1/")
    body = {"model": str(TINY_VLM), "messages": messages(image_url()), "max_tokens": 3,
            "temperature": 0}
    chat = client.chat.completions.create(**body, extra_body={"return_token_ids": True})
    ref = chat.model_dump()
    rendered = httpx.post(f"{base}/v1/chat/completions/render", json=body, timeout=120)
    assert rendered.status_code == 200, rendered.text
    gen_body = rendered.json()
    assert gen_body["token_ids"] == ref["prompt_token_ids"]
    features = gen_body["features"]
    assert set(features) >= {"mm_hashes", "mm_placeholders", "kwargs_data"}
    assert features["mm_placeholders"] == ref["mm_placeholders"]
    assert isinstance(features["kwargs_data"]["image"][0], str)  # base64, not a cache reference
    gen = httpx.post(f"{base}/inference/v1/generate", json=gen_body, timeout=120)
    assert gen.status_code == 200, gen.text
    out = gen.json()
    assert out["prompt_token_ids"] == ref["prompt_token_ids"]
    assert out["choices"][0]["token_ids"] == ref["choices"][0]["token_ids"]
