"""The sampling fields and their rules, written once: one table of ranges
(chat and completion read OpenAI's root fields with Dynamo's nvext
fallbacks, generate vLLM's `sampling_params`, each with its own field names),
the engine's defaults, stop strings and ids, logit bias, the logprobs cap,
and min_tokens against max_tokens."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from google.protobuf import struct_pb2

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
            f"{param} > 1 needs temperature > 0: greedy choices would all be the same",
            param=param, reason="GREEDY_CHOICES_IDENTICAL",
        )


def stop_token_ids(param: str, ids: Iterable[int], settings: ServerSettings, vocab: int
                   ) -> list[int]:
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
                f"{param} key {tid} is not a token id (vocabulary {vocab})", param=param,
                reason="TOKEN_ID_OUT_OF_VOCAB",
            )
        out[int(tid)] = v.in_range(f"{param}[{tid}]", bias, -100.0, 100.0)
    return out


TEXT_FLAGS = ("skip_special_tokens", "spaces_between_special_tokens", "include_stop_str_in_output")


def copy_text_flags(p: GenerationParams, message: Any) -> None:
    for name in TEXT_FLAGS:
        if message.HasField(name):
            setattr(p, name, getattr(message, name))


def stop_strings(
    param: str, value: struct_pb2.Value | None, settings: ServerSettings
) -> tuple[list[str], list[int]]:
    """`stop`: a string, a list, or null; at most --max-stop-strings strings
    of at most --max-stop-string-chars characters (the engine matches every
    one against the tail of the output per token). Integer entries of a
    list are token ids (Dynamo's 2026 wire), returned apart."""
    limit, chars = settings.max_stop_strings, settings.max_stop_string_chars
    ids: list[int] = []
    if value is None:
        return [], ids
    kind = value.WhichOneof("kind")
    if kind is None or kind == "null_value":
        return [], ids
    if kind == "string_value":
        items = [value.string_value]
    elif kind == "list_value":
        items = []
        for i, item in enumerate(value.list_value.values):
            if item.WhichOneof("kind") == "number_value":
                number = item.number_value
                if not (number.is_integer() and 0 <= number < 2**32):
                    raise InvalidArgument(f"{param}[{i}] must be a string or a token id (an "
                                          f"integer >= 0), got {number}", param=param,
                                          reason="INVALID_TYPE")
                ids.append(int(number))
                continue
            if item.WhichOneof("kind") != "string_value":
                raise InvalidArgument(f"{param}[{i}] must be a string or a token id", param=param,
                                      reason="INVALID_TYPE")
            items.append(item.string_value)
    else:
        raise InvalidArgument(f"{param} must be a string or a list of strings",
                              param=param, reason="INVALID_TYPE")
    if len(items) > limit:
        raise InvalidArgument(f"{param} may hold at most {limit} strings, got {len(items)}",
                              param=param, reason="TOO_MANY_ITEMS")
    for i, s in enumerate(items):
        if not s:
            raise InvalidArgument(f"{param}[{i}] must not be empty",
                                  param=param, reason="EMPTY_VALUE")
        if len(s) > chars:
            raise InvalidArgument(f"{param}[{i}] must be at most {chars} characters, got {len(s)}",
                                  param=param, reason="VALUE_TOO_LONG")
    return items, ids


def opt(msg: Any, name: str) -> Any:
    """Field `name` of `msg` when set, else None."""
    return getattr(msg, name) if msg.HasField(name) else None


def sampling_from_body(
    req: Any, settings: ServerSettings, vocab_size: int, defaults: Mapping[str, Any] | None = None,
) -> GenerationParams:
    """The sampling parameters chat and completion bodies spell alike (the
    root fields and Dynamo's nvext; logprobs and max_tokens are each
    body's own); unset fields take the engine's `defaults` (its generation
    config)."""
    nv = req.nvext
    p = default_params(defaults or {})
    present: dict[str, tuple[str, Any]] = {
        name: (name, getattr(req, name))
        for name in ("n", "temperature", "top_p", "top_k", "min_p", "presence_penalty",
                     "frequency_penalty", "repetition_penalty", "min_tokens", "prompt_logprobs")
        if req.HasField(name)
    }
    for name in ("top_k", "repetition_penalty"):  # older Dynamo put these in nvext
        if name not in present and nv.HasField(name):
            present[name] = (f"nvext.{name}", getattr(nv, name))
    if nv.HasField("max_thinking_tokens"):
        present["thinking_token_budget"] = ("nvext.max_thinking_tokens", nv.max_thinking_tokens)
    apply_ranges(p, present, settings, vocab_size)
    if nv.HasField("greed_sampling") and nv.greed_sampling:
        p.temperature = 0.0
    check_greedy_choices(p, "n")
    if req.HasField("seed"):
        p.seed = v.int_range("seed", req.seed, -(2**63), 2**63 - 1)
    p.stop, stop_ids = stop_strings("stop", req.stop if req.HasField("stop") else None, settings)
    v.token_ids("stop", stop_ids, vocab_size)
    p.stop_token_ids = stop_token_ids("stop_token_ids", [*req.stop_token_ids, *stop_ids],
                                      settings, vocab_size)
    ignore_eos = opt(req, "ignore_eos")
    if ignore_eos is None and nv.HasField("ignore_eos"):
        ignore_eos = nv.ignore_eos
    p.ignore_eos = bool(ignore_eos)
    copy_text_flags(p, req)
    p.logit_bias = logit_bias("logit_bias", req.logit_bias.items(), vocab_size)
    if "prompt_logprobs" in nv.extra_fields and p.prompt_logprobs is None:
        p.prompt_logprobs = 0  # Dynamo: the extra field asks for them
    return p


def check_min_tokens(p: GenerationParams, prefix: str = "") -> None:
    """min_tokens must not exceed max_tokens (vLLM would raise outside any
    handler); `prefix`: where the request spells both (generate:
    "sampling_params.")."""
    if p.min_tokens > p.max_tokens:
        raise InvalidArgument(
            f"{prefix}min_tokens ({p.min_tokens}) exceeds {prefix}max_tokens ({p.max_tokens})",
            param=f"{prefix}min_tokens", reason="VALUE_OUT_OF_RANGE",
        )
