"""ServingState.serves_at_least: the rule behind x-min-weight-version."""

from __future__ import annotations

import pytest

from tokenwire.server.core.serving_state import ServingState


def state(*history: str) -> ServingState:
    s = ServingState()
    for version in history:
        s.weight_version = version
    return s


@pytest.mark.parametrize(("history", "required", "ok"), [
    (("7",), "7", True),
    (("7",), "6", True),
    (("7",), "8", False),
    (("7",), "10", False),  # numbers compare as numbers, not text
    (("step-12",), "step-9", True),
    (("step-9",), "step-12", False),
    (("default", "abc", "xyz"), "abc", True),  # served before: older
    (("default", "abc"), "xyz", False),  # never served: newer (or unknown)
    (("run1-step-3",), "run2-step-1", False),  # different prefix: only history counts
    # Rollback X -> W: W was first served before X, so X is newer and refused.
    (("W", "X", "W"), "X", False),
    (("W", "X", "W"), "W", True),
    (("W", "X", "W", "Y"), "X", True),  # Y first served after X
    (("7", "8", "7"), "8", False),
    # A rollback to an older step never served here: the number rule refuses.
    (("8", "7"), "8", False),
    # A failed load's label is newer than the version it poisoned, never the target.
    (("v1", "v1+failed-load"), "v1", True),
    (("step-1", "step-1+failed-load"), "step-2", False),
])
def test_serves_at_least(history, required, ok) -> None:
    assert state(*history).serves_at_least(required) is ok


def test_names_are_remembered_in_the_order_first_served() -> None:
    s = state("a", "b", "a", "c")
    assert s.serves_at_least("b") and s.serves_at_least("a") and s.weight_version == "c"
    s.weight_version = "a"
    assert not s.serves_at_least("b") and not s.serves_at_least("c")
