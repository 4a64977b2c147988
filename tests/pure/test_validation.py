"""validation.py: each rule refuses with the field named and the cause as
the reason, and passes valid values through unchanged."""

from __future__ import annotations

import math

import pytest

from tokenwire.server.core import validation as v
from tokenwire.server.core.errors import InvalidArgument


def _refused(fn, *args, **kw) -> InvalidArgument:
    with pytest.raises(InvalidArgument) as info:
        fn(*args, **kw)
    return info.value


@pytest.mark.parametrize(("value", "reason"), [(math.nan, "VALUE_NOT_FINITE"),
                                               (math.inf, "VALUE_NOT_FINITE"),
                                               (-0.1, "VALUE_OUT_OF_RANGE"),
                                               (2.5, "VALUE_OUT_OF_RANGE")])
def test_in_range_refuses(value, reason) -> None:
    err = _refused(v.in_range, "top_p", value, 0.0, 2.0)
    assert (err.param, err.reason) == ("top_p", reason) and "top_p" in err.message


def test_in_range_open_low_bound() -> None:
    assert v.in_range("top_p", 1.0, 0.0, 1.0, lo_open=True) == 1.0
    err = _refused(v.in_range, "top_p", 0.0, 0.0, 1.0, lo_open=True)
    assert "> 0.0" in err.message


def test_int_range() -> None:
    assert v.int_range("n", 3, 1, 16) == 3
    assert _refused(v.int_range, "n", 0, 1, 16).message == "n must be >= 1, got 0"
    assert _refused(v.int_range, "n", 17, 1, 16).message == "n must be <= 16, got 17"


def test_token_ids_name_the_position() -> None:
    assert v.token_ids("ids", (1, 2, 9), 10) == [1, 2, 9]
    err = _refused(v.token_ids, "ids", [1, 10], 10)
    assert (err.param, err.reason) == (
        "ids",
        "TOKEN_ID_OUT_OF_VOCAB",
    ) and "ids[1] = 10" in err.message


def test_prompt_fits() -> None:
    v.prompt_fits("p", 9, 10)
    assert _refused(v.prompt_fits, "p", 0, 10).reason == "PROMPT_EMPTY"
    assert _refused(v.prompt_fits, "p", 10, 10).reason == "PROMPT_TOO_LONG"


def test_max_tokens_defaults_to_the_room_left() -> None:
    assert v.max_tokens("max_tokens", None, 6, 10) == 4
    assert v.max_tokens("max_tokens", 4, 6, 10) == 4
    assert _refused(v.max_tokens, "max_tokens", 0, 6, 10).reason == "VALUE_OUT_OF_RANGE"
    err = _refused(v.max_tokens, "max_tokens", 5, 6, 10)
    assert err.reason == "CONTEXT_LENGTH_EXCEEDED" and "at most 4" in err.message
