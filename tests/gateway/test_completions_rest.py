"""/v1/completions through Envoy (fake engine): the OpenAI JSON shape, the
same body deciding unary vs SSE, render's list body, strict types, and
errors in the OpenAI shape."""

from __future__ import annotations

from typing import Any

import pytest

from tests.gateway.sse import camel_case_keys, sse_json


def body(**fields: Any) -> dict[str, Any]:
    return {"prompt": "Hello", "max_tokens": 4, "temperature": 0, **fields}


def test_unary_has_the_openai_shape(rest) -> None:
    r = rest.post("/v1/completions", json=body(logprobs=1, echo=True, return_token_ids=True))
    assert r.status_code == 200, r.text
    out = r.json()
    assert not camel_case_keys(out)
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    choice = out["choices"][0]
    assert choice["index"] == 0 and choice["finish_reason"]
    lp = choice["logprobs"]
    assert set(lp) >= {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert lp["text_offset"][0] == 0
    assert len(choice["token_ids"]) == 4 and choice["prompt_token_ids"]


def test_stream_true_is_sse(rest) -> None:
    r = rest.post("/v1/completions", json=body(stream=True, return_token_ids=True,
                                               stream_options={"include_usage": True}))
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
    chunks = sse_json(r.content)
    assert all(c["object"] == "text_completion" for c in chunks)
    ids = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids", [])]
    unary = rest.post("/v1/completions", json=body(return_token_ids=True)).json()
    assert ids == unary["choices"][0]["token_ids"]
    assert chunks[-1]["usage"]["completion_tokens"] == 4


def test_render_body_is_a_list(rest) -> None:
    r = rest.post("/v1/completions/render", json=body(prompt=[[70, 71], [72]]))
    assert r.status_code == 200, r.text
    out = r.json()
    assert isinstance(out, list) and [x["token_ids"] for x in out] == [[70, 71], [72]]
    assert out[0]["sampling_params"]["max_tokens"] == 4


@pytest.mark.parametrize(("fields", "param", "code"), [
    ({"prompt": []}, "prompt", "empty_value"),
    ({"prompt": ["a", [1]]}, "prompt", "invalid_type"),
    ({"suffix": "x"}, "suffix", "unsupported_field"),
    ({"echo": "yes"}, "echo", "invalid_type"),
    ({"stop_token_ids": 5}, "stop_token_ids", "invalid_type"),
])
def test_errors_have_the_openai_shape(rest, fields, param, code) -> None:
    r = rest.post("/v1/completions", json=body(**fields))
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert (err["param"], err["code"], err["type"]) == (param, code, "invalid_request_error")
