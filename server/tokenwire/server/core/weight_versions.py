"""Weight version names as callers send them in metadata
(x-min-weight-version, x-max-weight-lag): checked and compared by hand,
in time linear in their length.

Names that end in a number ("12", "step-12") compare by that number where
their prefixes agree (core/serving_state.py's serves_at_least). The number
is split off by a scan from the end and compared as a digit string (length
without leading zeros, then text), never with a backtracking regex or
int(): a header of 100,000 digits costs one pass, not a quadratic search,
and int()'s 4,300-digit limit cannot turn it into INTERNAL.
"""

from __future__ import annotations

from tokenwire.server.core.errors import InvalidArgument

MAX_VERSION_CHARS = 256  # as control/checks.py's check_version and weight_bounds
MAX_LAG_CHARS = 20  # a lag in updates: an int64 at most, with a sign


def split_number(name: str) -> tuple[str, str] | None:
    """(prefix, digits) of a name ending in ASCII digits; None otherwise."""
    i = len(name)
    while i and "0" <= name[i - 1] <= "9":
        i -= 1
    return None if i == len(name) else (name[:i], name[i:])


def number_at_least(digits: str, other: str) -> bool:
    """Whether the ASCII digit string `digits` is >= `other` as numbers."""
    a, b = digits.lstrip("0"), other.lstrip("0")
    return (len(a), a) >= (len(b), b)


def check_header_version(value: str, param: str) -> str:
    """A version name from metadata: at most MAX_VERSION_CHARS characters
    (no version longer than that can be served: check_version)."""
    if len(value) > MAX_VERSION_CHARS:
        raise InvalidArgument(
            f"{param} must be at most {MAX_VERSION_CHARS} characters (a weight version name)",
            param=param, reason="VALUE_TOO_LONG")
    return value


def lag_from_text(text: str, param: str) -> int:
    """A lag in updates from metadata: an optionally signed run of ASCII
    digits (a negative one is left for bound_from to refuse)."""
    s = text.strip()
    if len(s) > MAX_LAG_CHARS:
        raise InvalidArgument(f"{param} must be an integer number of updates of at most "
                              f"{MAX_LAG_CHARS} characters", param=param, reason="VALUE_TOO_LONG")
    digits = s[1:] if s[:1] in ("-", "+") else s
    if not digits or not (digits.isascii() and digits.isdigit()):
        raise InvalidArgument(f"{param} must be an integer number of updates; got {text!r}",
                              param=param, reason="INVALID_FORMAT")
    return -int(digits) if s[0] == "-" else int(digits)
