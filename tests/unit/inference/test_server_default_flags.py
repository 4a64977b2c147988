"""vLLM's server-wide defaults of per-request options, on the fake engine:
--return-tokens-as-token-ids (a request's own value wins when set) and
--enable-force-include-usage (every stream carries usage, on each chunk and
a final usage chunk, as vLLM's should_include_usage)."""

from __future__ import annotations

import json

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request
from tests.servers import fake_serving
from tokenwire.server.runtime.cli import parse_settings
from tokenwire.v1 import (
    anthropic_pb2,
    completion_pb2,
    events_pb2_grpc,
    service_pb2_grpc,
)


@pytest.fixture(scope="module")
def stubs():
    with fake_serving(served_model_name="fake-model", return_tokens_as_token_ids=True,
                      enable_force_include_usage=True) as server:
        with grpc.insecure_channel(server.address) as ch:
            yield service_pb2_grpc.TokenwireServiceStub(ch), \
                events_pb2_grpc.EventStreamServiceStub(ch)


def test_flags_parse_as_vllm_spells_them() -> None:
    s = parse_settings(["--engine", "fake", "--return-tokens-as-token-ids",
                        "--enable-force-include-usage"])
    assert s.return_tokens_as_token_ids and s.enable_force_include_usage
    s = parse_settings(["--engine", "fake"])
    assert not s.return_tokens_as_token_ids and not s.enable_force_include_usage


def test_chat_logprob_tokens_default_to_token_ids(stubs) -> None:
    resp = stubs[0].CreateChatCompletion(
        chat_request(logprobs=True, top_logprobs=2, return_token_ids=True), timeout=10)
    choice = resp.choices[0]
    tokens = [c.token for c in choice.logprobs.content]
    assert tokens == [f"token_id:{t}" for t in choice.token_ids]
    assert all(c.bytes == list(c.token.encode()) for c in choice.logprobs.content)


def test_request_false_wins_over_the_server_default(stubs) -> None:
    resp = stubs[0].CreateChatCompletion(
        chat_request(logprobs=True, return_tokens_as_token_ids=False), timeout=10)
    tokens = [c.token for c in resp.choices[0].logprobs.content]
    assert tokens and not any(t.startswith("token_id:") for t in tokens)
    assert "".join(tokens).startswith(resp.choices[0].message.content)


def test_completions_logprob_tokens_default_to_token_ids(stubs) -> None:
    req = json_format.ParseDict({"prompt": "Hi", "max_tokens": 4, "logprobs": 1,
                                 "return_token_ids": True},
                                completion_pb2.CreateCompletionRequest())
    resp = stubs[0].CreateCompletion(req, timeout=10)
    assert list(resp.choices[0].logprobs.tokens) == [
        f"token_id:{t}" for t in resp.choices[0].token_ids]


def test_chat_stream_without_stream_options_carries_usage(stubs) -> None:
    chunks = list(stubs[0].StreamChatCompletion(chat_request(), timeout=10))
    last = chunks[-1]
    assert not last.choices and last.HasField("usage")
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert last.usage.completion_tokens > 0
    # vLLM's forced usage is continuous too: each content chunk (after the
    # role chunk) carries it, as with stream_options.continuous_usage_stats.
    assert all(c.HasField("usage") for c in chunks[1:])
    unary = stubs[0].CreateChatCompletion(chat_request(), timeout=10)
    assert last.usage == unary.usage


def test_completions_stream_without_stream_options_carries_usage(stubs) -> None:
    req = json_format.ParseDict({"prompt": "Hi", "max_tokens": 4},
                                completion_pb2.CreateCompletionRequest())
    chunks = list(stubs[0].StreamCompletion(req, timeout=10))
    assert not chunks[-1].choices and chunks[-1].usage.completion_tokens == 4


def test_messages_stream_still_ends_once(stubs) -> None:
    req = json_format.ParseDict({"max_tokens": 50, "stream": True,
                                 "messages": [{"role": "user", "content": "Hi"}]},
                                anthropic_pb2.CreateMessageRequest())
    data = b"".join(b.data for b in stubs[1].StreamMessageEvents(req, timeout=10)).decode()
    kinds = [json.loads(f.split("data: ", 1)[1])["type"] for f in data.split("\n\n") if f]
    assert kinds.count("message_stop") == 1 and kinds[-1] == "message_stop"
    text = [k for k in kinds if k == "content_block_delta"]
    assert len(text) > 1, "the text streams in several deltas (continuous usage ends nothing)"
