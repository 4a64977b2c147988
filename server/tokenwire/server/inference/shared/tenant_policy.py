"""What the caller's tenant allows a request: its cache salt (inside the
tenant's domain) and its priority (clamped to the caller's range)."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core.domain import Caller
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.settings import ServerSettings

MAX_CACHE_SALT = 1024


def pick_cache_salt(caller: Caller, *requested: str) -> str | None:
    """The one cache-salt rule: the first non-empty requested salt (chat:
    nvext.cache_salt, then cache_salt; generate: cache_salt; '' = absent; at
    most MAX_CACHE_SALT characters), inside the caller's tenant domain when
    it has one: the tenant's secret prefix is always applied, so no caller
    can name a salt of another tenant (security/tenancy.py)."""
    salt = next((s for s in requested if s), None)
    if salt is not None and len(salt) > MAX_CACHE_SALT:
        raise InvalidArgument(
            f"cache_salt must be at most {MAX_CACHE_SALT} characters", param="cache_salt",
            reason="VALUE_TOO_LONG",
        )
    if caller.salt_prefix is None:
        return salt
    return caller.salt_prefix if salt is None else f"{caller.salt_prefix}:{salt}"


def check_priority(priority: int, settings: ServerSettings, caller: Caller) -> int:
    """The one priority rule: non-zero needs the priority scheduler; the
    value is clamped to the caller's range (its API key's, else the
    server's --min-priority/--max-priority), so no caller jumps the queue
    further than the operator allows."""
    if priority != 0 and settings.scheduling_policy != "priority":
        raise InvalidArgument(
            "priority needs the server's priority scheduler (--scheduling-policy priority)",
            param="priority", reason="FEATURE_DISABLED",
        )
    return min(max(priority, caller.priority_min), caller.priority_max)


def body_priority(req: Any, settings: ServerSettings, caller: Caller) -> int:
    """The root priority, else nvext.agent_hints.priority, checked for `caller`."""
    priority = 0
    if req.HasField("priority"):
        priority = req.priority
    elif req.nvext.agent_hints.HasField("priority"):
        priority = req.nvext.agent_hints.priority
    return check_priority(priority, settings, caller)
