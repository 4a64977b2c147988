"""Bounded admission: at most N generation requests in the server and at
most T tokens (prompt + max new tokens) admitted, instead of unbounded
queues; and, per tenant, the caps its entry in --api-keys-file sets, so one
tenant cannot take every slot. Full -> RESOURCE_EXHAUSTED with a retry
hint (the tenant's own cap: reasons TENANT_TOO_MANY_*; others' requests are
not affected)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping

from tokenwire.server.core.errors import ResourceExhausted

RETRY_AFTER_SECONDS = 1.0


@dataclasses.dataclass(frozen=True)
class Limits:
    """Caps on what is admitted at once (0: no limit)."""

    max_requests: int = 0
    max_tokens: int = 0


@dataclasses.dataclass
class _Counts:
    requests: int = 0
    tokens: int = 0

    def check(self, limits: Limits, tokens: int, who: str, prefix: str) -> None:
        """Refuse one more request of `tokens` beyond `limits`."""
        if limits.max_requests and self.requests >= limits.max_requests:
            raise ResourceExhausted(
                f"{who} is full: {self.requests} requests in flight "
                f"(limit {limits.max_requests}); retry later",
                reason=f"{prefix}TOO_MANY_REQUESTS", retry_after=RETRY_AFTER_SECONDS,
            )
        # An idle domain takes one request however big (the engine refuses
        # what can never fit), rather than refusing it forever.
        if limits.max_tokens and self.requests and self.tokens + tokens > limits.max_tokens:
            raise ResourceExhausted(
                f"{who} is full: {self.tokens} tokens admitted, this request needs "
                f"{tokens} (limit {limits.max_tokens}); retry later",
                reason=f"{prefix}TOO_MANY_TOKENS", retry_after=RETRY_AFTER_SECONDS,
            )


class Admission:
    def __init__(self, max_requests: int, max_tokens: int,
                 tenants: Mapping[str, Limits] | None = None):
        self.max_requests = max_requests
        self.max_tokens = max_tokens
        self.tenants = dict(tenants or {})  # tenant -> its caps (tenants not listed: none)
        self._server = _Counts()
        self.by_tenant: dict[str, _Counts] = {}  # tenants with requests in flight

    @property
    def requests(self) -> int:
        return self._server.requests

    @property
    def tokens(self) -> int:
        return self._server.tokens

    @contextlib.contextmanager
    def hold(self, tokens: int, tenant: str | None = None) -> Iterator[None]:
        """Admit one request that may occupy `tokens` KV slots, or refuse
        (the tenant's caps first, then the server's)."""
        capped = tenant if tenant is not None and tenant in self.tenants else None
        held = [self._server]
        if capped is not None:
            own = self.by_tenant.get(capped) or _Counts()
            own.check(self.tenants[capped], tokens, f"tenant '{capped}'", "TENANT_")
            held.append(own)
        self._server.check(Limits(self.max_requests, self.max_tokens), tokens, "the server", "")
        if capped is not None:
            self.by_tenant[capped] = held[1]
        for counts in held:
            counts.requests += 1
            counts.tokens += tokens
        try:
            yield
        finally:
            for counts in held:
                counts.requests -= 1
                counts.tokens -= tokens
            if capped is not None and not held[1].requests:
                del self.by_tenant[capped]
