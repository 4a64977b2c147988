"""The REST surface through Envoy (fake engine): shapes, names, zero values,
nvext, the same body deciding unary vs stream, and every endpoint."""

from __future__ import annotations

import json

import pytest
from google.protobuf import json_format

from tests.gateway.sse import camel_case_keys, chat_body, sse_json
from tokenwire.server.inference.shared import openai_wire as sse
from tokenwire.v1 import chat_pb2, generate_pb2


def test_chat_unary_has_the_openai_shape(rest) -> None:
    r = rest.post("/v1/chat/completions", json=chat_body(max_tokens=5))
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "application/json"
    assert not [h for h in r.headers if h.startswith("grpc-")]
    body = r.json()
    assert body["object"] == "chat.completion"
    assert body["id"].startswith("chatcmpl-")
    assert isinstance(body["created"], int)  # a number, not an int64 string
    assert body["model"] == "fake-model"
    choice = body["choices"][0]
    assert choice["index"] == 0  # printed although zero
    assert choice["message"]["role"] == "assistant"
    assert choice["message"]["content"] == "Hello"
    assert choice["finish_reason"] == "length"
    usage = body["usage"]
    assert usage["completion_tokens"] == 5
    assert usage["total_tokens"] == usage["prompt_tokens"] + 5
    assert "cached_tokens" in usage["prompt_tokens_details"]


def test_tito_fields_use_vllm_and_openai_names(rest) -> None:
    body = chat_body(
        max_tokens=4,
        logprobs=True,
        top_logprobs=2,
        return_token_ids=True,
        nvext={
            "extra_fields": ["engine_data", "completion_token_ids", "prompt_token_ids", "timing"]
        },
    )
    out = rest.post("/v1/chat/completions", json=body).json()
    assert not camel_case_keys(out), "field names are printed as OpenAI/vLLM spell them"
    choice = out["choices"][0]
    assert len(choice["token_ids"]) == 4
    assert out["prompt_token_ids"]
    assert [e["token_id"] for e in choice["logprobs"]["content"]] == choice["token_ids"]
    assert len(choice["logprobs"]["content"][0]["top_logprobs"]) == 2
    nv = out["nvext"]
    assert nv["completion_token_ids"] == choice["token_ids"]
    assert nv["engine_data"]["completion_token_ids"] == choice["token_ids"]
    assert nv["engine_data"]["prompt_token_ids"] == out["prompt_token_ids"]
    assert len(nv["engine_data"]["completion_logprobs"]) == 4
    assert nv["engine_data"]["finished"] is True
    assert nv["prompt_token_ids"] == out["prompt_token_ids"]
    assert nv["timing"]["total_ms"] >= 0


def test_nvext_token_data_is_the_prompt(rest) -> None:
    ids = [1, 75, 104, 111, 111, 114, 2]
    body = chat_body(
        content="", max_tokens=2, return_token_ids=True,
        nvext={"token_data": ids, "extra_fields": ["engine_data"]},
    )
    out = rest.post("/v1/chat/completions", json=body).json()
    assert out["prompt_token_ids"] == ids
    assert out["nvext"]["engine_data"]["prompt_token_ids"] == ids


def test_unknown_nvext_extra_field_is_rejected(rest) -> None:
    r = rest.post("/v1/chat/completions", json=chat_body(nvext={"extra_fields": ["bogus"]}))
    assert r.status_code == 400
    assert r.json()["error"]["type"] == "invalid_request_error"


def test_the_same_body_decides_unary_or_stream(rest) -> None:
    body = chat_body(max_tokens=3, seed=5, return_token_ids=True)
    unary = rest.post("/v1/chat/completions", json={**body, "stream": False})
    assert unary.headers["content-type"] == "application/json"
    streamed = rest.post("/v1/chat/completions", json={**body, "stream": True})
    assert streamed.headers["content-type"] == "text/event-stream"
    chunks = sse_json(streamed.content)
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    ids = [i for c in chunks if c["choices"] for i in c["choices"][0].get("token_ids", [])]
    assert text == unary.json()["choices"][0]["message"]["content"]
    assert ids == unary.json()["choices"][0]["token_ids"]


def test_stream_flag_inside_nested_objects_or_text_does_not_count(rest) -> None:
    body = chat_body('say "stream": true', max_tokens=2, chat_template_kwargs={"stream": True},
                     stream=False)
    r = rest.post("/v1/chat/completions", json=body)
    assert r.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    "content_type",
    ["application/json", "application/json; charset=utf-8", "Application/JSON", "text/plain", None],
)
def test_stream_flag_is_read_whatever_the_content_type(rest, content_type) -> None:
    raw = json.dumps(chat_body(max_tokens=2, chat_template_kwargs={"stream": False})).encode()
    raw = raw[:-1] + b',  "stream" :\ttrue }'
    headers = {"content-type": content_type} if content_type else {}
    r = rest.post("/v1/chat/completions", content=raw, headers=headers)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"] == "text/event-stream"
    assert len(sse_json(r.content)) == 3


def test_rest_json_is_the_grpc_message_printed_by_envoy(rest, flaky_stub) -> None:
    body = chat_body(max_tokens=4, seed=1, logprobs=True, return_token_ids=True)
    r = rest.post("/v1/chat/completions", json=body).json()
    req = json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())
    g = json_format.MessageToDict(
        flaky_stub.CreateChatCompletion(req, timeout=10), preserving_proto_field_name=True
    )
    for volatile in ("id", "created", "usage"):
        r.pop(volatile), g.pop(volatile)
    # The server prints the JSON (":json" binding): the transcoder's, except
    # that every logprob entry has `top_logprobs` (issue #28: OpenAI's schema
    # requires it; proto JSON omits it empty) and the keys vLLM prints null
    # (issue #34: api/sse.py).
    for choice in g["choices"]:
        for entry in choice["logprobs"]["content"]:
            assert "top_logprobs" not in entry
            entry["top_logprobs"] = []
    assert r == sse.with_choice_keys(_with_message_keys(g), UNARY_KEYS)
    body.pop("logprobs")  # without logprobs: `"logprobs": null`
    r = rest.post("/v1/chat/completions", json=body).json()
    g = json_format.MessageToDict(
        flaky_stub.CreateChatCompletion(
            json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest()), timeout=10
        ),
        preserving_proto_field_name=True,
    )
    for volatile in ("id", "created", "usage"):
        r.pop(volatile), g.pop(volatile)
    assert r == sse.with_choice_keys(_with_message_keys(g), UNARY_KEYS)
    assert r["choices"][0]["logprobs"] is None


UNARY_KEYS = sse.UNARY_CHOICE_KEYS["tokenwire.v1.CreateChatCompletionResponse"]


def _with_message_keys(body: dict) -> dict:
    for choice in body["choices"]:
        for key, value in sse.MESSAGE_KEYS.items():
            choice["message"].setdefault(key, value)
    for key in sse.UNARY_TOP_KEYS["tokenwire.v1.CreateChatCompletionResponse"]:
        if key != "usage":  # popped as volatile
            body.setdefault(key, None)
    return body


def test_outside_callers_cannot_name_a_tenant(rest, flaky_engine) -> None:
    # The gateway strips x-tenant-id (the tenant comes from the credential),
    # so even a server trusting the header never sees a caller's.
    r = rest.post(
        "/v1/chat/completions", json=chat_body(max_tokens=1, cache_salt="root"),
        headers={"x-tenant-id": "tenant-a"},
    )
    assert r.status_code == 200
    assert flaky_engine.requests[-1].cache_salt == "root"


def test_generate_unary_and_stream(rest) -> None:
    body = {"model": "fake-model", "token_ids": [1, 75, 104], "return_token_ids": True,
            "sampling_params": {"max_tokens": 3, "logprobs": 1}}
    unary = rest.post("/inference/v1/generate", json=body)
    assert unary.status_code == 200, unary.text
    out = unary.json()
    assert out["prompt_token_ids"] == [1, 75, 104]
    assert out["choices"][0]["index"] == 0
    assert len(out["choices"][0]["token_ids"]) == 3
    json_format.ParseDict(out, generate_pb2.GenerateResponse())  # the typed message
    streamed = rest.post("/inference/v1/generate", json={**body, "stream": True})
    assert streamed.headers["content-type"] == "text/event-stream"
    chunks = sse_json(streamed.content)
    ids = [i for c in chunks for ch in c["choices"] for i in ch.get("token_ids", [])]
    assert ids == out["choices"][0]["token_ids"]


def test_tokenize_and_detokenize(rest) -> None:
    tok = rest.post("/tokenize", json={"model": "fake-model", "prompt": "Hi"})
    assert tok.status_code == 200, tok.text
    out = tok.json()
    assert out["tokens"] == [1, 75, 108] and out["count"] == 3 and out["max_model_len"] == 512
    chat = rest.post("/tokenize", json={"messages": [{"role": "user", "content": "Hi"}]}).json()
    assert chat["count"] == len(chat["tokens"]) > 3
    detok = rest.post("/detokenize", json={"tokens": [75, 108]})
    assert detok.json() == {"prompt": "Hi"}


def test_models_and_health(rest) -> None:
    models = rest.get("/v1/models").json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "fake-model"
    assert models["data"][0]["object"] == "model"
    assert isinstance(models["data"][0]["created"], int)
    health = rest.get("/health")
    assert health.status_code == 200 and health.json() == {"status": "SERVING"}


def test_stats_show_engine_requests_as_a_number(rest) -> None:
    stats = rest.get("/tokenwire/v1/stats").json()
    assert stats["engine_requests"] == 0
    assert json.dumps(stats)


def test_chat_render_through_rest(rest) -> None:
    """vLLM's POST /v1/chat/completions/render: a generate body, which
    /inference/v1/generate then runs as the chat call would."""
    body = chat_body(max_tokens=3, temperature=0)
    rendered = rest.post("/v1/chat/completions/render", json=body)
    assert rendered.status_code == 200, rendered.text
    gen_body = rendered.json()
    assert gen_body["token_ids"] and gen_body["sampling_params"]["max_tokens"] == 3
    gen = rest.post("/inference/v1/generate", json=gen_body)
    chat = rest.post("/v1/chat/completions", json={**body, "return_token_ids": True})
    assert gen.json()["choices"][0]["token_ids"] == chat.json()["choices"][0]["token_ids"]
