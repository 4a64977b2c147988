"""Validation helpers: each failure is an InvalidArgument naming the field
and the rule it broke."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from tokenwire.server.core.errors import FailedPrecondition, InvalidArgument


def finite(param: str, value: float) -> float:
    if not math.isfinite(value):
        raise InvalidArgument(f"{param} must be a finite number, got {value}",
                              param=param, reason="VALUE_NOT_FINITE")
    return float(value)


def in_range(
    param: str,
    value: float,
    lo: float | None = None,
    hi: float | None = None,
    *,
    lo_open: bool = False,
) -> float:
    finite(param, value)
    _check_bounds(param, value, lo, hi, lo_open)
    return float(value)


def int_range(param: str, value: int, lo: int | None = None, hi: int | None = None) -> int:
    _check_bounds(param, value, lo, hi)
    return int(value)


def _check_bounds(param: str, value: float, lo: float | None, hi: float | None,
                  lo_open: bool = False) -> None:
    """VALUE_OUT_OF_RANGE below `lo` (at it too: lo_open) or above `hi` (None: no bound)."""
    if lo is not None and (value <= lo if lo_open else value < lo):
        rule = f"> {lo}" if lo_open else f">= {lo}"
        raise InvalidArgument(f"{param} must be {rule}, got {value}",
                              param=param, reason="VALUE_OUT_OF_RANGE")
    if hi is not None and value > hi:
        raise InvalidArgument(f"{param} must be <= {hi}, got {value}",
                              param=param, reason="VALUE_OUT_OF_RANGE")


def token_ids(param: str, ids: Iterable[int], vocab_size: int) -> list[int]:
    out = list(ids)
    for i, tid in enumerate(out):
        if tid >= vocab_size:
            raise InvalidArgument(
                f"{param}[{i}] = {tid} is not a token id: the vocabulary has "
                f"{vocab_size} ids (0..{vocab_size - 1})",
                param=param, reason="TOKEN_ID_OUT_OF_VOCAB",
            )
    return out


def prompt_fits(param: str, prompt_len: int, max_model_len: int,
                generates: bool = True) -> None:
    """A prompt of `prompt_len` ids fits the window (leaving one to generate,
    unless the model only pools it: an embedding's input may fill it)."""
    if prompt_len == 0:
        raise InvalidArgument(f"{param}: the prompt is empty (0 tokens)",
                              param=param, reason="PROMPT_EMPTY")
    if prompt_len > max_model_len or (generates and prompt_len == max_model_len):
        left = " and at least one must be left to generate" if generates else ""
        raise InvalidArgument(
            f"{param}: the prompt is {prompt_len} tokens; the context window is "
            f"{max_model_len} tokens{left}", param=param, reason="PROMPT_TOO_LONG",
        )


def text_fits(param: str, chars: int, max_model_len: int, max_token_chars: int) -> None:
    """Refuse a text too long to fit the context window, by its length alone
    (before rendering or tokenizing it): each token covers at most
    `max_token_chars` characters."""
    limit = max_model_len * max_token_chars
    if chars > limit:
        raise InvalidArgument(
            f"{param}: {chars} characters cannot fit the context window of {max_model_len} "
            f"tokens (a token covers at most {max_token_chars} characters of this vocabulary, "
            f"so at most {limit} characters fit)",
            param=param, reason="PROMPT_TOO_LONG",
        )


# Estimated bytes a unary response spends per token (protobuf): the id and
# its text; each logprob entry (token text, bytes, logprob, id) and each
# alternative in it. An estimate: it refuses what would surely overflow.
BYTES_PER_TOKEN = 8
BYTES_PER_LOGPROB = 32


def response_fits(
    param: str, *, n: int, max_tokens: int, logprobs: int | None, prompt_len: int,
    prompt_logprobs: int | None, limit: int,
) -> None:
    """Refuse, before generating, a unary response that would exceed the
    gRPC message limit (n choices x max_tokens x logprobs and alternatives,
    plus the prompt's logprobs): the caller learns it up front, not after
    the engine did the work."""
    per_token = BYTES_PER_TOKEN
    if logprobs is not None:
        per_token += BYTES_PER_LOGPROB * (1 + logprobs)
    estimate = n * max_tokens * per_token + 5 * prompt_len
    if prompt_logprobs is not None:
        estimate += prompt_len * BYTES_PER_LOGPROB * (1 + prompt_logprobs)
    if estimate > limit:
        raise InvalidArgument(
            f"{param}: the response could reach about {estimate} bytes (n={n} x max_tokens="
            f"{max_tokens} with logprobs), more than the {limit}-byte message limit; lower "
            "n, max_tokens or the logprobs asked, or stream it",
            param=param, reason="RESPONSE_TOO_LARGE",
        )


# A stream's whole completion, per token: the id in completion_token_ids
# and again in engine_data, with its logprob (a float).
BYTES_PER_WHOLE_TOKEN = 12


def stream_fits(
    param: str, *, n: int, max_tokens: int, prompt_len: int, prompt_logprobs: int | None,
    whole: bool, limit: int, logprobs: int | None = None,
) -> None:
    """Refuse, before generating, a stream whose largest message would exceed
    the gRPC message limit. Chunks carry deltas (an output of many tokens is
    cut into several: inference/chunk_bounds.py), but the first carries the
    prompt (its ids, its logprobs) and the last, when `whole`
    (completion_token_ids / engine_data asked), every finishing choice's
    whole completion (n = 1: mirrored in the response's nvext); the two can
    be one message, with each choice's token and its `logprobs`
    alternatives (the smallest delta a chunk can carry)."""
    estimate = 5 * prompt_len
    if prompt_logprobs is not None:
        estimate += prompt_len * BYTES_PER_LOGPROB * (1 + prompt_logprobs)
    if logprobs is not None:  # the sampled token and up to logprobs + 1 alternatives
        estimate += n * (BYTES_PER_TOKEN + BYTES_PER_LOGPROB * (2 + logprobs))
    if whole:
        estimate += max(n, 2) * (max_tokens * BYTES_PER_WHOLE_TOKEN + 5 * prompt_len)
    if estimate > limit:
        raise InvalidArgument(
            f"{param}: a streamed message could reach about {estimate} bytes (the first carries "
            f"the prompt of {prompt_len} tokens with its logprobs, each a token with its "
            "logprobs, the last every choice's whole completion for nvext "
            f"completion_token_ids / engine_data: n={n} x max_tokens={max_tokens}), more than "
            f"the {limit}-byte message limit; ask for fewer (prompt) logprobs, lower n or "
            "max_tokens, or leave those extra fields out",
            param=param, reason="RESPONSE_TOO_LARGE",
        )


def max_tokens(param: str, requested: int | None, prompt_len: int, max_model_len: int) -> int:
    room = max_model_len - prompt_len
    if requested is None:
        return room
    if requested < 1:
        raise InvalidArgument(f"{param} must be >= 1, got {requested}",
                              param=param, reason="VALUE_OUT_OF_RANGE")
    if requested > room:
        raise InvalidArgument(
            f"{param} = {requested} does not fit: the prompt is {prompt_len} tokens and "
            f"the context window is {max_model_len} (at most {room} may be generated)",
            param=param, reason="CONTEXT_LENGTH_EXCEEDED",
        )
    return requested


STREAM_INTERVAL_MAX = 1024


def stream_interval(options: Any) -> int | None:
    """`stream_options.stream_interval`: tokens per chunk, 1..1024 (None: unset)."""
    if not options.HasField("stream_interval"):
        return None
    return int_range("stream_options.stream_interval", options.stream_interval,
                     1, STREAM_INTERVAL_MAX)


def check_pooling_task(task: str, pooling_task: str, tasks: tuple[str, ...], *,
                       named: bool) -> None:
    """vLLM's rule: a pooling server serves one task, its model's pooling task
    (`--pooler-config '{"task": ...}'` picks another the model supports).
    A task named in a /pooling body (`named`) is refused as that field."""
    if task == pooling_task:
        return
    hint = (f"the served model pools for {pooling_task!r}, not {task!r}" if task in tasks else
            f"the served model does not serve {task!r} (it serves {', '.join(sorted(tasks))})")
    if task in tasks:
        hint += f": start the server with --pooler-config '{{\"task\": \"{task}\"}}'"
    if named:
        raise InvalidArgument(f"task: {hint}", param="task", reason="VALUE_NOT_ALLOWED")
    raise FailedPrecondition(hint, reason="TASK_NOT_SUPPORTED")
