"""--sse-keep-alive-interval through the real Envoy: vLLM's `: keep-alive`
comment reaches the REST client byte for byte while the engine has sent
nothing yet, then the chunks and `[DONE]`; the official OpenAI SDK reads
the stream (it skips comments, as vLLM's clients do)."""

from __future__ import annotations

import collections.abc

import httpx
import openai
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import sse_json
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine

COMMENT = b": keep-alive\n\n"
MODEL = "fake-model"


@pytest.fixture(scope="module")
def url() -> collections.abc.Iterator[str]:
    engine = FakeEngine(max_model_len=512, token_delay=0.15)  # first output 0.15 s late
    with fake_serving(engine, served_model_name=MODEL, sse_keep_alive_interval=0.05) as srv:
        envoy = start_gateway(srv.address)
        try:
            yield envoy.url
        finally:
            stop_gateway(envoy)


def test_keep_alive_comments_pass_through_envoy(url) -> None:
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 3, "ignore_eos": True, "stream": True}
    r = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/event-stream")
    raw = r.content
    assert raw.startswith(COMMENT)
    chunks = sse_json(raw.replace(COMMENT, b""))
    assert sum(len(c["choices"][0].get("delta", {}).get("content", "") or "") > 0
               for c in chunks if c["choices"]) >= 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_the_openai_sdk_reads_a_stream_with_keep_alives(url) -> None:
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
    stream = client.completions.create(model=MODEL, prompt="Hello", max_tokens=3,
                                       stream=True, extra_body={"ignore_eos": True})
    chunks = list(stream)
    assert chunks and chunks[-1].choices[0].finish_reason == "length"
