"""core/weight_bounds.py: which requests a bound admits, and which running
ones an update breaks (issue #26). Versions are ordered by the update
generation, never by name."""

from __future__ import annotations

import pytest

from tokenwire.server.core.errors import InvalidArgument, Unavailable
from tokenwire.server.core.weight_bounds import WeightBound, WeightBounds, bound_from, pick_bound


@pytest.mark.parametrize(("exact", "lag", "param", "reason"), [
    ("", None, "exact_weight_version", "EMPTY_VALUE"),
    (None, -1, "max_weight_lag", "VALUE_OUT_OF_RANGE"),
    ("v1", 2, "max_weight_lag", "FIELDS_CONFLICT"),
    ("x" * 257, None, "exact_weight_version", "VALUE_TOO_LONG"),
])
def test_bad_bounds_name_the_field(exact, lag, param, reason) -> None:
    with pytest.raises(InvalidArgument) as exc:
        bound_from(exact, lag)
    assert (exc.value.param, exc.value.reason) == (param, reason)


def test_no_fields_no_bound_and_the_body_wins() -> None:
    assert bound_from(None, None) is None
    body, header = WeightBound(max_lag=0), WeightBound(exact_version="v1")
    assert pick_bound(body, header) is body
    assert pick_bound(None, header) is header


def test_exact_admits_only_its_version_and_ends_at_any_weight_change() -> None:
    b = WeightBounds()
    with pytest.raises(Unavailable) as exc:
        b.admit("r0", WeightBound(exact_version="v1"), version="v2", generation=3)
    assert exc.value.reason == "WEIGHT_VERSION_MISMATCH"
    b.admit("r1", WeightBound(exact_version="v1"), version="v1", generation=3)
    assert b.broken(version="v1", generation=3) == []
    # Same name, new weights (a load without a new label): the generation says so.
    assert b.broken(version="v1", generation=4) == ["r1"]
    assert b.get("r1").ended.startswith("WEIGHT_VERSION_CHANGED: weight version 'v1' -> 'v1'")
    assert b.broken(version="v2", generation=5) == [], "ended once"
    assert b.ended == {"WEIGHT_VERSION_CHANGED": 1}
    assert b.release("r1") is not None and len(b) == 0


def test_lag_ends_at_the_update_that_makes_it_n_plus_1_behind() -> None:
    b = WeightBounds()
    b.admit("r", WeightBound(max_lag=1), version="a", generation=7)
    assert b.broken(version="b", generation=8) == []
    assert b.broken(version="c", generation=9) == ["r"]
    assert b.get("r").ended.startswith("WEIGHT_LAG_EXCEEDED:")
    assert b.ended == {"WEIGHT_LAG_EXCEEDED": 1}


def test_lag_admission_against_the_announced_version() -> None:
    b = WeightBounds()
    b.announced = "v9"
    with pytest.raises(Unavailable) as exc:
        b.admit("r", WeightBound(max_lag=0), version="v8", generation=1)
    assert exc.value.reason == "WEIGHT_LAG_BEHIND"
    b.admit("r", WeightBound(max_lag=1), version="v8", generation=1)
    b.admit("s", WeightBound(max_lag=0), version="v9", generation=2)
    b.admit("t", None, version="v8", generation=1)
    assert len(b) == 2, "unbounded requests are not tracked"
