"""Hostile and malformed bodies through the gateway: every one gets an
OpenAI-shaped 4xx naming the field where there is one, the server stays
healthy, and the engine holds no request afterwards."""

from __future__ import annotations

import json

import pytest

from tests.cases import CHAT_CASES
from tests.gateway.conftest import BODY_LIMIT
from tests.gateway.sse import chat_body


def _error(r, status: int) -> dict:
    assert r.status_code == status, r.text[:300]
    body = r.json()
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert body["error"]["message"]
    return body["error"]


@pytest.mark.parametrize(("fields", "code", "param"), [c[1:] for c in CHAT_CASES],
                         ids=[c[0] for c in CHAT_CASES])
@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_server_validation_through_rest(rest, flaky_engine, fields, code, param, stream) -> None:
    before = len(flaky_engine.requests)
    body = {**chat_body(), **fields}
    if stream:
        body["stream"] = True
    err = _error(rest.post("/v1/chat/completions", json=body), 404 if code == "NOT_FOUND" else 400)
    assert err["param"] == param
    assert len(flaky_engine.requests) == before


REST_ONLY = [
    ("negative token id", chat_body(nvext={"token_data": [5, -1]}), "nvext.token_data"),
    ("token id beyond uint32", chat_body(nvext={"token_data": [2**33]}), "nvext.token_data"),
    ("max_tokens beyond int32", chat_body(max_tokens=2**40), "max_tokens"),
    ("max_tokens as float", chat_body(max_tokens=1.5), "max_tokens"),
    ("temperature as string", chat_body(temperature="hot"), "temperature"),
    ("messages not a list", {"model": "fake-model", "messages": "hi"}, "messages"),
    ("seed beyond int64", chat_body(seed=2**70), "seed"),
]


@pytest.mark.parametrize(
    ("body", "param"), [c[1:] for c in REST_ONLY], ids=[c[0] for c in REST_ONLY]
)
def test_rest_type_errors(rest, body, param) -> None:
    err = _error(rest.post("/v1/chat/completions", json=body), 400)
    assert err["type"] == "invalid_request_error"
    assert param in (err["param"] or "") or param in err["message"]


RAW = [
    (
        "invalid utf-8",
        b'{"model":"fake-model","messages":[{"role":"user","content":"\xff\xfe"}]}',
        400,
    ),
    (
        "deeply nested json",
        b'{"messages":[{"role":"user","content":' + b"[" * 5000 + b"]" * 5000 + b"}]}",
        400,
    ),
    ("truncated json", b'{"messages": [{"role": "user", "content": "hi"', 400),
    ("empty body", b"", 400),
    ("nvext not an object", json.dumps(chat_body(nvext=[1])).encode(), 400),
    ("json null", b"null", 400),
    ("body over the limit", json.dumps(chat_body("x" * (BODY_LIMIT + 10))).encode(), 413),
]


@pytest.mark.parametrize(("raw", "status"), [c[1:] for c in RAW], ids=[c[0] for c in RAW])
def test_raw_hostile_bodies(rest, raw, status) -> None:
    r = rest.post("/v1/chat/completions", content=raw, headers={"content-type": "application/json"})
    _error(r, status)


def test_ten_megabyte_body_is_413(rest) -> None:
    r = rest.post("/v1/chat/completions", content=b'{"messages":"' + b"a" * (10 << 20) + b'"}',
                  headers={"content-type": "application/json"})
    _error(r, 413)


def test_still_healthy_and_nothing_running(rest, flaky_engine) -> None:
    assert rest.get("/health").status_code == 200
    stats = rest.get("/tokenwire/v1/stats").json()
    assert stats.get("engine_requests", 0) == 0
    assert flaky_engine.num_unfinished_requests() == 0
    ok = rest.post("/v1/chat/completions", json=chat_body(max_tokens=3))
    assert ok.status_code == 200 and ok.json()["choices"][0]["finish_reason"] == "length"


@pytest.mark.parametrize(("path", "body", "param"), [
    ("/v1/chat/completions", {"model": "fake-model", "messages": {"role": "user", "content": "hi"}},
     "messages"),
    ("/v1/chat/completions", {"model": "fake-model",
                              "messages": [{"role": "user", "content": "hi"}],
                              "logprobs": "yes"}, "logprobs"),
    ("/v1/chat/completions", {"model": "fake-model",
                              "messages": [{"role": "user", "content": "hi"}],
                              "stream": "yes"}, "stream"),
    ("/inference/v1/generate", {"token_ids": 5}, "token_ids"),
    ("/tokenize", {"messages": {"role": "user", "content": "hi"}}, "messages"),
])
def test_coercible_types_are_refused_like_openai(rest, path, body, param) -> None:
    """The transcoder would take an object as a one-element list and "yes"
    as a bool; OpenAI refuses both, and so does the gateway."""
    r = rest.post(path, json=body)
    assert r.status_code == 400, r.text
    kind = "an array" if param in ("messages", "token_ids") else "a boolean"
    assert r.json() == {"error": {"message": f"{param}: invalid value, expected {kind}",
                                  "type": "invalid_request_error", "param": param,
                                  "code": "invalid_type"}}
