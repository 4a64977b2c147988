"""RenderChatCompletion (issue #14 item 3): the Generate request a chat body
would produce — the ids Tokenize renders, the resolved sampling parameters —
and sending it to Generate gives what the chat call gives."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, error_info
from tokenwire.v1 import tokenize_pb2

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def test_render_is_the_tokenized_prompt_plus_sampling(fake_stub, fake_engine) -> None:
    before = len(fake_engine.requests)
    rendered = fake_stub.RenderChatCompletion(chat_request(
        messages=MESSAGES, temperature=0.5, top_p=0.9, max_tokens=7, seed=3, stop=["END", 66],
        logprobs=True, top_logprobs=2, cache_salt="s"), timeout=10)
    assert len(fake_engine.requests) == before, "nothing was generated"
    tok = fake_stub.Tokenize(json_format.ParseDict({"messages": MESSAGES},
                                                  tokenize_pb2.TokenizeRequest()), timeout=10)
    assert list(rendered.token_ids) == list(tok.tokens)
    sp = rendered.sampling_params
    assert (sp.temperature, sp.max_tokens, sp.seed, sp.logprobs) == (pytest.approx(0.5), 7, 3, 2)
    assert sp.top_p == pytest.approx(0.9)
    assert list(sp.stop_token_ids) == [66]
    assert [v.string_value for v in sp.stop.list_value.values] == ["END"]
    assert rendered.cache_salt == "s" and rendered.model == "fake-model"


def test_generating_the_rendered_request_equals_the_chat_call(fake_stub) -> None:
    req = chat_request(messages=MESSAGES, temperature=0, max_tokens=6, return_token_ids=True)
    chat = fake_stub.CreateChatCompletion(req, timeout=10)
    gen = fake_stub.Generate(fake_stub.RenderChatCompletion(req, timeout=10), timeout=10)
    assert list(gen.prompt_token_ids) == list(chat.prompt_token_ids)
    assert list(gen.choices[0].token_ids) == list(chat.choices[0].token_ids)


def test_render_validates_like_chat(fake_stub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        fake_stub.RenderChatCompletion(chat_request(n=0), timeout=10)
    assert error_info(info.value).metadata["param"] == "n"
    with pytest.raises(grpc.RpcError) as info:
        fake_stub.RenderChatCompletion(
            chat_request(response_format={"type": "json_object"}), timeout=10
        )
    assert error_info(info.value).metadata["param"] == "response_format"
