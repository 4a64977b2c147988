"""Generate with media (issue #36 item 2) on the fake engine: content_parts
and features (vLLM's JSON object, and the typed gRPC form) in, the expanded
prompt ids and vLLM's mm_placeholders out (unary and the first chunk),
every bad input an INVALID_ARGUMENT naming its field, the cache salt and
tenants keeping image blocks apart, logprobs / stop ids / n > 1 /
streaming / weight spans as without media."""

from __future__ import annotations

import base64
import collections.abc

import grpc
import pytest
from google.protobuf import json_format

from tests.servers import fake_serving
from tokenwire.server.engine.fake import media
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import chat_pb2, generate_pb2, multimodal_pb2, service_pb2_grpc

PNG = b"\x89PNG fake image bytes"
URL = "data:image/png;base64," + base64.b64encode(PNG).decode()
IMG = media.IMAGE
PROMPT = [1, 70, 71, IMG, 72, 73]  # one image token, expanded to 4 ids at index 3
EXPANDED = [1, 70, 71, *media.EXPAND, 72, 73]
TEXT = [1, 70, 71, 72, 73]


@pytest.fixture(scope="module")
def vlm() -> collections.abc.Iterator[tuple[service_pb2_grpc.TokenwireServiceStub, FakeEngine]]:
    engine = FakeEngine(max_model_len=512, block_size=4)
    engine.takes_media = True
    with fake_serving(engine) as server, grpc.insecure_channel(server.address) as channel:
        yield service_pb2_grpc.TokenwireServiceStub(channel), engine


def gen(body: dict) -> generate_pb2.GenerateRequest:
    return json_format.ParseDict({"sampling_params": {"max_tokens": 3}, **body},
                                 generate_pb2.GenerateRequest())


def json_features(prompt: list[int], n: int = media.EMBEDS, **over) -> dict:
    feats = {"mm_hashes": {"image": ["h1"]},
             "mm_placeholders": {"image": [{"offset": 3, "length": 4}]},
             "kwargs_data": {"image": [base64.b64encode(f"fake:{n}".encode()).decode()]}}
    feats.update(over)
    return {"token_ids": prompt, "features": feats, "return_token_ids": True}


def refused(stub, req) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        stub.Generate(req, timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    return info.value


def test_content_parts_expand_the_ids_and_name_the_placeholders(vlm) -> None:
    stub, _ = vlm
    resp = stub.Generate(gen({"token_ids": PROMPT, "return_token_ids": True,
                              "content_parts": [{"type": "image_url", "url": URL}]}), timeout=10)
    assert list(resp.prompt_token_ids) == EXPANDED
    as_json = json_format.MessageToDict(resp, preserving_proto_field_name=True)
    assert as_json["mm_placeholders"] == {"image": [{"offset": 3, "length": 4}]}  # vLLM's shape
    assert resp.usage.prompt_tokens == len(EXPANDED)
    chunks = list(stub.StreamGenerate(gen({
        "token_ids": PROMPT, "return_token_ids": True,
        "content_parts": [{"type": "image_url", "url": URL}]}), timeout=10))
    assert list(chunks[0].prompt_token_ids) == EXPANDED
    assert [(p.offset, p.length) for p in chunks[0].mm_placeholders.image] == [(3, 4)]
    assert not any(c.HasField("mm_placeholders") for c in chunks[1:])
    ids = [t for c in chunks for ch in c.choices for t in ch.token_ids]
    assert ids == list(resp.choices[0].token_ids)


def test_grpc_bytes_are_the_same_image(vlm) -> None:
    stub, _ = vlm
    req = gen({"token_ids": PROMPT, "return_token_ids": True})
    req.content_parts.add(type="image_url").image.CopyFrom(
        multimodal_pb2.ImageInput(data=PNG, mime_type="image/png"))
    assert list(stub.Generate(req, timeout=10).prompt_token_ids) == EXPANDED


def test_features_json_and_typed(vlm) -> None:
    stub, engine = vlm
    prompt = [1, 70, 71, media.IMAGE_START, IMG, IMG, media.IMAGE_END, 72]
    resp = stub.Generate(gen(json_features(prompt)), timeout=10)
    assert list(resp.prompt_token_ids) == prompt  # features: the ids are already expanded
    assert [(p.offset, p.length) for p in resp.mm_placeholders.image] == [(3, 4)]
    assert engine.requests[-1].multimodal is not None
    typed = gen({"token_ids": prompt, "return_token_ids": True})
    item = typed.mm_features.items.add(modality="image", hash="h1", kwargs_data=b"fake:2")
    item.placeholder.offset, item.placeholder.length = 3, 4
    assert list(stub.Generate(typed, timeout=10).prompt_token_ids) == prompt
    # vLLM's /render adds mm_metadata (fields kwargs_data holds whole): accepted, unused.
    with_meta = json_features(prompt, mm_metadata={"image": ["eA=="]})
    assert list(stub.Generate(gen(with_meta), timeout=10).prompt_token_ids) == prompt


@pytest.mark.parametrize(("body", "param"), [
    ({"content_parts": [{"type": "image_url", "url": "https://evil.example/x.png"}]},
     "content_parts[0].url"),
    ({"content_parts": [{"type": "image_url", "url": "file:///etc/passwd"}]},
     "content_parts[0].url"),
    ({"content_parts": [{"type": "image_url", "url": "data:text/plain;base64,aGk="}]},
     "content_parts[0].url"),
    ({"content_parts": [{"type": "audio_url", "url": URL}]}, "content_parts[0].type"),
    ({"content_parts": [{"type": "image_url", "url": URL}] * 3}, "content_parts"),
    ({"content_parts": [{"type": "image_url", "url": "data:image/png;base64,@@@"}]},
     "content_parts"),
])
def test_bad_content_parts(vlm, body, param) -> None:
    err = refused(vlm[0], gen({"token_ids": PROMPT, **body}))
    assert dict(err.trailing_metadata()).get("tokenwire-param") == param


P = [1, 70, 71, media.IMAGE_START, IMG, IMG, media.IMAGE_END, 72]


@pytest.mark.parametrize(("over", "param"), [
    ({"mm_placeholders": {"image": [{"offset": 6, "length": 4}]}},
     "features.mm_placeholders.image[0]"),  # outside the ids
    ({"mm_placeholders": {"image": [{"offset": 2, "length": 4}]}},
     "features.mm_placeholders.image[0]"),  # not the placeholder tokens
    ({"mm_hashes": {"image": ["h1", "h2"]}}, "features.mm_placeholders.image"),  # counts
    ({"mm_hashes": {"image": ["a", "b"]},
      "mm_placeholders": {"image": [{"offset": 3, "length": 4}, {"offset": 5, "length": 2}]},
      "kwargs_data": {"image": [base64.b64encode(b"fake:2").decode()] * 2}},
     "features.mm_placeholders"),  # overlap
    ({"kwargs_data": {"image": ["@@not base64@@"]}}, "features.kwargs_data.image[0]"),
    ({"kwargs_data": {"image": [base64.b64encode(b"garbage").decode()]}},
     "features.kwargs_data.image[0]"),  # does not decode
    ({"kwargs_data": {"image": [None]}}, "features.kwargs_data.image[0]"),  # cache-only item
    ({"kwargs_data": None}, "features.kwargs_data"),
    ({"mm_hashes": {"video": ["h"]}}, "features.mm_placeholders"),  # modalities differ
])
def test_bad_features(vlm, over, param) -> None:
    err = refused(vlm[0], gen(json_features(P, **over)))
    assert dict(err.trailing_metadata()).get("tokenwire-param") == param


def test_too_many_feature_items(vlm) -> None:
    prompt = [1] + [media.IMAGE_START, IMG, IMG, media.IMAGE_END] * 3
    over = {"mm_hashes": {"image": ["a", "b", "c"]},
            "mm_placeholders": {"image": [{"offset": 1 + 4 * k, "length": 4} for k in range(3)]},
            "kwargs_data": {"image": [base64.b64encode(b"fake:2").decode()] * 3}}
    err = refused(vlm[0], gen(json_features(prompt, **over)))
    assert dict(err.trailing_metadata()).get("tokenwire-reason") == "TOO_MANY_ITEMS"


def test_both_forms_conflict(vlm) -> None:
    body = json_features(P)
    body["content_parts"] = [{"type": "image_url", "url": URL}]
    err = refused(vlm[0], gen(body))
    assert dict(err.trailing_metadata()).get("tokenwire-reason") == "FIELDS_CONFLICT"


def test_text_only_model_refuses_media(fake_stub) -> None:
    err = refused(fake_stub, gen({"token_ids": PROMPT,
                                  "content_parts": [{"type": "image_url", "url": URL}]}))
    meta = dict(err.trailing_metadata())
    assert meta.get("tokenwire-param") == "content_parts"
    assert meta.get("tokenwire-reason") == "UNSUPPORTED_MODALITY"
    err = refused(fake_stub, gen(json_features(P)))
    assert dict(err.trailing_metadata()).get("tokenwire-param") == "features"


def test_server_keeps_serving_after_bad_media(vlm) -> None:
    stub, _ = vlm
    refused(stub, gen(json_features(P, kwargs_data={"image": ["AAAA"]})))
    assert stub.Generate(gen({"token_ids": TEXT}), timeout=10).choices[0].token_ids


def _cached(stub, body: dict, salt: str = "") -> int:
    return stub.Generate(gen({**body, "cache_salt": salt} if salt else body),
                         timeout=10).usage.prompt_tokens_details.cached_tokens


def test_image_blocks_keyed_by_image_and_salt(vlm) -> None:
    stub, _ = vlm
    long = [1] + [70 + k % 20 for k in range(20)] + [IMG] + [80, 81, 82, 83]
    other = "data:image/png;base64," + base64.b64encode(b"another image").decode()
    body = {"token_ids": long, "content_parts": [{"type": "image_url", "url": URL}]}
    assert _cached(stub, body, "s1") == 0
    same = _cached(stub, body, "s1")
    assert same > 21  # same salt, same image: blocks shared, the image's too
    assert _cached(stub, body, "s2") == 0  # another salt never shares them
    # Another image in the same ids: only whole blocks before the image (at
    # 21) are shared, as vLLM keys a block by the items starting before its end.
    assert _cached(stub, {**body, "content_parts": [{"type": "image_url", "url": other}]},
                   "s1") <= 21 < same


def test_logprobs_stop_ids_n_and_spans_with_an_image(vlm) -> None:
    stub, _ = vlm
    req = gen({"token_ids": PROMPT, "return_token_ids": True,
               "content_parts": [{"type": "image_url", "url": URL}],
               "sampling_params": {"max_tokens": 5, "n": 2, "temperature": 1.0, "logprobs": 1,
                                   "stop_token_ids": [111]}})
    resp = stub.Generate(req, timeout=10)
    assert len(resp.choices) == 2
    for ch in resp.choices:
        assert len(ch.logprobs.content) == len(ch.token_ids)
        assert ch.weight_versions and ch.weight_versions[0].end == len(ch.token_ids)
    stop = gen({"token_ids": PROMPT, "content_parts": [{"type": "image_url", "url": URL}],
                "sampling_params": {"max_tokens": 8, "stop_token_ids": [ord("l") + 3]}})
    ch = stub.Generate(stop, timeout=10).choices[0]
    assert ch.finish_reason == "stop" and ch.stop_reason.number_value == ord("l") + 3


def test_turn_two_as_expanded_ids_with_its_image_hits_the_cache(vlm) -> None:
    stub, _ = vlm
    part = [{"type": "image_url", "url": URL}]
    one = stub.Generate(gen({"token_ids": [1] + [70 + k for k in range(12)] + [IMG],
                             "content_parts": part, "return_token_ids": True,
                             "cache_salt": "t2"}), timeout=10)
    turn2 = [*one.prompt_token_ids, *one.choices[0].token_ids, 80, 81]
    two = stub.Generate(gen({"token_ids": turn2, "content_parts": part,
                             "return_token_ids": True, "cache_salt": "t2"}), timeout=10)
    assert list(two.prompt_token_ids) == turn2  # placed, not expanded again
    assert [(p.offset, p.length) for p in two.mm_placeholders.image] == [(13, 4)]
    assert two.usage.prompt_tokens_details.cached_tokens >= 16
    err = refused(stub, gen({"token_ids": [1, IMG, IMG, 70], "content_parts": part}))
    assert dict(err.trailing_metadata()).get("tokenwire-reason") == "PLACEHOLDER_MISMATCH"


def chat(body: dict) -> chat_pb2.CreateChatCompletionRequest:
    base = {"messages": [{"role": "user", "content": "(ids)"}], "max_tokens": 4,
            "return_token_ids": True}
    return json_format.ParseDict({**base, **body}, chat_pb2.CreateChatCompletionRequest())


def test_chat_token_data_takes_the_same_media(vlm) -> None:
    """nvext.token_data with nvext.content_parts / features: turn 1 from
    unexpanded ids and its image, turn 2 as turn 1's expanded ids +
    completion + the new turn with the same image, hitting the cache."""
    stub, _ = vlm
    part = [{"type": "image_url", "url": URL}]
    ids = [1] + [70 + k for k in range(12)] + [IMG, 80]
    one = stub.CreateChatCompletion(chat({"nvext": {"token_data": ids, "content_parts": part},
                                          "cache_salt": "chat-a"}), timeout=10)
    assert list(one.prompt_token_ids)[13:17] == media.EXPAND
    assert [(p.offset, p.length) for p in one.mm_placeholders.image] == [(13, 4)]
    turn2 = [*one.prompt_token_ids, *one.choices[0].token_ids, 81, 82]
    two = stub.CreateChatCompletion(chat({"nvext": {"token_data": turn2, "content_parts": part},
                                          "cache_salt": "chat-a"}), timeout=10)
    assert list(two.prompt_token_ids) == turn2
    assert two.usage.prompt_tokens_details.cached_tokens >= 16
    other = stub.CreateChatCompletion(chat({"nvext": {"token_data": turn2, "content_parts": part},
                                            "cache_salt": "chat-b"}), timeout=10)
    assert other.usage.prompt_tokens_details.cached_tokens == 0
    feats = json_features(P)
    resp = stub.CreateChatCompletion(chat({"nvext": {"token_data": P,
                                                     "features": feats["features"]}}), timeout=10)
    assert [(p.offset, p.length) for p in resp.mm_placeholders.image] == [(3, 4)]
    chunks = list(stub.StreamChatCompletion(chat({
        "nvext": {"token_data": ids, "content_parts": part}, "stream": True}), timeout=10))
    assert [(p.offset, p.length) for c in chunks for p in c.mm_placeholders.image] == [(13, 4)]


@pytest.mark.parametrize(("nvext", "param"), [
    ({"content_parts": [{"type": "image_url", "url": URL}]}, "nvext.content_parts"),
    ({"token_data": P, "features": json_features(P, kwargs_data={"image": ["AAAA"]})[
        "features"]}, "nvext.features.kwargs_data.image[0]"),
    ({"token_data": P, "content_parts": [{"type": "image_url", "url": "http://x.example/i"}]},
     "nvext.content_parts[0].url"),
])
def test_chat_token_media_refused_naming_the_field(vlm, nvext, param) -> None:
    with pytest.raises(grpc.RpcError) as info:
        vlm[0].CreateChatCompletion(chat({"nvext": nvext}), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dict(info.value.trailing_metadata()).get("tokenwire-param") == param


KEYS = """
[[keys]]
key = "sk-alpha-one"
tenant = "alpha"

[[keys]]
key = "sk-alpha-two"
tenant = "alpha"

[[keys]]
key = "sk-beta-0001"
tenant = "beta"
"""


def test_tenants_never_share_image_blocks_one_tenant_does(tmp_path) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(KEYS)
    engine = FakeEngine(max_model_len=512, block_size=4)
    engine.takes_media = True
    body = {"token_ids": [1] + [70 + k for k in range(12)] + [IMG, 80],
            "content_parts": [{"type": "image_url", "url": URL}]}
    with fake_serving(engine, api_keys_file=str(path)) as server, \
            grpc.insecure_channel(server.address) as channel:
        stub = service_pb2_grpc.TokenwireServiceStub(channel)

        def cached(key: str, salt: str = "") -> int:
            req = gen({**body, "cache_salt": salt} if salt else body)
            resp = stub.Generate(req, metadata=(("authorization", f"Bearer {key}"),),
                                 timeout=10)
            return resp.usage.prompt_tokens_details.cached_tokens

        assert cached("sk-alpha-one") == 0
        assert cached("sk-alpha-two") >= 16  # the same tenant: its image blocks hit
        assert cached("sk-beta-0001") == 0  # another tenant never shares them ...
        assert cached("sk-beta-0001", "x") == 0  # ... whatever salt it names
        features = json_features(P)
        for key, hit in (("sk-alpha-one", False), ("sk-alpha-two", True),
                         ("sk-beta-0001", False)):
            resp = stub.Generate(gen(features), timeout=10,
                                 metadata=(("authorization", f"Bearer {key}"),))
            assert (resp.usage.prompt_tokens_details.cached_tokens > 0) == hit


def test_image_bytes_over_the_bound(vlm, monkeypatch) -> None:
    from tokenwire.server.core import multimodal

    monkeypatch.setattr(multimodal, "MAX_MEDIA_BYTES", 16)
    big = "data:image/png;base64," + base64.b64encode(b"x" * 32).decode()
    err = refused(vlm[0], gen({"token_ids": PROMPT,
                               "content_parts": [{"type": "image_url", "url": big}]}))
    meta = dict(err.trailing_metadata())
    assert meta.get("tokenwire-reason") == "MEDIA_TOO_LARGE"
    assert meta.get("tokenwire-param") == "content_parts[0]"


def test_an_image_opening_the_prompt_prints_offset_zero(vlm) -> None:
    import json

    from tokenwire.server.inference.shared.openai_wire import response_json

    resp = vlm[0].Generate(gen({"token_ids": [IMG, 70], "return_token_ids": True,
                                "content_parts": [{"type": "image_url", "url": URL}]}),
                           timeout=10)
    body = json.loads(response_json(resp))  # the REST body (the gateway's :json route)
    assert body["mm_placeholders"] == {"image": [{"offset": 0, "length": 4}]}  # as vLLM's


def test_a_session_runs_generate_with_an_image(vlm) -> None:
    """A Session's generate takes the same media; its turn is stored with
    the image, and the next turn (suffix ids) runs the image again."""
    from tests.session_rpc import RawSession, start_generate

    stub, _ = vlm
    s = RawSession(stub)
    s.send(start_generate("m1", token_ids=PROMPT, return_token_ids=True,
                          content_parts=[{"type": "image_url", "url": URL}],
                          sampling_params={"max_tokens": 3}))
    events = s.until_terminal("m1")
    m1 = events[0].generate_result
    assert list(m1.prompt_token_ids) == EXPANDED
    assert [(p.offset, p.length) for p in m1.mm_placeholders.image] == [(3, 4)]
    assert events[-1].done.continuable is True
    s.send(start_generate("m2", return_token_ids=True, sampling_params={"max_tokens": 2},
                          continuation={"previous_request_id": "m1",
                                        "suffix_token_ids": [80, 81]}))
    events = s.until_terminal("m2")
    m2 = events[0].generate_result
    assert list(m2.prompt_token_ids) == [*EXPANDED, *m1.choices[0].token_ids, 80, 81]
    assert [(p.offset, p.length) for p in m2.mm_placeholders.image] == [(3, 4)]
    assert events[-1].done.continuable is True
    # A next message with a new image (rendered with the model's template):
    # both images run, the first where it was, the new one in the suffix.
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (5, 6, 7)).save(buf, "PNG")
    shot = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    s.send(start_generate("m3", return_token_ids=True, sampling_params={"max_tokens": 2},
                          continuation={"previous_request_id": "m2", "messages": [
                              {"role": "user", "content": [
                                  {"type": "text", "text": "Now:"},
                                  {"type": "image_url", "image_url": {"url": shot}}]}]}))
    events = s.until_terminal("m3")
    assert events[-1].WhichOneof("event") == "done", events[-1]
    m3, done3 = events[0].generate_result, events[-1].done
    prompt = list(m3.prompt_token_ids)
    assert prompt == [*m2.prompt_token_ids, *m2.choices[0].token_ids, *done3.suffix_token_ids]
    first, second = [(p.offset, p.length) for p in m3.mm_placeholders.image]
    assert first == (3, 4) and second[0] > len(m2.prompt_token_ids)
    assert prompt[second[0]:second[0] + second[1]] == media.EXPAND and done3.continuable
    s.close()


def test_a_processor_cache_drift_prepares_the_parts_again(vlm) -> None:
    """Generate (and chat's nvext) with content_parts that vLLM fails before
    any output on a processor-cache drift: the parts are prepared again,
    every item's tensors kept, and the request sent once more (unary and
    streamed); client features carry their tensors and are not retried."""
    stub, engine = vlm
    body = {"token_ids": PROMPT, "return_token_ids": True,
            "content_parts": [{"type": "image_url", "url": URL}]}
    ref = stub.Generate(gen(body), timeout=10)
    engine.media_misses = 1
    again = stub.Generate(gen(body), timeout=10)
    assert list(again.prompt_token_ids) == EXPANDED == list(ref.prompt_token_ids)
    assert list(again.choices[0].token_ids) == list(ref.choices[0].token_ids)
    engine.media_misses = 1
    chunks = list(stub.StreamGenerate(gen(body), timeout=10))
    assert [t for c in chunks for ch in c.choices for t in ch.token_ids] == list(
        ref.choices[0].token_ids)
    engine.media_misses = 1
    chat = json_format.ParseDict(
        {"messages": [{"role": "user", "content": ""}], "max_tokens": 3, "return_token_ids": True,
         "nvext": {"token_data": PROMPT, "content_parts": [{"type": "image_url", "url": URL}]}},
        chat_pb2.CreateChatCompletionRequest())
    assert list(stub.CreateChatCompletion(chat, timeout=10).prompt_token_ids) == EXPANDED
    assert engine.media_misses == 0
    engine.media_misses = 1  # client features: the error, no second attempt
    with pytest.raises(grpc.RpcError) as info:
        stub.Generate(json_format.ParseDict({**json_features(EXPANDED),
                                             "sampling_params": {"max_tokens": 2}},
                                            generate_pb2.GenerateRequest()), timeout=10)
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE
    assert engine.media_misses == 0
