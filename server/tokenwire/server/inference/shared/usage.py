"""What a run consumed and how long it took: usage (tokens, cached tokens)
and timing (queue, prefill, decode)."""

from __future__ import annotations

import time

from tokenwire.server.core.domain import EngineTimes
from tokenwire.v1 import common_pb2


def usage(prompt_len: int, completion_len: int, cached: int) -> common_pb2.Usage:
    return common_pb2.Usage(
        prompt_tokens=prompt_len,
        completion_tokens=completion_len,
        total_tokens=prompt_len + completion_len,
        prompt_tokens_details=common_pb2.PromptTokensDetails(cached_tokens=cached),
    )


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
