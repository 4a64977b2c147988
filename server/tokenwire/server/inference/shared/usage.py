"""What a run consumed and how long it took: usage (tokens, cached tokens,
reasoning tokens as the reasoning parser counts them) and timing (queue, prefill, decode)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence

from tokenwire.server.core.domain import EngineTimes
from tokenwire.server.core.parsing import RequestParsers
from tokenwire.v1 import common_pb2


def usage(prompt_len: int, completion_len: int, cached: int,
          reasoning: int | None = None) -> common_pb2.Usage:
    """`reasoning`: the reasoning tokens (completion_tokens_details, as vLLM
    prints it with a reasoning parser); None: no reasoning parser, no details."""
    out = common_pb2.Usage(
        prompt_tokens=prompt_len,
        completion_tokens=completion_len,
        total_tokens=prompt_len + completion_len,
        prompt_tokens_details=common_pb2.PromptTokensDetails(cached_tokens=cached),
    )
    if reasoning is not None:
        out.completion_tokens_details.reasoning_tokens = reasoning
    return out


def reasoning_tokens(parsing: RequestParsers | None, choices: Iterable[Sequence[int]]
                     ) -> int | None:
    """The reasoning tokens of the choices' generated ids, summed, as the
    request's reasoning parser counts them; None without one."""
    if parsing is None:
        return None
    total = 0
    for ids in choices:
        n = parsing.count_reasoning_tokens(list(ids))
        if n is None:
            return None
        total += n
    return total


def timing(received: float, times: EngineTimes | None, first_seen: float | None
           ) -> common_pb2.Timing:
    finished = time.time()
    t = common_pb2.Timing(request_received_seconds=received, finished_seconds=finished)
    first = (times.first_token if times else None) or first_seen
    if first:
        t.first_token_seconds = first
    t.total_ms = (finished - received) * 1000.0
    if times:
        arrival = times.arrival or received
        if times.scheduled:
            t.queue_ms = max(0.0, (times.scheduled - arrival) * 1000.0)
            if first:
                t.prefill_ms = max(0.0, (first - times.scheduled) * 1000.0)
        if first and times.last_token:
            t.decode_ms = max(0.0, (times.last_token - first) * 1000.0)
    return t
