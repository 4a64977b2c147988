"""Validation of sampling parameters, shared by chat (root OpenAI/vLLM
fields, nvext fallbacks) and generate (vLLM `sampling_params`): one table of
ranges, so both entry points apply the same rules with their own field names."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tokenwire.server.core import validation as v
from tokenwire.server.core.domain import GenerationParams
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.settings import ServerSettings

# field -> (low, high, low bound excluded); None = no bound. Integer fields
# are listed in INTS; "vocab" and "max_*" bounds come from the server.
FLOAT_RANGES: dict[str, tuple[float, float, bool]] = {
    "temperature": (0.0, 100.0, False),
    "top_p": (0.0, 1.0, True),
    "min_p": (0.0, 1.0, False),
    "presence_penalty": (-2.0, 2.0, False),
    "frequency_penalty": (-2.0, 2.0, False),
    "repetition_penalty": (0.0, 100.0, True),
}


# Fields a model's generation config (vLLM's get_diff_sampling_param:
# generation_config.json, or --override-generation-config) may default.
DEFAULTABLE = ("temperature", "top_p", "top_k", "min_p", "presence_penalty", "frequency_penalty",
               "repetition_penalty")


def default_params(defaults: Mapping[str, Any]) -> GenerationParams:
    """GenerationParams with the engine's sampling defaults (vLLM's rule:
    the model's generation config, then --override-generation-config) for
    the fields a request leaves unset; OpenAI's defaults for the rest."""
    p = GenerationParams()
    for name in DEFAULTABLE:
        value = defaults.get(name)
        if value is not None:
            setattr(p, name, type(getattr(p, name))(value))
    return p


# The most logprob alternatives a request may ask per position, whatever the
# server's cap: vLLM's --max-logprobs -1 (TRL's recipe) lifts it to the
# vocabulary, whose table per token no stream chunk should carry. Ample for
# sequence scoring (TRL asks 100); OpenAI's own cap is 20.
MAX_TOP_LOGPROBS = 1024


def logprobs_cap(settings: ServerSettings) -> int:
    """The largest top_logprobs / logprobs / prompt_logprobs a request may ask."""
    return min(settings.max_top_logprobs, MAX_TOP_LOGPROBS)


def logprobs_count(param: str, value: int, settings: ServerSettings) -> int:
    """A request's logprob alternatives per position: 0..logprobs_cap."""
    return v.int_range(param, value, 0, logprobs_cap(settings))


def _int_bounds(field: str, settings: ServerSettings, vocab: int) -> tuple[int, int | None]:
    return {
        "n": (1, settings.max_n),
        "top_k": (-1, vocab),
        "min_tokens": (0, None),
        "prompt_logprobs": (0, logprobs_cap(settings)),
        "thinking_token_budget": (0, None),
    }[field]


def apply_ranges(
    p: GenerationParams,
    present: Mapping[str, tuple[str, Any]],
    settings: ServerSettings,
    vocab: int,
) -> None:
    """Check and set every given field. `present` maps a GenerationParams
    field to (the request's name for it, its value)."""
    for field, (param, value) in present.items():
        if field in FLOAT_RANGES:
            lo, hi, lo_open = FLOAT_RANGES[field]
            setattr(p, field, v.in_range(param, value, lo, hi, lo_open=lo_open))
            continue
        if field == "thinking_token_budget" and not settings.reasoning_parser:
            raise InvalidArgument(
                f"{param} needs a reasoning model: start the server with --reasoning-parser NAME",
                param=param, reason="FEATURE_DISABLED",
            )
        lo_i, hi_i = _int_bounds(field, settings, vocab)
        setattr(p, field, v.int_range(param, value, lo_i, hi_i))


def check_greedy_choices(p: GenerationParams, param: str) -> None:
    if p.n > 1 and p.temperature == 0.0:
        raise InvalidArgument(
            f"{param} > 1 needs temperature > 0: greedy choices would all be the same", param=param, reason="GREEDY_CHOICES_IDENTICAL"
        )


def stop_token_ids(param: str, ids: Iterable[int], settings: ServerSettings, vocab: int) -> list[int]:
    ids = list(ids)
    if len(ids) > settings.max_stop_token_ids:
        raise InvalidArgument(
            f"{param} may hold at most {settings.max_stop_token_ids} ids, got {len(ids)}",
            param=param, reason="TOO_MANY_ITEMS",
        )
    return v.token_ids(param, ids, vocab)


def logit_bias(param: str, items: Iterable[tuple[int, float]], vocab: int) -> dict[int, float]:
    out: dict[int, float] = {}
    for tid, bias in items:
        if tid >= vocab:
            raise InvalidArgument(
                f"{param} key {tid} is not a token id (vocabulary {vocab})", param=param, reason="TOKEN_ID_OUT_OF_VOCAB"
            )
        out[int(tid)] = v.in_range(f"{param}[{tid}]", bias, -100.0, 100.0)
    return out


TEXT_FLAGS = ("skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output")


def copy_text_flags(p: GenerationParams, message: Any) -> None:
    for name in TEXT_FLAGS:
        if message.HasField(name):
            setattr(p, name, getattr(message, name))
