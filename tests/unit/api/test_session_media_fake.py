"""A Session turn with images is continued by id (the fake engine): the
turn is stored with its images as the engine prepared them, the next turn
runs them again under the longer prompt (same placeholders, its cache
blocks hit, weight spans and streaming as without images), a turn of a
turn keeps them too; new images in a continuation's messages, or token-in
media beside a continuation of such a turn, are refused naming the field;
the store counts the images' prepared bytes."""

from __future__ import annotations

import base64
import collections.abc
import io
from typing import Any

import grpc
import pytest
from google.protobuf import json_format
from google.rpc import code_pb2
from PIL import Image

from tests.servers import ThreadServer, fake_serving
from tests.session_rpc import RawSession, start_chat
from tokenwire.server.core.media_inputs import MediaPart
from tokenwire.server.engine.fake import media
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.continuation_store import StoredTurn
from tokenwire.v1 import chat_pb2, service_pb2_grpc


def _png(color: tuple[int, int, int] = (10, 200, 30)) -> str:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), color).save(buf, "PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


URL, URL2 = _png(), _png((200, 10, 30))
LOOK = [{"role": "user", "content": [{"type": "text", "text": "Look:"},
                                     {"type": "image_url", "image_url": {"url": URL}}]}]
NEXT = [{"role": "user", "content": "And now?"}]


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    eng = FakeEngine(max_model_len=512, block_size=4)
    eng.takes_media = True
    return eng


@pytest.fixture(scope="module")
def server(engine: FakeEngine) -> collections.abc.Iterator[ThreadServer]:
    with fake_serving(engine, served_model_name="fake-model",
                      continuation_session_max_tokens=100_000) as srv:
        yield srv


@pytest.fixture(scope="module")
def stub(server: ThreadServer) -> collections.abc.Iterator[Any]:
    with grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


def turn(s: RawSession, rid: str, **fields: Any) -> tuple[Any, Any]:
    s.send(start_chat(rid, return_token_ids=True, max_tokens=4, **fields))
    events = s.until_terminal(rid)
    assert events[-1].WhichOneof("event") == "done", events[-1]
    return events[0].chat_result, events[-1].done


def test_a_turn_with_an_image_is_continued_with_it(stub) -> None:
    s = RawSession(stub)
    t1, done1 = turn(s, "t1", messages=LOOK)
    assert done1.continuable
    places = json_format.MessageToDict(t1.mm_placeholders)
    (offset, length), = [(p["offset"], p["length"]) for p in places["image"]]
    assert list(t1.prompt_token_ids[offset:offset + length]) == media.EXPAND
    t2, done2 = turn(s, "t2", continuation={"previous_request_id": "t1", "messages": NEXT})
    prompt2 = list(t2.prompt_token_ids)
    assert prompt2 == [*t1.prompt_token_ids, *t1.choices[0].token_ids,
                       *done2.suffix_token_ids] == list(done2.prompt_token_ids)
    # The image runs again where it was: the same placeholders, and the
    # earlier turn's blocks (image included) are hits.
    assert json_format.MessageToDict(t2.mm_placeholders) == places
    assert t2.usage.prompt_tokens_details.cached_tokens >= offset + length
    assert done2.continuable
    # A turn of a turn keeps the image too (streamed this time).
    s.send(start_chat("t3", return_token_ids=True, max_tokens=3, stream=True,
                      continuation={"previous_request_id": "t2",
                                    "suffix_token_ids": [1, 50, 51]}))
    events = s.until_terminal("t3")
    first = events[0].chat_chunk
    assert json_format.MessageToDict(first.mm_placeholders) == places
    assert list(first.prompt_token_ids) == [*prompt2, *t2.choices[0].token_ids, 1, 50, 51]
    assert events[-1].done.continuable
    s.close()


def test_the_same_conversation_without_the_session_gives_the_same_ids(stub) -> None:
    """The continued prompt is what chat renders for the whole conversation
    with the image (the fake template is ChatML)."""
    s = RawSession(stub)
    t1, _ = turn(s, "a", messages=LOOK)
    t2, _ = turn(s, "b", continuation={"previous_request_id": "a", "messages": NEXT})
    s.close()
    whole = json_format.ParseDict({"model": "fake-model", "max_tokens": 1, "return_token_ids": True,
                                   "messages": [*LOOK, {"role": "assistant",
                                                        "content": t1.choices[0].message.content},
                                                *NEXT]},
                                  chat_pb2.CreateChatCompletionRequest())
    assert list(stub.CreateChatCompletion(whole, timeout=10).prompt_token_ids) == list(
        t2.prompt_token_ids)


def _shot(url: str, text: str = "Now:") -> list[dict[str, Any]]:
    return [{"role": "user", "content": [{"type": "text", "text": text},
                                         {"type": "image_url", "image_url": {"url": url}}]}]


def _places(msg: Any) -> list[tuple[int, int]]:
    return [(p["offset"], p["length"])
            for p in json_format.MessageToDict(msg.mm_placeholders).get("image", [])]


def test_new_images_in_a_continuation_join_the_turns(stub, engine) -> None:
    """An agent's next turn with a new screenshot: the suffix is what the
    template renders after the answer, the new image expanded in it; both
    images run, the earlier one where it was (its blocks hit); the same
    ids and placeholders as a chat of the whole conversation."""
    s = RawSession(stub)
    t1, _ = turn(s, "t1", messages=LOOK)
    t2, done2 = turn(s, "t2", continuation={"previous_request_id": "t1",
                                            "messages": _shot(URL2)})
    prompt2 = list(t2.prompt_token_ids)
    assert prompt2 == [*t1.prompt_token_ids, *t1.choices[0].token_ids,
                       *done2.suffix_token_ids] == list(done2.prompt_token_ids)
    first, second = _places(t2)
    assert first == _places(t1)[0] and second[0] >= len(t1.prompt_token_ids)
    assert all(prompt2[o:o + n] == media.EXPAND for o, n in (first, second))
    assert list(done2.suffix_token_ids).count(media.IMAGE) == media.EMBEDS  # expanded once
    ran = engine.requests[-1].multimodal
    assert ran is not None and len(ran.engine_input) == 2 and ran.prompt_token_ids == prompt2
    assert t2.usage.prompt_tokens_details.cached_tokens >= sum(first)
    assert done2.continuable
    whole = json_format.ParseDict(
        {"model": "fake-model", "max_tokens": 1, "return_token_ids": True,
         "messages": [*LOOK, {"role": "assistant", "content": t1.choices[0].message.content},
                      *_shot(URL2)]}, chat_pb2.CreateChatCompletionRequest())
    chat = stub.CreateChatCompletion(whole, timeout=10)
    assert list(chat.prompt_token_ids) == prompt2 and _places(chat) == [first, second]
    # A turn of that turn keeps both.
    t3, done3 = turn(s, "t3", continuation={"previous_request_id": "t2", "messages": NEXT})
    assert _places(t3) == [first, second] and done3.continuable
    s.close()


def test_a_text_turn_continued_with_an_image(stub) -> None:
    s = RawSession(stub)
    t1, _ = turn(s, "t1", messages=NEXT)
    assert not t1.mm_placeholders.image
    t2, done = turn(s, "t2", continuation={"previous_request_id": "t1", "messages": LOOK})
    (offset, length), = _places(t2)
    assert offset > len(t1.prompt_token_ids) and done.continuable
    assert list(t2.prompt_token_ids[offset:offset + length]) == media.EXPAND
    s.close()


def test_images_in_a_continuation_keep_the_rules_and_name_the_field(stub) -> None:
    s = RawSession(stub)
    turn(s, "t1", messages=LOOK)
    cases = [  # the fake's per-prompt limit is 2 images: one stored, two new
        ([*_shot(URL2), *_shot(URL, "Again:")], "continuation.messages", "TOO_MANY_ITEMS"),
        (_shot("http://elsewhere.example/a.png"), "continuation.messages[0].content[1]"
         ".image_url.url", "MEDIA_URL_NOT_ALLOWED"),
        (_shot("data:image/png;base64,@@@"), "continuation.messages[0].content[1]"
         ".image_url.url", "MEDIA_INVALID"),
    ]
    for n, (messages, param, reason) in enumerate(cases):
        s.send(start_chat(f"bad{n}", continuation={"previous_request_id": "t1",
                                                   "messages": messages}))
        err = s.until_terminal(f"bad{n}")[-1].error
        assert (code_pb2.Code.Name(err.code), err.param, err.reason) == (
            "INVALID_ARGUMENT", param, reason), (n, err)
    # Token-in media beside a continuation of a turn with images: refused.
    s.send(start_chat("t3", continuation={"previous_request_id": "t1"},
                      nvext={"content_parts": [{"type": "image_url", "url": URL}]}))
    err = s.until_terminal("t3")[-1].error
    assert (code_pb2.Code.Name(err.code), err.param, err.reason) == (
        "INVALID_ARGUMENT", "continuation", "FIELDS_CONFLICT")
    # ... and the session serves on.
    t4, done = turn(s, "t4", continuation={"previous_request_id": "t1", "messages": NEXT})
    assert done.continuable and t4.mm_placeholders.image
    s.close()


def test_an_image_for_a_text_only_model_names_the_continuations_field() -> None:
    with fake_serving(FakeEngine(max_model_len=512), served_model_name="fake-model") as srv, \
            grpc.insecure_channel(srv.address) as ch:
        s = RawSession(service_pb2_grpc.TokenwireServiceStub(ch))
        turn(s, "t1", messages=NEXT)
        s.send(start_chat("t2", continuation={"previous_request_id": "t1",
                                              "messages": _shot(URL)}))
        err = s.until_terminal("t2")[-1].error
        assert (err.param, err.reason) == ("continuation.messages[0].content[1]",
                                           "UNSUPPORTED_MODALITY")
        s.close()


def test_the_store_counts_the_images_prepared_bytes() -> None:
    plain = StoredTurn.of([1, 2, 3], [[4, 5]], None)
    assert plain.tokens == 5
    part = MediaPart(modality="image", param="p", url=URL)
    prepared = media.from_parts([1, media.IMAGE, 2], [part])
    with_image = StoredTurn.of(prepared.prompt_token_ids, [[4, 5]], None, prepared)
    assert prepared.nbytes == media.ITEM_BYTES
    assert with_image.tokens == len(prepared.prompt_token_ids) + 2 + media.ITEM_BYTES // 4


def test_speculative_prefill_after_a_turn_with_an_image(stub, engine) -> None:
    """The next turn's prefix is warmed with the turn's image where it was
    (the blocks' keys include the image), so the continuation hits it."""
    import time

    s = RawSession(stub)
    t1, done = turn(s, "p1", cache_salt="tenant-i",
                    nvext={"agent_hints": {"speculative_prefill": True}}, messages=LOOK)
    assert done.speculative_prefill
    deadline = time.monotonic() + 5
    while engine.running and time.monotonic() < deadline:
        time.sleep(0.01)
    prefill = next(r for r in reversed(engine.requests) if r.request_id.startswith("prefill-"))
    prefix = list(prefill.prompt_token_ids)  # (+ what the template renders after the answer)
    assert prefix[:len(t1.prompt_token_ids) + 4] == [*t1.prompt_token_ids,
                                                      *t1.choices[0].token_ids]
    assert prefill.multimodal is not None and prefill.multimodal.prompt_token_ids == prefix
    assert prefill.multimodal.placeholders == {"image": [
        (p.offset, p.length) for p in t1.mm_placeholders.image]}
    t2, _ = turn(s, "p2", continuation={"previous_request_id": "p1", "messages": NEXT})
    assert t2.usage.prompt_tokens_details.cached_tokens == (
        len(prefix) // engine.block_size * engine.block_size)
    s.close()
