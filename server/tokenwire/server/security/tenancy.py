"""Who a caller is: its tenant (a cache domain) and the priority range it
may use, from the credential it presents.

The operator lists API keys in a TOML file (``--api-keys-file``)::

    [[keys]]
    key = "sk-team-a-..."      # the bearer token
    tenant = "team-a"          # the cache domain of every key of this tenant
    priority = [-10, 100]      # optional: the range its requests may use
    max_concurrent_requests = 8   # optional: the tenant's engine requests in flight
    max_admitted_tokens = 65536   # optional: the tenant's prompt + max new tokens in flight

A request authenticated by such a key always runs in its tenant's cache
domain: the engine's cache salt is a secret per-tenant prefix (an HMAC of
the tenant name under a per-server secret) plus the request's own salt, so
no caller can join another tenant's cache or probe it for cached prompts.
``x-tenant-id`` metadata names the tenant only when the operator says it
comes from a trusted hop (``--trust-tenant-header``; the gateway strips it
from outside callers). Priorities outside the caller's range are clamped.

The caps are the tenant's, whichever of its keys a request presents (set
them on one entry of the tenant, or the same on each): beyond them its
requests get RESOURCE_EXHAUSTED TENANT_TOO_MANY_REQUESTS / _TOKENS while
other tenants are admitted as before (core/admission.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import os
import secrets
import tomllib
from collections.abc import Iterable, Sequence
from typing import Any

from tokenwire.server.core.admission import Limits
from tokenwire.server.core.domain import Caller
from tokenwire.server.core.settings import ServerSettings
from tokenwire.wire import TENANT_HEADER

log = logging.getLogger(__name__)

SECRET_ENV = "TOKENWIRE_TENANT_SALT_SECRET"


@dataclasses.dataclass(frozen=True)
class ApiKey:
    key: str
    tenant: str
    priority: tuple[int, int] | None = None  # None: the server's range
    limits: Limits | None = None  # the tenant's admission caps; None: none


CAPS = {"max_concurrent_requests": "max_requests", "max_admitted_tokens": "max_tokens"}


def _limits(entry: dict[str, Any], where: str) -> Limits | None:
    caps = {}
    for name, field in CAPS.items():
        value = entry.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"{where}.{name} must be a positive integer")
        caps[field] = value
    return Limits(**caps) if caps else None


def load_keys(path: str) -> list[ApiKey]:
    """The keys of an --api-keys-file; ValueError naming the entry at fault."""
    with open(path, "rb") as f:
        doc = tomllib.load(f)
    entries = doc.get("keys")
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected one or more [[keys]] tables")
    keys: list[ApiKey] = []
    for i, entry in enumerate(entries):
        where = f"{path}: keys[{i}]"
        key, tenant = entry.get("key"), entry.get("tenant")
        if not isinstance(key, str) or len(key) < 8:
            raise ValueError(f"{where}.key must be a string of at least 8 characters")
        if not isinstance(tenant, str) or not tenant:
            raise ValueError(f"{where}.tenant must be a non-empty string")
        unknown = set(entry) - {"key", "tenant", "priority", *CAPS}
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}")
        prio = entry.get("priority")
        if prio is not None and not (
            isinstance(prio, list) and len(prio) == 2 and all(isinstance(p, int) for p in prio)
            and prio[0] <= prio[1]
        ):
            raise ValueError(f"{where}.priority must be [low, high] integers with low <= high")
        limits = _limits(entry, where)
        earlier = next((j for j, k in enumerate(keys) if k.tenant == tenant and k.limits), None)
        if limits and earlier is not None and keys[earlier].limits != limits:
            raise ValueError(f"{where}: tenant '{tenant}' has other caps in keys[{earlier}] "
                             "(a tenant's caps are set once, or the same on each of its keys)")
        keys.append(ApiKey(key, tenant, (prio[0], prio[1]) if prio else None, limits))
    if len({k.key for k in keys}) != len(keys):
        raise ValueError(f"{path}: a key is listed twice")
    return keys


def share_secret() -> None:
    """Before starting several serving processes: one salt secret for all of
    them (the operator's $TOKENWIRE_TENANT_SALT_SECRET, else one drawn here),
    in the environment each inherits, so a tenant has one cache domain
    whichever process serves it (and its prefix-cache hits count across
    them: they share one engine)."""
    if not os.environ.get(SECRET_ENV):
        os.environ[SECRET_ENV] = secrets.token_hex(32)


def _digest(token: bytes) -> bytes:
    return hashlib.sha256(token).digest()


def bearer_token(metadata: Iterable[tuple[str, Any]] | None) -> bytes | None:
    """The call's key: `authorization: Bearer <key>`, else `x-api-key: <key>`
    (the anthropic SDK's header; the same credential)."""
    api_key = None
    for name, value in metadata or ():
        if name == "x-api-key":
            text = value.decode() if isinstance(value, bytes) else str(value)
            api_key = api_key or text.strip().encode()
        if name != "authorization":
            continue
        text = value.decode() if isinstance(value, bytes) else str(value)
        scheme, _, token = text.partition(" ")
        if scheme.lower() == "bearer":
            return token.strip().encode()
    return api_key or None


class Tenancy:
    """Resolves each request's Caller; built once at start-up."""

    def __init__(
        self, keys: Sequence[ApiKey] = (), *, trust_tenant_header: bool = False,
        priority: tuple[int, int] = (-(2**31), 2**31 - 1), secret: bytes | None = None,
    ):
        self.keys = list(keys)
        self.trust_tenant_header = trust_tenant_header
        self._secret = secret or secrets.token_bytes(32)
        self._default = Caller(priority_min=priority[0], priority_max=priority[1])
        # Each tenant's admission caps, from whichever of its keys sets them.
        self.limits = {k.tenant: k.limits for k in self.keys if k.limits}
        self._by_digest = {
            _digest(k.key.encode()): dataclasses.replace(
                self._default, salt_prefix=self.salt_prefix(k.tenant), tenant=k.tenant,
                **({"priority_min": k.priority[0], "priority_max": k.priority[1]}
                   if k.priority else {}),
            )
            for k in self.keys
        }

    @classmethod
    def from_settings(cls, settings: ServerSettings) -> Tenancy:
        keys = load_keys(settings.api_keys_file) if settings.api_keys_file else []
        secret = os.environ.get(SECRET_ENV, "").encode() or None
        tenancy = cls(keys, trust_tenant_header=settings.trust_tenant_header,
                      priority=(settings.min_priority, settings.max_priority), secret=secret)
        if keys or settings.trust_tenant_header:
            log.info("tenant cache domains: salt secret %s (%s)", tenancy.secret_fingerprint(),
                     f"${SECRET_ENV}" if secret else "drawn by this process")
        return tenancy

    def secret_fingerprint(self) -> str:
        """A short fingerprint of the salt secret (not the secret, nor any
        tenant's prefix): processes or replicas that print the same one give
        each tenant the same cache domain."""
        return hashlib.sha256(b"tokenwire-salt-secret-fingerprint:" + self._secret).hexdigest()[:12]

    def salt_prefix(self, tenant: str) -> str:
        """The tenant's cache domain: unguessable without the server secret."""
        mac = hmac.new(self._secret, tenant.encode(), hashlib.sha256).hexdigest()[:32]
        return f"tenant-{mac}"

    def caller(self, metadata: Iterable[tuple[str, Any]] | None, *,
               trusted_hop: bool = False) -> Caller:
        """The caller of a call with this metadata. x-tenant-id counts only
        with --trust-tenant-header and when the call came from a trusted hop
        (`trusted_hop`: auth.Proxies.may_name_tenant of its peer)."""
        metadata = list(metadata or ())
        if self._by_digest:
            token = bearer_token(metadata)
            if token is not None:
                found = self._by_digest.get(_digest(token))
                if found is not None:
                    return found
        if self.trust_tenant_header and trusted_hop:
            for key, value in metadata:
                if key == TENANT_HEADER and value:
                    text = value.decode() if isinstance(value, bytes) else str(value)
                    return dataclasses.replace(self._default, tenant=text,
                                               salt_prefix=self.salt_prefix(text))
        return self._default
