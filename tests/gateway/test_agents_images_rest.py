"""Images on the Responses and Messages APIs and /tokenize over REST (issue
#36), through Envoy to `tokenwire serve` on the tiny random VLM (the
session's vlm_server): the official openai SDK's responses.create with an
input_image and the official anthropic SDK's messages.create /
count_tokens with an image block give the expanded prompt chat gives for
the same message (ids, mm_placeholders, usage); /tokenize expands it as
vLLM's does; bad images are each API's own 400 naming the field."""

from __future__ import annotations

import base64
import io
from typing import Any

import anthropic
import httpx
import openai
import pytest
from PIL import Image

from tests.conftest import TINY_VLM

MODEL = str(TINY_VLM)
IMAGE_TOKEN = 49153  # <image>


def png(w: int = 100, h: int = 60) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (30, 30, 200)).save(buf, "PNG")
    return base64.b64encode(buf.getvalue()).decode()


B64 = png()
URL = "data:image/png;base64," + B64


@pytest.fixture(scope="module")
def oai(vlm_gateway_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{vlm_gateway_url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def claude(vlm_gateway_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=vlm_gateway_url, api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def chat(oai: openai.OpenAI) -> dict[str, Any]:
    """Chat's answer for "Describe:" + the image (the reference)."""
    resp = oai.chat.completions.create(
        model=MODEL, max_tokens=4, temperature=0, extra_body={"return_token_ids": True},
        messages=[{"role": "user", "content": [
            {"type": "text", "text": "Describe:"},
            {"type": "image_url", "image_url": {"url": URL}}]}])
    return resp.model_dump()


def test_responses_create_with_an_input_image(oai: openai.OpenAI, chat: dict[str, Any]) -> None:
    resp = oai.responses.create(
        model=MODEL, max_output_tokens=4, temperature=0, extra_body={"return_token_ids": True},
        input=[{"role": "user", "content": [
            {"type": "input_text", "text": "Describe:"},
            {"type": "input_image", "image_url": URL, "detail": "auto"}]}])
    body = resp.model_dump()
    ids = chat["prompt_token_ids"]
    assert body["prompt_token_ids"] == ids and ids.count(IMAGE_TOKEN) == 20
    assert body["mm_placeholders"] == chat["mm_placeholders"]
    assert resp.usage.input_tokens == len(ids) == chat["usage"]["prompt_tokens"]
    assert body["output_token_ids"] == chat["choices"][0]["token_ids"]  # greedy: the same
    assert resp.output_text == chat["choices"][0]["message"]["content"]
    with oai.responses.stream(
            model=MODEL, max_output_tokens=4, temperature=0,
            extra_body={"return_token_ids": True},
            input=[{"role": "user", "content": [
                {"type": "input_text", "text": "Describe:"},
                {"type": "input_image", "image_url": URL, "detail": "auto"}]}]) as stream:
        final = stream.get_final_response().model_dump()
    assert final["prompt_token_ids"] == ids
    assert final["mm_placeholders"] == chat["mm_placeholders"]
    assert final["usage"]["input_tokens"] == len(ids)


@pytest.mark.parametrize("image,reason_param", [
    ({"image_url": "http://169.254.169.254/latest/meta-data"},
     "input[0].content[1].image_url"),
    ({"image_url": "data:image/png;base64,bm90IGFuIGltYWdl"}, "input[0].content[1].image_url"),
    ({"file_id": "file-abc"}, "input[0].content[1].file_id"),
])
def test_responses_bad_images_are_400s_naming_the_field(oai: openai.OpenAI, image: dict,
                                                         reason_param: str) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        oai.responses.create(model=MODEL, max_output_tokens=2, input=[
            {"role": "user", "content": [{"type": "input_text", "text": "x"},
                                         {"type": "input_image", "detail": "auto", **image}]}])
    assert info.value.body["param"] == reason_param


def test_responses_too_many_images(oai: openai.OpenAI) -> None:
    image = {"type": "input_image", "image_url": URL, "detail": "low"}
    with pytest.raises(openai.BadRequestError) as info:  # --limit-mm-per-prompt image: 2
        oai.responses.create(model=MODEL, max_output_tokens=2,
                             input=[{"role": "user", "content": [image] * 3}])
    assert info.value.body["param"] == "input[0].content[2].image_url"
    assert "--limit-mm-per-prompt" in info.value.body["message"]


def _image_block(source: dict[str, Any]) -> dict[str, Any]:
    return {"type": "image", "source": source}


def test_messages_create_and_count_tokens_with_an_image(claude: anthropic.Anthropic,
                                                        chat: dict[str, Any]) -> None:
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "Describe:"},
        _image_block({"type": "base64", "media_type": "image/png", "data": B64})]}]
    msg = claude.messages.create(model=MODEL, max_tokens=4, messages=messages,
                                 extra_body={"temperature": 0})
    ids = chat["prompt_token_ids"]
    # input_tokens leaves out the prefix-cache reads (chat's run cached the prompt)
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) == len(ids)
    assert msg.content[0].text == chat["choices"][0]["message"]["content"]  # greedy
    counted = claude.messages.count_tokens(model=MODEL, messages=messages)
    assert counted.input_tokens == len(ids)  # the expanded image tokens counted
    with claude.messages.stream(model=MODEL, max_tokens=4, messages=messages,
                                extra_body={"temperature": 0}) as stream:
        final = stream.get_final_message()
    assert final.usage.input_tokens + (final.usage.cache_read_input_tokens or 0) == len(ids)
    assert final.content[0].text == msg.content[0].text


@pytest.mark.parametrize("source,field", [
    ({"type": "url", "url": "https://169.254.169.254/a.png"}, "messages[0].content[0].source.url"),
    ({"type": "base64", "media_type": "image/png", "data": "bm90IGFuIGltYWdl"},
     "messages[0].content[0].source.data"),
    ({"type": "base64", "media_type": "image/tiff", "data": B64},
     "messages[0].content[0].source.media_type"),
])
def test_messages_bad_images_are_anthropic_400s(claude: anthropic.Anthropic,
                                                source: dict, field: str) -> None:
    messages = [{"role": "user", "content": [_image_block(source)]}]
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model=MODEL, max_tokens=2, messages=messages)
    body = info.value.body
    assert body["type"] == "error" and body["error"]["type"] == "invalid_request_error"
    assert field in body["error"]["message"]
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.count_tokens(model=MODEL, messages=messages)
    assert field in info.value.body["error"]["message"]


TOOL_CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "t1", "type": "function", "function": {"name": "screenshot", "arguments": "{}"}}]}


def _chat_ids(oai: openai.OpenAI, messages: list[dict[str, Any]]) -> list[int]:
    resp = oai.chat.completions.create(model=MODEL, max_tokens=1, messages=messages,
                                       extra_body={"return_token_ids": True})
    return list(resp.model_dump()["prompt_token_ids"])


def test_messages_tool_result_with_a_screenshot(claude: anthropic.Anthropic,
                                                oai: openai.OpenAI) -> None:
    """A computer-use turn: the tool_result carries the screenshot. It runs
    as vLLM's Messages API puts it (tool message, then the images as a user
    message), rendered by the model's own template and processor."""
    expected = _chat_ids(oai, [
        {"role": "user", "content": "Look at the screen."}, TOOL_CALL,
        {"role": "tool", "tool_call_id": "t1", "content": "captured"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": URL}}]},
        {"role": "user", "content": [{"type": "text", "text": "What is on it?"}]}])
    assert expected.count(IMAGE_TOKEN) == 20
    messages = [
        {"role": "user", "content": "Look at the screen."},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "screenshot",
                                           "input": {}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": [
                {"type": "text", "text": "captured"},
                _image_block({"type": "base64", "media_type": "image/png", "data": B64})]},
            {"type": "text", "text": "What is on it?"}]}]
    msg = claude.messages.create(model=MODEL, max_tokens=2, messages=messages)
    assert msg.usage.input_tokens + (msg.usage.cache_read_input_tokens or 0) == len(expected)
    assert claude.messages.count_tokens(model=MODEL, messages=messages).input_tokens == len(
        expected)
    bad = [*messages[:2], {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t1", "content": [
            _image_block({"type": "base64", "media_type": "image/png",
                          "data": "bm90IGFuIGltYWdl"})]}]}]
    with pytest.raises(anthropic.BadRequestError) as info:
        claude.messages.create(model=MODEL, max_tokens=2, messages=bad)
    assert "messages[2].content[0].content[0].source.data" in info.value.body["error"]["message"]


def test_responses_function_call_output_with_a_screenshot(oai: openai.OpenAI) -> None:
    """A function_call_output's input_image stays in the tool message, as
    vLLM passes it; the ids are chat's for that tool message."""
    expected = _chat_ids(oai, [
        {"role": "user", "content": "Look at the screen."}, TOOL_CALL,
        {"role": "tool", "tool_call_id": "t1", "content": [
            {"type": "text", "text": "captured"},
            {"type": "image_url", "image_url": {"url": URL}}]}])
    assert expected.count(IMAGE_TOKEN) == 20
    resp = oai.responses.create(
        model=MODEL, max_output_tokens=2, extra_body={"return_token_ids": True}, input=[
            {"role": "user", "content": "Look at the screen."},
            {"type": "function_call", "call_id": "t1", "name": "screenshot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "t1", "output": [
                {"type": "input_text", "text": "captured"},
                {"type": "input_image", "image_url": URL, "detail": "auto"}]}])
    assert resp.model_dump()["prompt_token_ids"] == expected
    with pytest.raises(openai.BadRequestError) as info:
        oai.responses.create(model=MODEL, max_output_tokens=2, input=[
            {"type": "function_call", "call_id": "t1", "name": "screenshot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "t1", "output": [
                {"type": "input_image", "image_url": "http://169.254.169.254/x",
                 "detail": "auto"}]}])
    assert info.value.body["param"] == "input[1].output[0].image_url"


def test_tokenize_expands_the_image(vlm_gateway_url: str, chat: dict[str, Any]) -> None:
    messages = [{"role": "user", "content": [
        {"type": "text", "text": "Describe:"},
        {"type": "image_url", "image_url": {"url": URL}}]}]
    resp = httpx.post(f"{vlm_gateway_url}/tokenize", json={"model": MODEL, "messages": messages},
                      timeout=60)
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert out["tokens"] == chat["prompt_token_ids"] and out["count"] == len(out["tokens"])
    bad = [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "http://10.0.0.1/x.png"}}]}]
    resp = httpx.post(f"{vlm_gateway_url}/tokenize", json={"model": MODEL, "messages": bad},
                      timeout=60)
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "messages[0].content[0].image_url.url"


def test_messages_and_responses_render_over_rest(vlm_gateway_url: str,
                                                 chat: dict[str, Any]) -> None:
    """vLLM's POST /v1/messages/render and /v1/responses/render: the body
    Generate runs (expanded ids, vLLM's features of the image); posted to
    /inference/v1/generate it answers as the chat does (greedy). A bad
    image is each API's own 400."""
    messages = {"model": MODEL, "max_tokens": 4, "temperature": 0, "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "Describe:"},
            _image_block({"type": "base64", "media_type": "image/png", "data": B64})]}]}
    responses = {"model": MODEL, "max_output_tokens": 4, "temperature": 0, "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "Describe:"},
                                     {"type": "input_image", "image_url": URL,
                                      "detail": "auto"}]}]}
    for path, body in (("/v1/messages/render", messages), ("/v1/responses/render", responses)):
        r = httpx.post(f"{vlm_gateway_url}{path}", json=body, timeout=120)
        assert r.status_code == 200, (path, r.text)
        gen_body = r.json()
        assert gen_body["token_ids"] == chat["prompt_token_ids"], path
        assert gen_body["features"]["mm_placeholders"] == chat["mm_placeholders"]
        gen = httpx.post(f"{vlm_gateway_url}/inference/v1/generate", json=gen_body, timeout=120)
        assert gen.status_code == 200, gen.text
        assert gen.json()["choices"][0]["token_ids"] == chat["choices"][0]["token_ids"]
    bad = {**messages, "messages": [{"role": "user", "content": [_image_block(
        {"type": "base64", "media_type": "image/tiff", "data": B64})]}]}
    r = httpx.post(f"{vlm_gateway_url}/v1/messages/render", json=bad, timeout=60)
    assert r.status_code == 400
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "invalid_request_error"
    assert "messages[0].content[0].source.media_type" in r.json()["error"]["message"]
    bad = {**responses, "input": [{"role": "user", "content": [
        {"type": "input_image", "image_url": "http://169.254.169.254/x", "detail": "auto"}]}]}
    r = httpx.post(f"{vlm_gateway_url}/v1/responses/render", json=bad, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "input[0].content[0].image_url"
