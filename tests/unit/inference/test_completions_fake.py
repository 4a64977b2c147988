"""/v1/completions (issue #14 item 1) on the fake engine: prompt forms,
batches, echo, the legacy logprobs shape, streaming, render, bad input."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import error_info
from tokenwire.v1 import completion_pb2, tokenize_pb2

PROMPT = "The capital of France is"


def body(**fields: Any) -> completion_pb2.CreateCompletionRequest:
    data: dict[str, Any] = {"prompt": PROMPT, "max_tokens": 5, "temperature": 0}
    data.update(fields)
    return json_format.ParseDict(data, completion_pb2.CreateCompletionRequest())


def as_json(msg: Any) -> dict[str, Any]:
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


def ids_of(stub: Any, text: str, special: bool = True) -> list[int]:
    req = tokenize_pb2.TokenizeRequest(prompt=text, add_special_tokens=special)
    return list(stub.Tokenize(req, timeout=10).tokens)


def test_string_prompt(fake_stub) -> None:
    resp = fake_stub.CreateCompletion(body(return_token_ids=True), timeout=10)
    out = as_json(resp)
    assert out["object"] == "text_completion" and out["id"].startswith("cmpl-")
    (choice,) = out["choices"]
    assert choice["index"] == 0 and choice["finish_reason"] == "length"
    assert choice["prompt_token_ids"] == ids_of(fake_stub, PROMPT)
    assert len(choice["token_ids"]) == 5
    assert out["usage"]["completion_tokens"] == 5
    assert out["usage"]["prompt_tokens"] == len(choice["prompt_token_ids"])


def test_default_max_tokens_is_16(fake_stub) -> None:
    req = body(ignore_eos=True)
    req.ClearField("max_tokens")
    resp = fake_stub.CreateCompletion(req, timeout=10)
    assert resp.usage.completion_tokens == 16


def test_id_prompt_is_used_as_sent(fake_stub, fake_engine) -> None:
    ids = ids_of(fake_stub, PROMPT, special=False)
    resp = fake_stub.CreateCompletion(body(prompt=ids, return_token_ids=True), timeout=10)
    assert list(resp.choices[0].prompt_token_ids) == ids
    assert fake_engine.requests[-1].prompt_token_ids == ids


def test_batch_choices_are_indexed_prompt_major(fake_stub) -> None:
    prompts = [[70, 71, 72], [80, 81], [90]]
    resp = fake_stub.CreateCompletion(
        body(prompt=prompts, n=2, temperature=1, seed=1, return_token_ids=True), timeout=10)
    assert [c.index for c in resp.choices] == list(range(6))
    for c in resp.choices:
        assert list(c.prompt_token_ids) == prompts[c.index // 2]
    assert resp.usage.prompt_tokens == 6  # each prompt counted once
    assert resp.usage.completion_tokens == sum(len(c.token_ids) for c in resp.choices)


def test_string_batch(fake_stub) -> None:
    resp = fake_stub.CreateCompletion(
        body(prompt=["a b", "c d e"], return_token_ids=True), timeout=10
    )
    assert [list(c.prompt_token_ids) for c in resp.choices] == [
        ids_of(fake_stub, "a b"), ids_of(fake_stub, "c d e")]


def test_echo_puts_the_prompt_first(fake_stub) -> None:
    plain = fake_stub.CreateCompletion(body(), timeout=10)
    echoed = fake_stub.CreateCompletion(body(echo=True), timeout=10)
    assert echoed.choices[0].text == PROMPT + plain.choices[0].text


def test_echo_of_ids_decodes_them(fake_stub) -> None:
    ids = ids_of(fake_stub, "Hi there", special=False)
    resp = fake_stub.CreateCompletion(body(prompt=ids, echo=True, max_tokens=0), timeout=10)
    assert resp.choices[0].text == "Hi there"
    assert resp.usage.completion_tokens == 0  # echo only: nothing generated is reported


def test_legacy_logprobs_shape(fake_stub) -> None:
    resp = fake_stub.CreateCompletion(body(logprobs=2, return_token_ids=True), timeout=10)
    lp = as_json(resp)["choices"][0]["logprobs"]
    ids = list(resp.choices[0].token_ids)
    assert lp["token_ids"] == ids
    assert len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["top_logprobs"]) == len(ids)
    assert "".join(lp["tokens"]) == resp.choices[0].text
    offsets = [0]
    for tok in lp["tokens"][:-1]:
        offsets.append(offsets[-1] + len(tok))
    assert lp["text_offset"] == offsets
    for tok, value, top in zip(lp["tokens"], lp["token_logprobs"], lp["top_logprobs"], strict=True):
        assert isinstance(value, float) and top[tok] == pytest.approx(value)
        assert 1 <= len(top) <= 3  # k alternatives and the sampled token


def test_return_tokens_as_token_ids(fake_stub) -> None:
    resp = fake_stub.CreateCompletion(
        body(logprobs=1, return_tokens_as_token_ids=True, return_token_ids=True), timeout=10)
    lp = resp.choices[0].logprobs
    assert list(lp.tokens) == [f"token_id:{t}" for t in resp.choices[0].token_ids]
    for tok, top in zip(lp.tokens, lp.top_logprobs, strict=True):
        assert tok in top.struct_value.fields


def test_echo_with_logprobs_has_a_null_first_position(fake_stub) -> None:
    resp = fake_stub.CreateCompletion(
        body(echo=True, logprobs=1, return_token_ids=True), timeout=10
    )
    out = as_json(resp)["choices"][0]
    prompt_ids = out["prompt_token_ids"]
    lp = out["logprobs"]
    assert lp["token_ids"] == prompt_ids + out["token_ids"]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    assert all(isinstance(x, float) for x in lp["token_logprobs"][1:])
    assert out["text"] == resp.choices[0].text and not out["text"].startswith(PROMPT)


def test_stream_concatenates_to_the_unary_result(fake_stub) -> None:
    req = body(return_token_ids=True, echo=True, stream_options={"include_usage": True})
    unary = fake_stub.CreateCompletion(req, timeout=10)
    chunks = list(fake_stub.StreamCompletion(req, timeout=10))
    assert all(c.object == "text_completion" for c in chunks)
    ids = [t for c in chunks for ch in c.choices for t in ch.token_ids]
    text = "".join(ch.text for c in chunks for ch in c.choices)
    assert ids == list(unary.choices[0].token_ids)
    assert text == unary.choices[0].text
    assert [
        list(ch.prompt_token_ids) for c in chunks for ch in c.choices if ch.prompt_token_ids
    ] == [list(unary.choices[0].prompt_token_ids)]
    assert chunks[-1].usage.completion_tokens == unary.usage.completion_tokens
    finishes = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finishes == ["length"]


def test_stream_batch_gives_every_choice_its_ids(fake_stub) -> None:
    prompts = [[70, 71, 72], [80, 81]]
    req = body(prompt=prompts, n=2, temperature=1, seed=3, return_token_ids=True)
    unary = fake_stub.CreateCompletion(req, timeout=10)
    got: dict[int, list[int]] = {}
    for chunk in fake_stub.StreamCompletion(req, timeout=10):
        for ch in chunk.choices:
            got.setdefault(ch.index, []).extend(ch.token_ids)
    assert got == {c.index: list(c.token_ids) for c in unary.choices}


def test_render_gives_one_generate_request_per_prompt(fake_stub, fake_engine) -> None:
    before = len(fake_engine.requests)
    rendered = fake_stub.RenderCompletion(
        body(prompt=["a b", "c"], temperature=0.5, max_tokens=7, stop=["x"]), timeout=10)
    assert len(fake_engine.requests) == before, "nothing was generated"
    assert [list(r.token_ids) for r in rendered.requests] == [ids_of(fake_stub, "a b"),
                                                              ids_of(fake_stub, "c")]
    sp = rendered.requests[0].sampling_params
    assert (sp.max_tokens, sp.temperature) == (7, pytest.approx(0.5))
    gen = fake_stub.Generate(rendered.requests[1], timeout=10)
    comp = fake_stub.CreateCompletion(body(prompt="c", temperature=0.5, seed=1, max_tokens=7,
                                           stop=["x"], return_token_ids=True), timeout=10)
    assert list(gen.prompt_token_ids) == list(comp.choices[0].prompt_token_ids)


@pytest.mark.parametrize(("fields", "param", "reason"), [
    ({"prompt": []}, "prompt", "EMPTY_VALUE"),
    ({"prompt": ""}, "prompt", "PROMPT_EMPTY"),
    ({"prompt": None}, "prompt", "FIELD_REQUIRED"),
    ({"prompt": ["a", [1, 2]]}, "prompt", "INVALID_TYPE"),
    ({"prompt": [[1, 2], []]}, "prompt[1]", "PROMPT_EMPTY"),
    ({"prompt": [1, -2]}, "prompt", "INVALID_FORMAT"),
    ({"prompt": [1, 2.5]}, "prompt", "INVALID_FORMAT"),
    ({"prompt": [1, 10**6]}, "prompt", "TOKEN_ID_OUT_OF_VOCAB"),
    ({"prompt": [[1], [10**6]]}, "prompt[1]", "TOKEN_ID_OUT_OF_VOCAB"),
    ({"prompt": ["x"] * 65}, "prompt", "TOO_MANY_ITEMS"),
    ({"suffix": "tail"}, "suffix", "UNSUPPORTED_FIELD"),
    ({"best_of": 3}, "best_of", "UNSUPPORTED_FIELD"),
    ({"max_tokens": 0}, "max_tokens", "VALUE_OUT_OF_RANGE"),
    ({"logprobs": 21}, "logprobs", "VALUE_OUT_OF_RANGE"),
    ({"n": 0}, "n", "VALUE_OUT_OF_RANGE"),
    ({"nvext": {"extra_fields": ["nope"]}}, "nvext.extra_fields", "UNKNOWN_EXTRA_FIELD"),
])
def test_bad_input_names_the_field(fake_stub, fields, param, reason) -> None:
    with pytest.raises(grpc.RpcError) as info:
        fake_stub.CreateCompletion(body(**fields), timeout=10)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    detail = error_info(info.value)
    assert (detail.metadata["param"], detail.reason) == (param, reason)


def test_nvext_token_data_and_extra_fields(fake_stub) -> None:
    resp = fake_stub.CreateCompletion(body(prompt="ignored", nvext={
        "token_data": [70, 71, 72], "extra_fields": ["completion_token_ids", "prompt_token_ids"]}),
        timeout=10)
    assert list(resp.nvext.prompt_token_ids) == [70, 71, 72]
    assert list(resp.nvext.completion_token_ids) == list(resp.choices[0].nvext.completion_token_ids)
    assert len(resp.nvext.completion_token_ids) == 5
