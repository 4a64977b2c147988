"""ServingState.serves_at_least: the rule behind x-min-weight-version."""

from __future__ import annotations

import pytest

from tokenwire.server.serving_state import ServingState


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
])
def test_serves_at_least(history, required, ok) -> None:
    assert state(*history).serves_at_least(required) is ok


def test_history_keeps_earlier_versions_once_replaced() -> None:
    s = state("a", "b", "b", "c")
    assert list(s.earlier_versions) == ["a", "b"] and s.weight_version == "c"
