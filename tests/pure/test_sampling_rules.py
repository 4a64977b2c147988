"""Sampling rules: one table of ranges for chat and generate, named by the
caller's field names."""

from __future__ import annotations

import math

import pytest

from tokenwire.server.core.domain import GenerationParams
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.inference.shared import sampling as rules

SETTINGS = ServerSettings(engine="fake")
VOCAB = 300


def _apply(**present: object) -> GenerationParams:
    p = GenerationParams()
    rules.apply_ranges(p, {k: (f"req.{k}", v) for k, v in present.items()}, SETTINGS, VOCAB)
    return p


def test_values_in_range_are_set() -> None:
    p = _apply(temperature=0.7, top_p=1.0, top_k=-1, n=2, min_tokens=3, repetition_penalty=1.2)
    assert (p.temperature, p.top_p, p.top_k, p.n, p.min_tokens) == (0.7, 1.0, -1, 2, 3)
    assert p.repetition_penalty == pytest.approx(1.2)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", -0.1), ("temperature", math.nan), ("temperature", math.inf),
        ("top_p", 0.0),  # open lower bound
        ("top_p", 1.01), ("min_p", 1.5), ("presence_penalty", 2.5),
        ("repetition_penalty", 0.0), ("top_k", -2), ("top_k", VOCAB + 1), ("n", 0),
        ("n", SETTINGS.max_n + 1), ("min_tokens", -1),
        ("prompt_logprobs", SETTINGS.max_top_logprobs + 1),
    ],
)
def test_out_of_range_names_the_callers_field(field: str, value: float) -> None:
    with pytest.raises(InvalidArgument) as exc:
        _apply(**{field: value})
    assert exc.value.param == f"req.{field}"
    assert f"req.{field}" in exc.value.message


def test_thinking_budget_needs_a_reasoning_parser() -> None:
    with pytest.raises(InvalidArgument) as exc:
        _apply(thinking_token_budget=10)
    assert "--reasoning-parser" in exc.value.message
    p = GenerationParams()
    with_parser = ServerSettings(engine="fake", reasoning_parser="deepseek_r1")
    rules.apply_ranges(p, {"thinking_token_budget": ("b", 10)}, with_parser, VOCAB)
    assert p.thinking_token_budget == 10


def test_greedy_choices_are_refused() -> None:
    rules.check_greedy_choices(GenerationParams(n=2, temperature=0.5), "n")
    rules.check_greedy_choices(GenerationParams(n=1, temperature=0.0), "n")
    with pytest.raises(InvalidArgument) as exc:
        rules.check_greedy_choices(GenerationParams(n=2, temperature=0.0), "sampling_params.n")
    assert exc.value.param == "sampling_params.n"


def test_stop_token_ids_count_and_vocabulary() -> None:
    assert rules.stop_token_ids("stop_token_ids", [2, 5], SETTINGS, VOCAB) == [2, 5]
    with pytest.raises(InvalidArgument) as exc:
        rules.stop_token_ids("stop_token_ids", [VOCAB], SETTINGS, VOCAB)
    assert exc.value.param == "stop_token_ids"
    too_many = [5] * (SETTINGS.max_stop_token_ids + 1)
    with pytest.raises(InvalidArgument) as exc:
        rules.stop_token_ids("sampling_params.stop_token_ids", too_many, SETTINGS, VOCAB)
    assert f"at most {SETTINGS.max_stop_token_ids} ids" in exc.value.message


def test_logit_bias_keys_and_range() -> None:
    assert rules.logit_bias("logit_bias", [(5, -100.0), (6, 100.0)], VOCAB) == {5: -100.0, 6: 100.0}
    with pytest.raises(InvalidArgument) as exc:
        rules.logit_bias("logit_bias", [(VOCAB, 1.0)], VOCAB)
    assert exc.value.param == "logit_bias"
    with pytest.raises(InvalidArgument) as exc:
        rules.logit_bias("logit_bias", [(5, 100.5)], VOCAB)
    assert exc.value.param == "logit_bias[5]"
