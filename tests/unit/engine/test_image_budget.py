"""A request's images are bounded before any is decoded (Trust IV M-2), on
vLLM's renderer for the tiny VLM (in process, no engine): the pixels of
all its images summed from their headers (MAX_REQUEST_PIXELS), and the
image tokens the served model's processor expands them to, counted from
each image's size (vLLM's own `get_num_image_tokens`), against the context
window. Before, 64 images of 16 Mpx passed every bound and were decoded and
processed before the expanded prompt's length was checked."""

from __future__ import annotations

import base64
import io
import types
from typing import Any

import pytest
from PIL import Image, ImageFile

from tests.cases import png_header
from tests.conftest import TINY_VLM
from tokenwire.server.core import multimodal
from tokenwire.server.core.errors import InvalidArgument

pytestmark = pytest.mark.skipif(not (TINY_VLM / "config.json").exists(),
                                reason="make tiny-vlm")


def llm(max_model_len: int, images: int) -> Any:
    from vllm.engine.arg_utils import EngineArgs
    from vllm.renderers import renderer_from_config

    config = EngineArgs(model=str(TINY_VLM), max_model_len=max_model_len,
                        limit_mm_per_prompt={"image": images}).create_engine_config()
    return types.SimpleNamespace(model_config=config.model_config,
                                 renderer=renderer_from_config(config))


@pytest.fixture(scope="module")
def wide() -> Any:
    return llm(2048, 64)


def png(w: int, h: int) -> str:
    buf = io.BytesIO()
    Image.new("1", (w, h)).save(buf, "PNG")  # a small file of many pixels
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def messages(*urls: str) -> list[dict[str, Any]]:
    return [{"role": "user", "content": [
        *({"type": "image_url", "image_url": {"url": u}} for u in urls),
        {"type": "text", "text": "What?"}]}]


def never_decoded(monkeypatch: pytest.MonkeyPatch) -> None:
    def load(self: Any) -> None:
        raise AssertionError("an image was decoded")
    monkeypatch.setattr(Image.Image, "load", load)
    monkeypatch.setattr(ImageFile.ImageFile, "load", load)


def test_the_request_pixels_are_summed_from_the_headers(wide: Any, monkeypatch) -> None:
    from tokenwire.server.engine.vllm.chat_media import VllmChatMedia

    media = VllmChatMedia(wide, "openai", None, {})
    big = png(4096, 4096)  # 16 Mpx each, inside the per-image bound
    never_decoded(monkeypatch)
    assert media._check(messages(*[big] * 4)) == 4  # 64 Mpx: at the bound
    with pytest.raises(InvalidArgument) as info:
        media._check(messages(*[big] * 64))
    assert info.value.reason == "MEDIA_TOO_LARGE"
    assert info.value.param == "messages[0].content[4].image_url.url"  # the fifth image


def test_images_that_cannot_fit_the_window_are_refused_before_decoding(monkeypatch) -> None:
    from tokenwire.server.engine.vllm.chat_media import VllmChatMedia
    from tokenwire.server.engine.vllm.mm_features import VllmMultimodal

    small = llm(48, 8)  # 48 tokens; each image of the tiny VLM is 20 image tokens
    image = png(100, 60)
    chat = VllmChatMedia(small, "openai", None, {})
    never_decoded(monkeypatch)
    assert chat._check(messages(image, image)) == 2  # 40 image tokens
    with pytest.raises(InvalidArgument) as info:
        chat._check(messages(image, image, image))
    assert (info.value.reason, info.value.param) == (
        "PROMPT_TOO_LONG", "messages[0].content[2].image_url.url")
    assert "at least 60 tokens" in info.value.message
    # Generate's content_parts: the same rule.
    from tokenwire.server.core.media_inputs import MediaPart

    parts = [MediaPart("image", f"content_parts[{i}]", url=image) for i in range(3)]
    with pytest.raises(InvalidArgument) as info:
        VllmMultimodal(small)._check_urls(parts)
    assert (info.value.reason, info.value.param) == ("PROMPT_TOO_LONG", "content_parts[2].url")


def test_the_token_count_is_vllms_for_the_image_size(wide: Any) -> None:
    """The count read from the size is the image tokens vLLM's processor
    puts in the placeholder (tests/vlm_features.py: 20 for 100 x 60)."""
    from tests.vlm_features import vllm_features
    from tokenwire.server.engine.vllm.mm_families import ImageTokens

    ref = vllm_features()
    place = ref["features"]["mm_placeholders"]["image"][0]
    image_token = wide.model_config.hf_config.image_token_id
    run = ref["expanded"][place["offset"]:place["offset"] + place["length"]]
    assert ImageTokens(wide).of(100, 60) == run.count(image_token)


def test_pil_decompression_bomb_header_is_media_too_large() -> None:
    url = "data:image/png;base64," + base64.b64encode(png_header(20000, 20000)).decode()
    with pytest.raises(InvalidArgument) as info:
        multimodal.inspect_data_url("p", url)
    assert info.value.reason == "MEDIA_TOO_LARGE"


def test_small_images_are_read_on_the_loop_larger_ones_off_it(wide: Any, monkeypatch) -> None:
    """Issue #46 item 5: data URLs up to INLINE_INSPECT_CHARS (a few small
    images) have their headers read where the call runs, no hop to a worker
    thread and back; larger ones (and the first image, while the count is
    built) on a worker thread. Both refuse the same way."""
    import asyncio
    import threading

    from tokenwire.server.core.domain import RenderOptions
    from tokenwire.server.engine.vllm.chat_media import VllmChatMedia

    media = VllmChatMedia(wide, "openai", None, {})
    on_loop: list[bool] = []
    check = media._check

    def spy(m: list[dict[str, Any]]) -> int:
        on_loop.append(threading.current_thread() is threading.main_thread())
        return check(m)

    monkeypatch.setattr(media, "_check", spy)
    small = "data:image/png;base64," + base64.b64encode(b"not an image").decode()
    large = "data:image/png;base64," + base64.b64encode(
        b"x" * multimodal.INLINE_INSPECT_CHARS).decode()
    for url in (small, large):
        with pytest.raises(InvalidArgument) as info:
            asyncio.run(media.render(messages(url), RenderOptions()))
        assert (info.value.reason, info.value.param) == (
            "MEDIA_INVALID", "messages[0].content[0].image_url.url")
    assert on_loop == [False, False]  # the count not built yet; then too large
    assert media._tokens.of(64, 64) is not None  # the count built (a first image did)
    for url in (small, large):
        with pytest.raises(InvalidArgument) as info:
            asyncio.run(media.render(messages(url), RenderOptions()))
        assert info.value.reason == "MEDIA_INVALID"
    assert on_loop == [False, False, True, False]
