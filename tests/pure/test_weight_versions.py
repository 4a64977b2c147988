"""ServingState.serves_at_least: the rule behind x-min-weight-version; the
label of a load that named no version."""

from __future__ import annotations

import pytest

from tokenwire.server.control.weights import versionless_label
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.weight_versions import (
    MAX_VERSION_CHARS,
    check_header_version,
    lag_from_text,
    number_at_least,
    split_number,
)


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


# -- long names (issue #32 item 11): linear, never int()'s 4,300-digit limit ----

def test_numbers_longer_than_int_allows_compare_as_numbers() -> None:
    big = "1" + "0" * 5000  # 10**5000
    assert state(big).serves_at_least("9" * 5000)
    assert not state(big).serves_at_least("9" * 5001)
    assert state("step-" + big).serves_at_least("step-" + "0" * 9000 + "7")  # leading zeros
    assert not state("7").serves_at_least("8" + "0" * 5000)


def test_a_long_digit_run_without_a_number_at_its_end_is_only_unknown() -> None:
    # The old regex ^(.*?)(\d+)$ tried every split of this name: quadratic.
    assert not state("step-1").serves_at_least("1" * 100_000 + "x")
    assert split_number("1" * 100_000 + "x") is None


@pytest.mark.parametrize(("name", "split"), [
    ("step-12", ("step-", "12")), ("12", ("", "12")), ("v", None), ("", None),
    ("a1b", None), ("x٣", None),  # ASCII digits only
])
def test_split_number(name, split) -> None:
    assert split_number(name) == split


@pytest.mark.parametrize(("a", "b", "at_least"), [
    ("10", "9", True), ("9", "10", False), ("007", "7", True), ("0", "000", True),
    ("123", "124", False),
])
def test_number_at_least(a, b, at_least) -> None:
    assert number_at_least(a, b) is at_least


def test_a_header_version_longer_than_a_name_is_refused_naming_it() -> None:
    assert check_header_version("v" * 256, "x-min-weight-version") == "v" * 256
    with pytest.raises(InvalidArgument) as exc:
        check_header_version("9" * 100_000, "x-min-weight-version")
    assert (exc.value.param, exc.value.reason) == ("x-min-weight-version", "VALUE_TOO_LONG")


@pytest.mark.parametrize(("text", "value", "reason"), [
    ("3", 3, None), (" 12 ", 12, None), ("-1", -1, None), ("+2", 2, None),
    ("9" * 5000, None, "VALUE_TOO_LONG"), ("one", None, "INVALID_FORMAT"),
    ("1_000", None, "INVALID_FORMAT"), ("٣", None, "INVALID_FORMAT"), ("-", None, "INVALID_FORMAT"),
    ("", None, "INVALID_FORMAT"),
])
def test_lag_from_text(text, value, reason) -> None:
    if reason is None:
        assert lag_from_text(text, "x-max-weight-lag") == value
        return
    with pytest.raises(InvalidArgument) as exc:
        lag_from_text(text, "x-max-weight-lag")
    assert (exc.value.param, exc.value.reason) == ("x-max-weight-lag", reason)


def test_a_versionless_loads_label() -> None:
    """Issue 42 L-2 (control/weights.py): `<last named version>#<generation>`,
    never stacked, the failed-load suffix dropped, within the version cap."""
    assert versionless_label("v1", 3) == "v1#3"
    assert versionless_label("v1#3", 4) == "v1#4"
    assert versionless_label("v1#3+failed-load", 5) == "v1#5"
    assert versionless_label("run#a", 2) == "run#a#2"  # not a label of this kind
    assert versionless_label("v#\u0663", 2) == "v#\u0663#2"  # digits are ASCII digits
    assert versionless_label("", 1) == "#1"
    long = versionless_label("x" * MAX_VERSION_CHARS, 12345)
    assert len(long) == MAX_VERSION_CHARS and long.endswith("x#12345")
