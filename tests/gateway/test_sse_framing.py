"""Server-Sent Events through Envoy, checked byte for byte (fake engine):
`data: ` prefix, blank-line separators, the final [DONE], chunks arriving as
they are generated, and an error event when a started stream fails."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import httpx
import openai
import pytest

from tests.gateway.sse import DONE, chat_body, sse_events, sse_json
from tests.gateway.transports import gateway_on
from tokenwire.server.inference.shared import openai_wire as sse

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture(scope="module")
def gateway(gateway, transport):
    with gateway_on(transport, gateway) as envoy:
        yield envoy


@pytest.fixture(scope="module")
def rest(gateway):
    with httpx.Client(base_url=gateway.url, timeout=60) as client:
        yield client


def test_sse_bytes_are_exact(rest) -> None:
    with rest.stream(
        "POST", "/v1/chat/completions", json=chat_body(max_tokens=4, stream=True)
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream"
        assert "content-length" not in r.headers
        raw = b"".join(r.iter_raw())
    assert raw.startswith(b"data: {")
    assert raw.endswith(b"}\n\n" + DONE)
    assert raw.count(DONE) == 1
    events = sse_events(raw)
    assert len(events) == 1 + 4 + 1  # role chunk, 4 tokens, [DONE]
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[0]["choices"][0]["index"] == 0
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert len({c["id"] for c in chunks}) == 1


def test_sse_bytes_with_curl(gateway) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    body = json.dumps(chat_body(max_tokens=3, stream=True))
    raw = subprocess.run(
        [curl, "-sSN", f"{gateway.url}/v1/chat/completions", "-H", "Content-Type: application/json",
         "-d", body],
        check=True, capture_output=True, timeout=30,
    ).stdout
    events = sse_events(raw)
    assert events[-1] == b"[DONE]"
    assert [json.loads(e)["object"] for e in events[:-1]] == ["chat.completion.chunk"] * 4


def test_chunks_arrive_as_they_are_generated(rest) -> None:
    arrivals = []
    start = time.monotonic()
    body = chat_body("SLOW", max_tokens=10, stream=True)
    with rest.stream("POST", "/v1/chat/completions", json=body) as r:
        for _ in r.iter_raw():
            arrivals.append(time.monotonic() - start)
    total = arrivals[-1]
    assert total >= 10 * 0.1
    # The first token is in the client's hands long before the last one.
    assert arrivals[0] < 0.5 * total, arrivals
    assert len(arrivals) >= 8, "one network chunk per generated token, not one buffered blob"


def test_usage_chunk_has_empty_choices(rest) -> None:
    body = chat_body(max_tokens=2, stream=True, stream_options={"include_usage": True})
    chunks = sse_json(rest.post("/v1/chat/completions", json=body).content)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 2
    assert all(c["choices"] for c in chunks[:-1])


@pytest.mark.parametrize(
    "text",
    ['a "quoted" ]} word', "back\\slash {[", "two\n\nlines", "data: [DONE]"],
)
def test_json_tricky_text_survives_reframing(rest, text) -> None:
    body = chat_body(f"ECHO<<{text}>>", stream=True, n=2, temperature=1.0, return_token_ids=True,
                     logprobs=True, top_logprobs=2, nvext={"extra_fields": ["engine_data"]})
    chunks = sse_json(rest.post("/v1/chat/completions", json=body).content)
    for index in (0, 1):
        got = "".join(
            ch["delta"].get("content", "")
            for c in chunks for ch in c["choices"] if ch["index"] == index
        )
        assert got == text


def test_generate_stream_framing(rest) -> None:
    body = {"token_ids": [1, 75], "sampling_params": {"max_tokens": 3}, "stream": True}
    raw = rest.post("/inference/v1/generate", json=body).content
    chunks = sse_json(raw)
    assert sum(len(ch.get("token_ids", [])) for c in chunks for ch in c["choices"]) == 3


def test_failure_after_the_stream_started_ends_with_an_error_event(rest) -> None:
    body = chat_body("FAIL_MIDSTREAM", max_tokens=20, stream=True)
    r = rest.post("/v1/chat/completions", json=body)
    assert r.status_code == 200  # the stream had started
    events = sse_events(r.content)
    assert events[-1] == b"[DONE]"
    error = json.loads(events[-2])["error"]
    assert error == {
        "message": "the engine failed mid-stream", "type": "server_error", "param": None,
        "code": "internal",
    }
    assert all("choices" in json.loads(e) for e in events[:-2])


def test_openai_sdk_raises_on_the_error_event(gateway) -> None:
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="unused")
    stream = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "FAIL_MIDSTREAM"}],
        max_tokens=20, stream=True,
    )
    seen = 0
    with pytest.raises(openai.APIError, match="the engine failed mid-stream"):
        for _ in stream:
            seen += 1
    assert seen == 4  # the role chunk and three token chunks


def test_stream_interval_over_rest(rest) -> None:
    body = chat_body(max_tokens=10, ignore_eos=True, stream=True, return_token_ids=True,
                     stream_options={"stream_interval": 4})
    r = rest.post("/v1/chat/completions", json=body)
    assert r.status_code == 200
    sizes = [len(c["choices"][0]["token_ids"]) for c in sse_json(r.content)
             if c["choices"] and c["choices"][0].get("token_ids")]
    assert sizes == [1, 4, 4, 1]
    bad = rest.post("/v1/chat/completions", json={**body, "stream_options": {"stream_interval": 0}})
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "stream_options.stream_interval"


def _without_call_details(chunk: dict) -> dict:
    """A chunk without what differs between two calls of one request (the
    second call finds the prompt cached)."""
    chunk = {k: v for k, v in chunk.items() if k not in ("id", "request_id", "created")}
    if "usage" in chunk:
        chunk["usage"] = {k: v for k, v in chunk["usage"].items() if k != "prompt_tokens_details"}
    if "nvext" in chunk:
        chunk["nvext"] = {k: v for k, v in chunk["nvext"].items() if k != "timing"}
    return chunk


STREAM_MESSAGES = {
    "/v1/chat/completions": "tokenwire.v1.StreamChatCompletionResponse",
    "/v1/completions": "tokenwire.v1.StreamCompletionResponse",
    "/inference/v1/generate": "tokenwire.v1.GenerateResponse",
}


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/chat/completions", chat_body(
        "ECHO<<caf\u00e9 \"q\" \\ ok>>", stream=True, n=2, temperature=1.0, seed=7,
        return_token_ids=True, logprobs=True, top_logprobs=2,
        stream_options={"include_usage": True, "continuous_usage_stats": True},
        nvext={"extra_fields": ["engine_data", "prompt_token_ids", "timing"]},
    )),
    ("/v1/completions", {"model": "fake-model", "prompt": ["one", "two"], "max_tokens": 3,
                         "logprobs": 2, "echo": True, "stream": True, "seed": 3,
                         "stream_options": {"include_usage": True}}),
    ("/inference/v1/generate", {"token_ids": [1, 75, 80], "stream": True,
                                "sampling_params": {"max_tokens": 4, "logprobs": 1, "seed": 1}}),
])
def test_server_events_hold_the_transcoders_json(rest, path, body) -> None:
    """The events the server renders (EventStreamService) hold the JSON the
    transcoder prints for the typed stream of the same request
    (`<path>:stream` over REST gives the typed chunks as one JSON array),
    plus the choice keys vLLM prints null or empty (api/sse.py)."""
    events = sse_json(rest.post(path, json=body).content)
    typed = rest.post(f"{path}:stream", json={k: v for k, v in body.items() if k != "stream"})
    assert typed.status_code == 200, typed.text
    keys = sse.STREAM_CHOICE_KEYS[STREAM_MESSAGES[path]]
    expected = [sse.with_choice_keys({"choices": [], **c}, keys) for c in typed.json()]
    assert len(events) == len(expected) > 2
    assert [_without_call_details(e) for e in events] == [
        _without_call_details(c) for c in expected
    ]
