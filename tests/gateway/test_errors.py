"""The error matrix through Envoy (fake engine): OpenAI's error shape
{"error": {"message", "type", "param", "code"}} with the right HTTP status,
for errors the server raises and for those Envoy raises itself."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.gateway.conftest import BODY_LIMIT
from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import chat_body
from tests.servers import free_port

POST = "/v1/chat/completions"

# (name, method, path, body or raw bytes, status, type, param, code)
MATRIX = [
    ("server validation", "POST", POST, chat_body(n=0), 400, "invalid_request_error", "n",
     "value_out_of_range"),
    ("reasoning_effort value", "POST", POST, chat_body(reasoning_effort="extreme"), 400,
     "invalid_request_error", "reasoning_effort", "value_not_allowed"),
    ("unknown nvext field", "POST", POST, chat_body(nvext={"extra_fields": ["x"]}), 400,
     "invalid_request_error", "nvext.extra_fields", "unknown_extra_field"),
    ("malformed JSON", "POST", POST, b'{"model": "fake-model", "messages": [', 400,
     "invalid_request_error", None, "invalid_request_body"),
    ("wrong type", "POST", POST, chat_body(max_tokens="many"), 400, "invalid_request_error",
     "max_tokens", "invalid_type"),
    ("wrong nested type", "POST", POST, chat_body(nvext={"token_data": ["a"]}), 400,
     "invalid_request_error", "nvext.token_data[0]", "invalid_type"),
    ("not an object", "POST", POST, b"[1, 2]", 400, "invalid_request_error", None,
     "invalid_request_body"),
    ("unknown model", "POST", POST, chat_body(model="nope"), 404, "invalid_request_error",
     "model", "model_not_found"),
    ("unknown path", "POST", "/v1/nothing", {}, 404, "invalid_request_error", None, "unknown_url"),
    ("wrong method", "GET", POST, None, 404, "invalid_request_error", None, "unknown_url"),
    ("body too large", "POST", POST, chat_body("x" * (BODY_LIMIT + 1)), 413,
     "invalid_request_error", None, "request_too_large"),
    ("overload", "POST", POST, chat_body("OVERLOAD"), 429, "rate_limit_error", None, "queue_full"),
    ("engine down", "POST", POST, chat_body("ENGINE_DOWN"), 503, "server_error", None,
     "engine_dead"),
    ("internal", "POST", POST, chat_body("CRASH"), 500, "server_error", None, "internal"),
    ("generate validation", "POST", "/inference/v1/generate", {"token_ids": []}, 400,
     "invalid_request_error", "token_ids", None),
    ("tokenize validation", "POST", "/tokenize", {}, 400, "invalid_request_error", "prompt", None),
]


def _send(rest, method, path, body, *, stream: bool = False):
    if isinstance(body, bytes):
        return rest.request(
            method, path, content=body, headers={"content-type": "application/json"}
        )
    if isinstance(body, dict) and stream:
        body = {**body, "stream": True}
    return rest.request(method, path, json=body)


def _check(r, status, kind, param, code) -> dict:
    assert r.status_code == status, r.text
    assert r.headers["content-type"] == "application/json"
    body = r.json()
    assert set(body) == {"error"}
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str) and error["message"]
    assert error["type"] == kind
    assert error["param"] == param
    if code is not None:
        assert error["code"] == code
    return error


@pytest.mark.parametrize(("name", "method", "path", "body", "status", "kind", "param", "code"),
                         MATRIX, ids=[m[0] for m in MATRIX])
def test_error_matrix(rest, name, method, path, body, status, kind, param, code) -> None:
    _check(_send(rest, method, path, body), status, kind, param, code)


ENGINE_ERRORS = {"overload", "engine down", "internal"}
ENGINE_CASES = [m for m in MATRIX if m[0] in ENGINE_ERRORS]
REQUEST_ERRORS = [m for m in MATRIX if m[2] == POST and isinstance(m[3], dict)
                  and m[0] not in ENGINE_ERRORS]


@pytest.mark.parametrize(("name", "method", "path", "body", "status", "kind", "param", "code"),
                         REQUEST_ERRORS, ids=[m[0] for m in REQUEST_ERRORS])
def test_invalid_stream_requests_get_http_errors(
    rest, name, method, path, body, status, kind, param, code
) -> None:
    _check(_send(rest, method, path, body, stream=True), status, kind, param, code)


@pytest.mark.parametrize(("name", "method", "path", "body", "status", "kind", "param", "code"),
                         ENGINE_CASES, ids=[m[0] for m in ENGINE_CASES])
def test_engine_refusals_of_a_stream_are_http_errors(
    rest, name, method, path, body, status, kind, param, code
) -> None:
    # The server waits for the engine's first output before the role chunk, so
    # a refusal at start (full, engine dead) is a plain HTTP error that SDKs
    # retry (429/503 with retry-after), not an error event after a 200.
    _check(_send(rest, method, path, body, stream=True), status, kind, param, code)


def test_unicode_and_quotes_in_error_messages(rest) -> None:
    model = 'mod\u00e8le "\u2603" \\ \n'
    error = _check(rest.post(POST, json=chat_body(model=model)), 404, "invalid_request_error",
                   "model", "model_not_found")
    assert model in error["message"]


def test_upstream_down_is_503(flaky_server) -> None:
    envoy = start_gateway(f"127.0.0.1:{free_port()}")  # nothing listens there
    try:
        r = httpx.post(f"{envoy.url}{POST}", json=chat_body(), timeout=30)
        error = _check(r, 503, "server_error", None, "upstream_unavailable")
        assert "upstream" in error["message"]
    finally:
        stop_gateway(envoy)


@pytest.mark.parametrize(
    ("content", "exc"),
    [("OVERLOAD", openai.RateLimitError), ("ENGINE_DOWN", openai.InternalServerError),
     ("CRASH", openai.InternalServerError)],
)
def test_openai_sdk_maps_statuses(gateway, content, exc) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(exc):
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": content}]
        )


def test_openai_sdk_sees_param_and_code(gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused", max_retries=0)
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}], n=0
        )
    assert info.value.param == "n"
    assert info.value.code == "value_out_of_range"
    with pytest.raises(openai.NotFoundError) as missing:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "hi"}])
    assert missing.value.code == "model_not_found"
