"""Bounded staleness (issue #26): the weights a request may run on.

A request may carry one bound (gRPC body fields, or the call's metadata):

* ``exact_weight_version``: it runs only on that version, within one update
  generation. Admitted only while the replica serves that version; ended at
  the first weight change after it started.
* ``max_weight_lag`` (in updates): its oldest token may fall at most N
  updates behind the current weights. Admitted unless the replica is more
  than N updates behind the newest version announced to it; ended at the
  update that makes it N + 1 behind.

Versions are ordered by the update generation (ServingState.generation:
+1 on every weight change), never by name. A request's oldest token counts
as sampled at the generation it was admitted at (a request admitted during
a pause runs on the weights that follow it, so this errs on the safe side).

WeightBounds holds the running bounded requests: the engine wrapper
(engine/guarded.py) admits and releases them, the control plane asks it
which ones an update breaks (``broken``) and aborts those in the engine
before generation resumes, so no token of another version is sampled. Pure
logic, no I/O.
"""

from __future__ import annotations

import collections
import dataclasses

from tokenwire.server.core.errors import InvalidArgument, Unavailable
from tokenwire.server.core.weight_versions import MAX_VERSION_CHARS, lag_from_text

EXACT = "exact_weight_version"
LAG = "max_weight_lag"
# Why a running request was ended (its stop_reason starts with it; counted
# per reason in GetControlState and the metrics).
ENDED_VERSION_CHANGED = "WEIGHT_VERSION_CHANGED"
ENDED_LAG_EXCEEDED = "WEIGHT_LAG_EXCEEDED"
ENDED_REASONS = (ENDED_VERSION_CHANGED, ENDED_LAG_EXCEEDED)


@dataclasses.dataclass(frozen=True)
class WeightBound:
    """One request's bound: exactly one of the two is set."""

    exact_version: str | None = None
    max_lag: int | None = None
    # The request field (or header) each came from, for error messages.
    exact_param: str = EXACT
    lag_param: str = LAG


def bound_from(
    exact: str | None, lag: int | None, *, exact_param: str = EXACT, lag_param: str = LAG,
) -> WeightBound | None:
    """The bound a request's fields ask for (None: unbounded). Refuses an
    empty version, a negative lag and both at once, naming the field."""
    if exact is not None:
        if not exact:
            raise InvalidArgument(f"{exact_param} must not be empty (leave it unset for no bound)",
                                  param=exact_param, reason="EMPTY_VALUE")
        if len(exact) > MAX_VERSION_CHARS:
            raise InvalidArgument(f"{exact_param} is at most {MAX_VERSION_CHARS} characters",
                                  param=exact_param, reason="VALUE_TOO_LONG")
    if lag is not None and lag < 0:
        raise InvalidArgument(f"{lag_param} must be >= 0 (updates); got {lag}", param=lag_param,
                              reason="VALUE_OUT_OF_RANGE")
    if exact is not None and lag is not None:
        raise InvalidArgument(f"give {exact_param} or {lag_param}, not both", param=lag_param,
                              reason="FIELDS_CONFLICT")
    if exact is None and lag is None:
        return None
    return WeightBound(exact, lag, exact_param, lag_param)


def bound_from_text(exact: str | None, lag: str | None, *, exact_param: str,
                    lag_param: str) -> WeightBound | None:
    """bound_from for metadata values (text): a lag that is not an integer
    (ASCII digits, at most MAX_LAG_CHARS) is refused naming the header."""
    number = None if lag is None else lag_from_text(lag, lag_param)
    return bound_from(exact, number, exact_param=exact_param, lag_param=lag_param)


def pick_bound(body: WeightBound | None, header: WeightBound | None) -> WeightBound | None:
    """The body's bound wins over the metadata's (like nvext.dp_rank)."""
    return body if body is not None else header


def version_salt(salt: str | None, version: str, generation: int) -> str:
    """A cache salt that also names the weights (--salt-cache-by-version):
    prefix-cache blocks computed by other weights never match."""
    weights = f"weights:{generation}:{version}"
    return weights if salt is None else f"{salt}|{weights}"


@dataclasses.dataclass
class Running:
    """A bounded request in flight."""

    bound: WeightBound
    generation: int  # at admission: its oldest token's generation, at most
    version: str  # the version it was admitted on
    ended: str = ""  # once ended by its bound: its stop_reason


class WeightBounds:
    """The running bounded requests of one serving process, and how many a
    bound ended, by reason."""

    def __init__(self) -> None:
        self._running: dict[str, Running] = {}
        self.ended: collections.Counter[str] = collections.Counter()
        # The newest version announced to this replica (a fleet update's
        # target, before it loads); "" when none is pending.
        self.announced = ""

    def __len__(self) -> int:
        return len(self._running)

    def behind(self, version: str) -> int:
        """Updates this replica is behind the newest announced version."""
        return 1 if self.announced and self.announced != version else 0

    def admit(self, request_id: str, bound: WeightBound | None, *, version: str,
              generation: int) -> None:
        """Refuse (retry-safe UNAVAILABLE: another replica may serve it) a
        request its bound excludes here, else remember it while it runs."""
        if bound is None:
            return
        if bound.exact_version is not None and bound.exact_version != version:
            raise Unavailable(
                f"this replica serves weight version '{version}'; the request runs only on "
                f"'{bound.exact_version}'",
                param=bound.exact_param, reason="WEIGHT_VERSION_MISMATCH")
        if bound.max_lag is not None and self.behind(version) > bound.max_lag:
            raise Unavailable(
                f"this replica serves weight version '{version}', {self.behind(version)} update(s) "
                f"behind the announced '{self.announced}'; the request allows "
                f"{bound.max_lag}", param=bound.lag_param, reason="WEIGHT_LAG_BEHIND")
        self._running[request_id] = Running(bound, generation, version)

    def release(self, request_id: str) -> Running | None:
        """Forget a finished request; its record (None if it had no bound)."""
        return self._running.pop(request_id, None)

    def get(self, request_id: str) -> Running | None:
        return self._running.get(request_id)

    def broken(self, *, version: str, generation: int) -> list[str]:
        """The running requests the weights now served (`version` at
        `generation`) break, each marked ended (once) with its stop_reason
        naming the change, and counted."""
        out = []
        for request_id, r in self._running.items():
            if r.ended:
                continue
            change = (f"{r.version!r} -> {version!r} "
                      f"(update generation {r.generation} -> {generation})")
            b = r.bound
            if b.exact_version is not None and (
                    generation != r.generation or version != b.exact_version):
                r.ended = (f"{ENDED_VERSION_CHANGED}: weight version {change}; "
                           f"the request ran only on {b.exact_version!r}")
            elif b.max_lag is not None and generation - r.generation > b.max_lag:
                r.ended = (f"{ENDED_LAG_EXCEEDED}: weight version {change}; "
                           f"the request allows a lag of {b.max_lag} update(s)")
            else:
                continue
            self.ended[r.ended.split(":", 1)[0]] += 1
            out.append(request_id)
        return out
