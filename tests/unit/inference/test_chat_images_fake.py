"""Chat with images (issue #36 item 1) on the fake engine: OpenAI's
image_url parts (REST's shape, in `content`) and gRPC's typed parts (bytes
and a MIME type) give the same expanded prompt; return_token_ids answers
the expanded ids and mm_placeholders (unary and the first chunk); the
URL rules, the limits and bad images are INVALID_ARGUMENT naming the
field; the cache salt keeps image blocks apart; streaming, n > 1,
logprobs, stop ids and weight versions work as without images."""

from __future__ import annotations

import base64
import collections.abc
import io

import grpc
import pytest
from google.protobuf import json_format
from PIL import Image

from tests.cases import png_header
from tests.servers import fake_serving
from tokenwire.server.engine.fake import media
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import chat_pb2, multimodal_pb2, service_pb2_grpc


def png(w: int = 8, h: int = 6, color: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, "PNG")
    return buf.getvalue()


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


PNG = png()
URL = data_url(PNG)


@pytest.fixture(scope="module")
def vlm() -> collections.abc.Iterator[tuple[service_pb2_grpc.TokenwireServiceStub, FakeEngine]]:
    engine = FakeEngine(max_model_len=512, block_size=4)
    engine.takes_media = True
    with fake_serving(engine, served_model_name="fake-model") as server, \
            grpc.insecure_channel(server.address) as channel:
        yield service_pb2_grpc.TokenwireServiceStub(channel), engine


def chat(content: object, **body: object) -> chat_pb2.CreateChatCompletionRequest:
    return json_format.ParseDict(
        {"model": "fake-model", "max_tokens": 4, "return_token_ids": True,
         "messages": [{"role": "user", "content": content}], **body},
        chat_pb2.CreateChatCompletionRequest())


def parts(*items: object) -> list[dict]:
    return [{"type": "text", "text": i} if isinstance(i, str) else
            {"type": "image_url", "image_url": {"url": i[0]}} for i in items]


def refused(call: object, req: object) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as info:
        call(req)  # type: ignore[operator]
    err = info.value
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    from google.rpc import error_details_pb2
    from grpc_status import rpc_status

    status = rpc_status.from_call(err)
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            ei = error_details_pb2.ErrorInfo()
            detail.Unpack(ei)
            return ei.reason, ei.metadata["param"]
    raise AssertionError("no ErrorInfo")


def test_an_image_part_expands_in_the_prompt_and_names_its_placeholders(vlm) -> None:
    stub, _ = vlm
    resp = stub.CreateChatCompletion(chat(parts("Look: ", (URL,), " what?")))
    ids = list(resp.prompt_token_ids)
    (place,) = resp.mm_placeholders.image
    assert ids[place.offset:place.offset + place.length] == media.EXPAND
    assert ids.count(media.IMAGE) == media.EMBEDS
    text = stub.CreateChatCompletion(chat("Look:  what?"))
    # the text around the image is the text-only rendering's
    assert [t for t in ids if t not in media.EXPAND] == list(text.prompt_token_ids)
    assert not text.HasField("mm_placeholders")
    assert resp.choices[0].message.content == text.choices[0].message.content


def test_typed_grpc_parts_are_the_rest_shape(vlm) -> None:
    stub, _ = vlm
    rest = stub.CreateChatCompletion(chat(parts("Look: ", (URL,))))
    req = chat("")
    req.messages[0].ClearField("content")
    req.messages[0].parts.add(text="Look: ")
    req.messages[0].parts.add(image=multimodal_pb2.ImageInput(data=PNG, mime_type="image/png"))
    typed = stub.CreateChatCompletion(req)
    assert list(typed.prompt_token_ids) == list(rest.prompt_token_ids)
    assert typed.mm_placeholders == rest.mm_placeholders
    assert json_format.MessageToDict(typed.mm_placeholders) == {
        "image": [{"offset": rest.mm_placeholders.image[0].offset,
                   "length": len(media.EXPAND)}]}


def test_streaming_n_logprobs_and_stop_ids_with_an_image(vlm) -> None:
    stub, _ = vlm
    unary = stub.CreateChatCompletion(chat(parts((URL,), "hi"), n=2, logprobs=True,
                                           top_logprobs=2))
    assert len(unary.choices) == 2
    for choice in unary.choices:
        assert len(choice.logprobs.content) == len(choice.token_ids) > 0
    chunks = list(stub.StreamChatCompletion(chat(parts((URL,), "hi"), n=2, logprobs=True)))
    first = chunks[0]
    assert list(first.prompt_token_ids) == list(unary.prompt_token_ids)
    assert first.mm_placeholders == unary.mm_placeholders
    for i in range(2):
        streamed = [t for c in chunks for ch in c.choices if ch.index == i for t in ch.token_ids]
        assert streamed == list(unary.choices[i].token_ids)
    stop_at = unary.choices[0].token_ids[1]
    stopped = stub.CreateChatCompletion(chat(parts((URL,), "hi"), stop_token_ids=[stop_at]))
    assert stopped.choices[0].finish_reason == "stop"
    assert list(stopped.choices[0].token_ids) == list(unary.choices[0].token_ids[:2])
    assert stopped.system_fingerprint == unary.system_fingerprint
    for choice in unary.choices:  # one weight version spans the whole completion
        (span,) = choice.weight_versions
        assert (span.start, span.end) == (0, len(choice.token_ids))


def test_the_cache_salt_keeps_image_blocks_apart(vlm) -> None:
    stub, _ = vlm
    long_text = "describe this picture in detail " * 4
    body = parts((data_url(png(color=(1, 2, 3))),), long_text)
    first = stub.CreateChatCompletion(chat(body, cache_salt="tenant-a"))
    again = stub.CreateChatCompletion(chat(body, cache_salt="tenant-a"))
    other = stub.CreateChatCompletion(chat(body, cache_salt="tenant-b"))
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert again.usage.prompt_tokens_details.cached_tokens > 0
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    # another image, same salt and text: no block from the image on is the
    # first image's (as vLLM keys a block by the items starting before its
    # end); whole blocks before the image still hit
    changed = stub.CreateChatCompletion(
        chat(parts((data_url(png(color=(9, 9, 9))),), long_text), cache_salt="tenant-a"))
    (image,) = changed.mm_placeholders.image
    assert changed.usage.prompt_tokens_details.cached_tokens <= image.offset < len(
        changed.prompt_token_ids) // 2


BAD = [
    ("http-not-allowed", parts(("https://evil.example/x.png",)), "MEDIA_URL_NOT_ALLOWED",
     "messages[0].content[0].image_url.url"),
    ("file-not-allowed", parts(("file:///etc/passwd",)), "MEDIA_URL_NOT_ALLOWED",
     "messages[0].content[0].image_url.url"),
    ("not-an-image-type", parts(("data:text/plain;base64,aGk=",)), "UNSUPPORTED_MEDIA_TYPE",
     "messages[0].content[0].image_url.url"),
    ("undecodable", parts((data_url(b"not a png at all"),)), "MEDIA_INVALID",
     "messages[0].content[0].image_url.url"),
    ("not-base64", parts(("data:image/png;base64,@@@",)), "MEDIA_INVALID",
     "messages[0].content[0].image_url.url"),
    ("too-many", parts((URL,), (URL,), (URL,)), "TOO_MANY_ITEMS",
     "messages[0].content[2]"),
    ("no-url", [{"type": "image_url"}], "FIELD_REQUIRED", "messages[0].content[0].image_url"),
    # A 20000 x 20000 PNG header (PIL's DecompressionBombError: was INTERNAL, Trust IV L-3).
    ("bomb-header", parts((data_url(png_header(20000, 20000)),)), "MEDIA_TOO_LARGE",
     "messages[0].content[0].image_url.url"),
]


@pytest.mark.parametrize(("content", "reason", "param"), [b[1:] for b in BAD],
                         ids=[b[0] for b in BAD])
def test_bad_images_are_refused_naming_the_field(vlm, content, reason, param) -> None:
    stub, _ = vlm
    assert refused(stub.CreateChatCompletion, chat(content)) == (reason, param)
    assert stub.CreateChatCompletion(chat("still serving")).choices[0].message.content


def test_pixels_and_bytes_per_request_are_bounded(vlm) -> None:
    stub, _ = vlm
    buf = io.BytesIO()
    Image.new("1", (5000, 4000)).save(buf, "PNG")  # small file, 20 M pixels
    assert refused(stub.CreateChatCompletion, chat(parts((data_url(buf.getvalue()),)))) == (
        "MEDIA_TOO_LARGE", "messages[0].content[0].image_url.url")
    six, five = data_url(b"\0" * (6 << 20)), data_url(b"\0" * (5 << 20))  # over 10 MiB
    assert refused(stub.CreateChatCompletion, chat(parts((six,), (five,)))) == (
        "MEDIA_TOO_LARGE", "messages[0].content[1]")


def test_typed_parts_refuse_an_unsupported_mime_type_and_both_forms(vlm) -> None:
    stub, _ = vlm
    req = chat("")
    req.messages[0].ClearField("content")
    req.messages[0].parts.add(image=multimodal_pb2.ImageInput(data=PNG, mime_type="image/tiff"))
    assert refused(stub.CreateChatCompletion, req) == (
        "UNSUPPORTED_MEDIA_TYPE", "messages[0].parts[0].image.mime_type")
    req = chat("text too")
    req.messages[0].parts.add(text="and parts")
    assert refused(stub.CreateChatCompletion, req) == ("FIELDS_CONFLICT", "messages[0].parts")


def test_a_text_only_model_refuses_an_image(fake_stub) -> None:
    assert refused(fake_stub.CreateChatCompletion, chat(parts("x", (URL,)))) == (
        "UNSUPPORTED_MODALITY", "messages[0].content[1]")


KEYS = """
[[keys]]
key = "sk-tenant-a"
tenant = "a"

[[keys]]
key = "sk-tenant-b"
tenant = "b"
"""


def test_two_tenants_never_share_an_image_s_blocks(tmp_path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text(KEYS)
    engine = FakeEngine(max_model_len=512, block_size=4)
    engine.takes_media = True
    body = chat(parts((data_url(png(color=(4, 5, 6))),), "the same picture, the same words"))
    with fake_serving(engine, served_model_name="fake-model", api_keys_file=str(keys)) as server, \
            grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.TokenwireServiceStub(channel)

        def cached(key: str) -> int:
            resp = stub.CreateChatCompletion(body, metadata=(("authorization", f"Bearer {key}"),))
            return resp.usage.prompt_tokens_details.cached_tokens

        assert cached("sk-tenant-a") == 0
        assert cached("sk-tenant-a") > 0  # the same tenant hits its own image blocks
        assert cached("sk-tenant-b") == 0  # the other tenant does not
        assert cached("sk-tenant-b") > 0


def test_rendering_images_is_admitted_as_a_request() -> None:
    import asyncio

    from tokenwire.server.core.admission import Admission
    from tokenwire.server.core.domain import RenderOptions
    from tokenwire.server.core.errors import ResourceExhausted
    from tokenwire.server.core.metrics import Metrics
    from tokenwire.server.engine.guarded import GuardedEngine

    inner = FakeEngine(max_model_len=512)
    inner.takes_media = True
    seen: list[int] = []
    admission = Admission(max_requests=1, max_tokens=10_000)
    render = inner.render_chat_media

    async def counting(messages, options):
        seen.append(admission.requests)
        return await render(messages, options)

    inner.render_chat_media = counting  # type: ignore[method-assign]
    guarded = GuardedEngine(inner, admission, Metrics())
    messages = [{"role": "user", "content": parts((URL,), "hi")}]
    prepared = asyncio.run(guarded.render_chat_media(messages, RenderOptions()))
    assert seen == [1] and admission.requests == 0
    assert prepared.placeholders["image"] == [(prepared.prompt_token_ids.index(media.IMAGE) - 1,
                                               len(media.EXPAND))]
    with admission.hold(0), pytest.raises(ResourceExhausted):  # a full server refuses it
        asyncio.run(guarded.render_chat_media(messages, RenderOptions()))


def test_render_with_images_gives_the_generate_request_that_runs_them(vlm) -> None:
    """RenderChatCompletion (vLLM's /v1/chat/completions/render) of a chat
    with images: the expanded ids and vLLM's `features` JSON of them;
    Generate runs that request on the same prompt and placeholders."""
    stub, _ = vlm
    req = chat(parts("Look:", (URL,), "and", (data_url(png(color=(1, 2, 3))),)), temperature=0)
    ref = stub.CreateChatCompletion(req)
    rendered = stub.RenderChatCompletion(req)
    assert list(rendered.token_ids) == list(ref.prompt_token_ids)
    features = json_format.MessageToDict(rendered.features)
    places = [(p.offset, p.length) for p in ref.mm_placeholders.image]
    assert [(p["offset"], p["length"]) for p in features["mm_placeholders"]["image"]] == places
    assert len(features["mm_hashes"]["image"]) == len(features["kwargs_data"]["image"]) == 2
    assert features["mm_hashes"]["image"][0] != features["mm_hashes"]["image"][1]
    gen = stub.Generate(rendered)
    assert list(gen.prompt_token_ids) == list(ref.prompt_token_ids)
    assert [(p.offset, p.length) for p in gen.mm_placeholders.image] == places
    assert list(gen.choices[0].token_ids) == list(ref.choices[0].token_ids)  # greedy
    # A text-only chat renders no features.
    assert not stub.RenderChatCompletion(chat("just text")).HasField("features")


def test_a_processor_cache_drift_is_rendered_again_and_sent_once_more(vlm) -> None:
    """vLLM fails a request with images before any output when its
    frontend's processor cache drifted from the engine core's (the adapter
    raises ENGINE_REQUEST_FAILED; the frontend has dropped the drifted
    items): chat renders the images again, every item's tensors kept, and
    sends it once more, unary and streamed; a second failure is the error."""
    stub, engine = vlm
    req = chat(parts("Look:", (URL,)), temperature=0)
    ref = stub.CreateChatCompletion(req)
    before = len(engine.requests)
    engine.media_misses = 1
    again = stub.CreateChatCompletion(req)
    assert len(engine.requests) - before == 2  # the failed attempt, then the one that ran
    assert list(again.prompt_token_ids) == list(ref.prompt_token_ids)
    assert list(again.choices[0].token_ids) == list(ref.choices[0].token_ids)
    engine.media_misses = 1
    chunks = list(stub.StreamChatCompletion(chat(parts("Look:", (URL,)), temperature=0,
                                                 stream=True)))
    assert [t for c in chunks for ch in c.choices for t in ch.token_ids] == list(
        ref.choices[0].token_ids)
    engine.media_misses = 2
    with pytest.raises(grpc.RpcError) as info:
        stub.CreateChatCompletion(req)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert engine.media_misses == 0
    assert list(stub.CreateChatCompletion(req).choices[0].token_ids) == list(
        ref.choices[0].token_ids)
