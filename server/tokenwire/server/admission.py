"""Bounded admission: at most N generation requests in the server and at
most T tokens (prompt + max new tokens) admitted, instead of unbounded
queues. Full -> RESOURCE_EXHAUSTED with a retry hint."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from tokenwire.server.errors import ResourceExhausted

RETRY_AFTER_SECONDS = 1.0


class Admission:
    def __init__(self, max_requests: int, max_tokens: int):
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.requests = 0
        self.tokens = 0

    @contextlib.contextmanager
    def hold(self, tokens: int) -> Iterator[None]:
        """Admit one request that may occupy `tokens` KV slots, or refuse."""
        if self.max_requests and self.requests >= self.max_requests:
            raise ResourceExhausted(
                f"the server is full: {self.requests} requests in flight "
                f"(limit {self.max_requests}); retry later",
                reason="TOO_MANY_REQUESTS",
                retry_after=RETRY_AFTER_SECONDS,
            )
        if self.max_tokens and self.requests and self.tokens + tokens > self.max_tokens:
            raise ResourceExhausted(
                f"the server is full: {self.tokens} tokens admitted, this request needs "
                f"{tokens} (limit {self.max_tokens}); retry later",
                reason="TOO_MANY_TOKENS",
                retry_after=RETRY_AFTER_SECONDS,
            )
        self.requests += 1
        self.tokens += tokens
        try:
            yield
        finally:
            self.requests -= 1
            self.tokens -= tokens
