"""Token-in with images on the real engine (issue #36 items 2, 4, 5): the
tiny random Idefics3 (M1's session server, `--limit-mm-per-prompt
{"image": 2}`) takes Generate's `content_parts` (expanded exactly as
vLLM's own renderer expands the same ids and image) and `features` built
in vLLM's exact shape by vLLM's renderer and `extract_mm_features` (what
vLLM's /render returns), over gRPC typed and as vLLM's JSON; both paths
sample the same ids; turn 2 of a rollout as ids hits the prefix cache for
the image tokens in its tenant's salt only; bad features are refused with
the field named and the server keeps serving."""

from __future__ import annotations

import base64

import grpc
import pytest
from google.protobuf import json_format

from tests.conftest import TINY_VLM
from tests.vlm_features import vllm_features
from tokenwire.v1 import generate_pb2

IMAGE_TOKEN = 49153  # <image> of the tiny VLM's tokenizer (docs/multimodal.md)


@pytest.fixture(scope="module")
def vllm_render():
    """vLLM's own renderer's ids and features for the tiny VLM (tests/vlm_features.py)."""
    if not (TINY_VLM / "config.json").exists():
        pytest.skip("make tiny-vlm")
    return vllm_features()


def gen(body: dict) -> generate_pb2.GenerateRequest:
    base = {"sampling_params": {"max_tokens": 6, "temperature": 0}, "return_token_ids": True}
    return json_format.ParseDict({**base, **body}, generate_pb2.GenerateRequest())


def typed(features: dict) -> dict:
    """vLLM's features JSON as Generate's typed gRPC form (bytes, not base64)."""
    items = []
    for m, hashes in features["mm_hashes"].items():
        for h, p, k in zip(hashes, features["mm_placeholders"][m], features["kwargs_data"][m],
                           strict=True):
            items.append({"modality": m, "hash": h, "placeholder": p, "kwargs_data": k})
    return {"items": items}  # (ParseDict reads bytes fields as base64)


def test_content_parts_and_features_give_vllms_ids_and_the_same_output(vlm_stub,
                                                                         vllm_render) -> None:
    r = vllm_render
    parts = vlm_stub.Generate(gen({"token_ids": r["ids"], "content_parts": [
        {"type": "image_url", "url": r["url"]}]}), timeout=120)
    assert list(parts.prompt_token_ids) == r["expanded"]  # as vLLM's renderer expands them
    assert len(r["expanded"]) > len(r["ids"])
    places = json_format.MessageToDict(parts, preserving_proto_field_name=True)["mm_placeholders"]
    assert places == r["features"]["mm_placeholders"]  # vLLM's JSON, same keys
    as_json = vlm_stub.Generate(gen({"token_ids": r["expanded"], "features": r["features"]}),
                                timeout=120)
    grpc_typed = vlm_stub.Generate(gen({"token_ids": r["expanded"],
                                        "mm_features": typed(r["features"])}), timeout=120)
    for resp in (as_json, grpc_typed):
        assert list(resp.prompt_token_ids) == r["expanded"]
        assert list(resp.choices[0].token_ids) == list(parts.choices[0].token_ids)
    # n > 1, logprobs, stop ids and weight spans as without images (streamed too).
    chunks = list(vlm_stub.StreamGenerate(gen({
        "token_ids": r["ids"], "content_parts": [{"type": "image_url", "url": r["url"]}],
        "sampling_params": {"max_tokens": 5, "n": 2, "temperature": 1.0, "seed": 7,
                            "logprobs": 1, "stop_token_ids": [2]}}), timeout=120))
    assert list(chunks[0].prompt_token_ids) == r["expanded"]
    assert [(p.offset, p.length) for p in chunks[0].mm_placeholders.image] == [
        (places["image"][0]["offset"], places["image"][0]["length"])]
    for index in (0, 1):
        mine = [ch for c in chunks for ch in c.choices if ch.index == index]
        ids = [t for ch in mine for t in ch.token_ids]
        assert 0 < len(ids) <= 5
        assert sum(len(ch.logprobs.content) for ch in mine) == len(ids)
        (last,) = [ch for ch in mine if ch.finish_reason]
        assert [(s.start, s.end) for s in last.weight_versions] == [(0, len(ids))]


def test_turn_two_as_ids_hits_the_image_blocks_in_its_salt_only(vlm_stub, vllm_render) -> None:
    r = vllm_render
    part = [{"type": "image_url", "url": r["url"]}]
    one = vlm_stub.Generate(gen({
        "token_ids": r["ids"], "content_parts": part, "cache_salt": "tenant-a",
        "sampling_params": {"max_tokens": 24, "temperature": 0, "ignore_eos": True}}),
        timeout=120)
    image_len = r["features"]["mm_placeholders"]["image"][0]["length"]
    turn2 = [*one.prompt_token_ids, *one.choices[0].token_ids, 2, 198, 1, 4093, 198, 520, 2,
             198, 1, 520, 198]
    for path in ({"content_parts": part}, {"features": r["features"]}):
        same = vlm_stub.Generate(gen({"token_ids": turn2, "cache_salt": "tenant-a", **path}),
                                 timeout=120)
        assert list(same.prompt_token_ids) == turn2  # already expanded: placed, not re-expanded
        if "content_parts" in path:  # the same image hashes as turn 1: its blocks hit
            assert same.usage.prompt_tokens_details.cached_tokens > image_len
        other = vlm_stub.Generate(gen({"token_ids": turn2, "cache_salt": "tenant-b", **path}),
                                  timeout=120)
        assert other.usage.prompt_tokens_details.cached_tokens == 0
    again = vlm_stub.Generate(gen({"token_ids": turn2, "cache_salt": "tenant-a",
                                   "features": r["features"]}), timeout=120)
    assert again.usage.prompt_tokens_details.cached_tokens > image_len  # features key alike


def _refused(stub, body: dict) -> dict[str, str]:
    with pytest.raises(grpc.RpcError) as info:
        stub.Generate(gen(body), timeout=120)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    return dict(info.value.trailing_metadata())


def test_bad_features_are_refused_naming_the_field(vlm_stub, vllm_render) -> None:
    r = vllm_render
    f = r["features"]
    place = f["mm_placeholders"]["image"][0]
    shifted = {**f, "mm_placeholders": {"image": [{**place, "offset": place["offset"] + 1}]}}
    meta = _refused(vlm_stub, {"token_ids": r["expanded"], "features": shifted})
    assert meta["tokenwire-reason"] == "PLACEHOLDER_MISMATCH"
    assert meta["tokenwire-param"] == "features.mm_placeholders.image[0]"
    short = {**f, "mm_placeholders": {"image": [{**place, "length": place["length"] - 4}]}}
    assert _refused(vlm_stub, {"token_ids": r["expanded"], "features": short})[
        "tokenwire-reason"] == "PLACEHOLDER_MISMATCH"  # fewer image tokens than embeddings
    outside = {**f, "mm_placeholders": {"image": [{**place, "offset": len(r["expanded"])}]}}
    assert _refused(vlm_stub, {"token_ids": r["expanded"], "features": outside})[
        "tokenwire-reason"] == "PLACEHOLDER_OUT_OF_RANGE"
    counts = {**f, "mm_hashes": {"image": [*f["mm_hashes"]["image"], "another"]}}
    meta = _refused(vlm_stub, {"token_ids": r["expanded"], "features": counts})
    assert meta["tokenwire-reason"] == "FEATURES_INVALID"  # hashes count != placeholders count
    garbage = {**f, "kwargs_data": {"image": [base64.b64encode(b"\x93not msgpack").decode()]}}
    meta = _refused(vlm_stub, {"token_ids": r["expanded"], "features": garbage})
    assert meta["tokenwire-param"] == "features.kwargs_data.image[0]"
    three = [{"type": "image_url", "url": r["url"]}] * 3
    assert _refused(vlm_stub, {"token_ids": r["ids"], "content_parts": three})[
        "tokenwire-reason"] == "TOO_MANY_ITEMS"
    wrong = _refused(vlm_stub, {"token_ids": r["ids"] + [IMAGE_TOKEN], "content_parts": [
        {"type": "image_url", "url": r["url"]}]})
    assert wrong["tokenwire-param"] == "content_parts"
    # ... and the server still serves.
    ok = vlm_stub.Generate(gen({"token_ids": r["expanded"], "features": f}), timeout=120)
    assert ok.choices[0].token_ids


def test_chat_token_data_rollout_with_its_image_hits_the_cache(vlm_stub, vllm_render) -> None:
    """Chat's token-in (nvext.token_data) takes the same media: turn 1 as
    unexpanded ids + content_parts, turn 2 as turn 1's expanded prompt +
    completion + the new turn's ids with the same image: its image blocks
    come from the cache (more cached tokens than the image's placeholder)."""
    from tokenwire.v1 import chat_pb2

    r = vllm_render
    part = [{"type": "image_url", "url": r["url"]}]

    def chat(ids: list[int], **nvext) -> chat_pb2.CreateChatCompletionRequest:
        return json_format.ParseDict({
            "messages": [{"role": "user", "content": "(ids)"}], "max_tokens": 24,
            "temperature": 0, "ignore_eos": True, "return_token_ids": True,
            "cache_salt": "chat-rollout", "nvext": {"token_data": ids, **nvext}},
            chat_pb2.CreateChatCompletionRequest())

    one = vlm_stub.CreateChatCompletion(chat(r["ids"], content_parts=part), timeout=120)
    assert list(one.prompt_token_ids) == r["expanded"]
    image_len = r["features"]["mm_placeholders"]["image"][0]["length"]
    assert [(p.offset, p.length) for p in one.mm_placeholders.image] == [
        (r["features"]["mm_placeholders"]["image"][0]["offset"], image_len)]
    turn2 = [*one.prompt_token_ids, *one.choices[0].token_ids, 2, 198, 1, 4093, 198, 520, 2,
             198, 1, 520, 198]
    two = vlm_stub.CreateChatCompletion(chat(turn2, content_parts=part), timeout=120)
    assert list(two.prompt_token_ids) == turn2
    assert two.usage.prompt_tokens_details.cached_tokens > image_len


def test_a_text_only_model_refuses_media(real_stub, vllm_render) -> None:
    r = vllm_render
    meta = _refused(real_stub, {"token_ids": [1, 2, 3], "content_parts": [
        {"type": "image_url", "url": r["url"]}]})
    assert meta["tokenwire-reason"] == "UNSUPPORTED_MODALITY"
    assert meta["tokenwire-param"] == "content_parts"
    meta = _refused(real_stub, {"token_ids": r["expanded"][:40], "features": {
        **r["features"], "mm_placeholders": {"image": [{"offset": 3, "length": 33}]}}})
    assert meta["tokenwire-param"] == "features"
