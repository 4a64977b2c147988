"""Every malformed request gets INVALID_ARGUMENT (or NOT_FOUND) naming the
field, before the engine is called; the server keeps serving."""

from __future__ import annotations

import grpc
import pytest

from tests.rpc import chat_request, error_info
from tokenwire.v1 import generate_pb2, models_pb2, tokenize_pb2

USER = [{"role": "user", "content": "hi"}]

# (case id, request fields, expected code, expected ErrorInfo param)
CHAT_CASES = [
    ("unknown-extra-field", {"nvext": {"extra_fields": ["engine_data", "bogus"]}}, "INVALID_ARGUMENT", "nvext.extra_fields"),
    ("token-id-beyond-vocab", {"nvext": {"token_data": [5, 10**6]}}, "INVALID_ARGUMENT", "nvext.token_data"),
    ("stop-id-beyond-vocab", {"stop_token_ids": [10**6]}, "INVALID_ARGUMENT", "stop_token_ids"),
    ("no-messages", {"messages": []}, "INVALID_ARGUMENT", "messages"),
    ("empty-prompt-raw", {"messages": [{"role": "user", "content": ""}], "nvext": {"use_raw_prompt": True}}, "INVALID_ARGUMENT", "messages"),
    ("prompt-plus-max-tokens-too-long", {"max_tokens": 100000}, "INVALID_ARGUMENT", "max_tokens"),
    ("prompt-too-long", {"nvext": {"token_data": [5] * 5000}}, "INVALID_ARGUMENT", "nvext.token_data"),
    ("max-tokens-zero", {"max_tokens": 0}, "INVALID_ARGUMENT", "max_tokens"),
    ("max-tokens-negative", {"max_completion_tokens": -5}, "INVALID_ARGUMENT", "max_completion_tokens"),
    ("n-zero", {"n": 0}, "INVALID_ARGUMENT", "n"),
    ("stream-interval-zero", {"stream_options": {"stream_interval": 0}}, "INVALID_ARGUMENT", "stream_options.stream_interval"),
    ("stream-interval-too-big", {"stream_options": {"stream_interval": 5000}}, "INVALID_ARGUMENT", "stream_options.stream_interval"),
    ("n-too-big", {"n": 1000, "temperature": 1}, "INVALID_ARGUMENT", "n"),
    ("n-greedy", {"n": 2, "temperature": 0}, "INVALID_ARGUMENT", "n"),
    ("temperature-negative", {"temperature": -0.5}, "INVALID_ARGUMENT", "temperature"),
    ("temperature-nan", {"temperature": "NaN"}, "INVALID_ARGUMENT", "temperature"),
    ("top-p-zero", {"top_p": 0}, "INVALID_ARGUMENT", "top_p"),
    ("top-p-above-one", {"top_p": 1.5}, "INVALID_ARGUMENT", "top_p"),
    ("top-k-below-minus-one", {"top_k": -2}, "INVALID_ARGUMENT", "top_k"),
    ("min-p-above-one", {"min_p": 2}, "INVALID_ARGUMENT", "min_p"),
    ("presence-penalty", {"presence_penalty": 3}, "INVALID_ARGUMENT", "presence_penalty"),
    ("repetition-penalty-zero", {"repetition_penalty": 0}, "INVALID_ARGUMENT", "repetition_penalty"),
    ("top-logprobs-beyond-limit", {"logprobs": True, "top_logprobs": 50}, "INVALID_ARGUMENT", "top_logprobs"),
    ("top-logprobs-without-logprobs", {"top_logprobs": 3}, "INVALID_ARGUMENT", "top_logprobs"),
    ("unknown-role", {"messages": [{"role": "wizard", "content": "x"}]}, "INVALID_ARGUMENT", "messages[0].role"),
    ("image-part", {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}, "INVALID_ARGUMENT", "messages[0].content"),
    ("content-number", {"messages": [{"role": "user", "content": 5}]}, "INVALID_ARGUMENT", "messages[0].content"),
    ("stop-too-many", {"stop": [str(i) for i in range(17)]}, "INVALID_ARGUMENT", "stop"),
    ("stop-empty-string", {"stop": [""]}, "INVALID_ARGUMENT", "stop"),
    ("stop-number", {"stop": 5}, "INVALID_ARGUMENT", "stop"),
    ("too-many-stop-ids", {"stop_token_ids": [5] * 257}, "INVALID_ARGUMENT", "stop_token_ids"),
    ("logit-bias-range", {"logit_bias": {"5": 500}}, "INVALID_ARGUMENT", "logit_bias[5]"),
    ("min-tokens-over-max", {"min_tokens": 10, "max_tokens": 5}, "INVALID_ARGUMENT", "min_tokens"),
    ("bad-tool-type", {"tools": [{"type": "code", "function": {"name": "f"}}]}, "INVALID_ARGUMENT", "tools[0]"),
    ("tool-no-name", {"tools": [{"type": "function", "function": {"name": ""}}]}, "INVALID_ARGUMENT", "tools[0]"),
    ("tool-choice-unknown", {"tool_choice": "sometimes"}, "INVALID_ARGUMENT", "tool_choice"),
    ("tool-choice-unknown-function", {"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": {"type": "function", "function": {"name": "g"}}}, "INVALID_ARGUMENT", "tool_choice"),
    ("response-format-type", {"response_format": {"type": "xml"}}, "INVALID_ARGUMENT", "response_format"),
    ("json-schema-missing", {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, "INVALID_ARGUMENT", "response_format"),
    ("continue-and-add-gen", {"continue_final_message": True, "add_generation_prompt": True, "messages": [{"role": "assistant", "content": "x"}]}, "INVALID_ARGUMENT", "continue_final_message"),
    ("continue-not-assistant", {"continue_final_message": True}, "INVALID_ARGUMENT", "continue_final_message"),
    ("cache-salt-too-long", {"cache_salt": "x" * 2000}, "INVALID_ARGUMENT", "cache_salt"),
    ("unknown-model", {"model": "gpt-17"}, "NOT_FOUND", "model"),
]


@pytest.mark.parametrize(("fields", "code", "param"), [c[1:] for c in CHAT_CASES], ids=[c[0] for c in CHAT_CASES])
@pytest.mark.parametrize("rpc", ["CreateChatCompletion", "StreamChatCompletion"])
def test_chat_rejects(fake_stub, fake_engine, rpc, fields, code, param) -> None:
    before = len(fake_engine.requests)
    req = chat_request(**fields)
    with pytest.raises(grpc.RpcError) as exc_info:
        call = getattr(fake_stub, rpc)(req, timeout=10)
        if rpc.startswith("Stream"):
            list(call)
    err = exc_info.value
    assert err.code().name == code, err.details()
    info = error_info(err)
    assert info is not None and info.domain == "tokenwire"
    assert info.metadata["param"] == param
    assert param.split("[")[0].split(".")[0] in err.details()
    assert len(fake_engine.requests) == before, "validation must happen before the engine"
    # The server keeps serving.
    ok = fake_stub.CreateChatCompletion(chat_request(max_tokens=3), timeout=10)
    assert ok.choices[0].finish_reason == "length"


GENERATE_CASES = [
    ("empty", {}, "token_ids"),
    ("beyond-vocab", {"token_ids": [1, 999]}, "token_ids"),
    ("max-tokens-zero", {"token_ids": [5, 6], "sampling_params": {"max_tokens": 0}}, "sampling_params.max_tokens"),
    ("temperature", {"token_ids": [5, 6], "sampling_params": {"temperature": -1}}, "sampling_params.temperature"),
    ("output-mode", {"token_ids": [5, 6], "output_mode": "bytes"}, "output_mode"),
    ("logprobs-limit", {"token_ids": [5, 6], "sampling_params": {"logprobs": 99}}, "sampling_params.logprobs"),
    ("stream-interval", {"token_ids": [5, 6], "stream_options": {"stream_interval": 0}}, "stream_options.stream_interval"),
]


@pytest.mark.parametrize(("fields", "param"), [c[1:] for c in GENERATE_CASES], ids=[c[0] for c in GENERATE_CASES])
def test_generate_rejects(fake_stub, fields, param) -> None:
    from google.protobuf import json_format

    req = json_format.ParseDict(fields, generate_pb2.GenerateRequest())
    with pytest.raises(grpc.RpcError) as exc_info:
        fake_stub.Generate(req, timeout=10)
    assert exc_info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    info = error_info(exc_info.value)
    assert info is not None and info.metadata["param"] == param


def test_tokenize_rejects_both_or_neither(fake_stub) -> None:
    with pytest.raises(grpc.RpcError) as exc_info:
        fake_stub.Tokenize(tokenize_pb2.TokenizeRequest(), timeout=10)
    assert exc_info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_detokenize_rejects_beyond_vocab(fake_stub) -> None:
    with pytest.raises(grpc.RpcError) as exc_info:
        fake_stub.Detokenize(tokenize_pb2.DetokenizeRequest(tokens=[5, 100000]), timeout=10)
    assert exc_info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(exc_info.value).metadata["param"] == "tokens"


def test_health_still_serving(fake_stub) -> None:
    assert fake_stub.GetHealth(models_pb2.GetHealthRequest(), timeout=5).status == "SERVING"
