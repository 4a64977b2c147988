"""errors.py: every error names its cause (AIP-193), and one status carries
it both as grpcio-status rich details and as plain trailers."""

from __future__ import annotations

import ast
import pathlib
import re

import grpc
import pytest
from google.rpc import error_details_pb2, status_pb2

import tokenwire.server
from tokenwire.server.core import errors

ROOT = pathlib.Path(tokenwire.server.__file__).parent
ERROR_CLASSES = {
    name for name, value in vars(errors).items()
    if isinstance(value, type) and issubclass(value, errors.TokenwireError)
}
STATUS_NAMES = set(grpc.StatusCode.__members__)
# The one reason allowed to repeat a status name: a bug whose cause is unknown.
UNKNOWN_CAUSE = {"INTERNAL"}


def _error_calls():
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in ERROR_CLASSES:
                yield f"{path.relative_to(ROOT)}:{node.lineno}", node


CALLS = list(_error_calls())


def test_the_scan_finds_the_error_sites() -> None:
    assert len(CALLS) > 60


@pytest.mark.parametrize(("where", "call"), CALLS, ids=[c[0] for c in CALLS])
def test_every_error_names_its_cause(where: str, call: ast.Call) -> None:
    reason = next((k.value for k in call.keywords if k.arg == "reason"), None)
    assert reason is not None, f"{where}: an error without reason="
    if isinstance(reason, ast.Constant):
        assert re.fullmatch(r"[A-Z][A-Z0-9_]{0,62}", reason.value), where  # AIP-193 form
        assert reason.value not in STATUS_NAMES - UNKNOWN_CAUSE, (
            f"{where}: reason {reason.value} repeats the status code; name the cause"
        )


def _trailers(status: grpc.Status) -> dict[str, object]:
    return dict(status.trailing_metadata)


def test_status_carries_rich_details_and_plain_trailers() -> None:
    err = errors.InvalidArgument("max_tokens must be >= 1, got 0", param="max_tokens",
                                 reason="VALUE_OUT_OF_RANGE")
    status = errors.to_status(err)
    assert status.code == grpc.StatusCode.INVALID_ARGUMENT
    assert status.details == "max_tokens must be >= 1, got 0"
    trailers = _trailers(status)
    assert trailers["tokenwire-reason"] == "VALUE_OUT_OF_RANGE"
    assert trailers["tokenwire-param"] == "max_tokens"
    assert "retry-after-ms" not in trailers
    rich = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    assert (rich.code, rich.message) == (3, err.message)
    info, bad = error_details_pb2.ErrorInfo(), error_details_pb2.BadRequest()
    assert rich.details[0].Unpack(info) and rich.details[1].Unpack(bad)
    assert (info.reason, info.domain, dict(info.metadata)) == (
        "VALUE_OUT_OF_RANGE", "tokenwire.dev", {"param": "max_tokens"})
    violation = bad.field_violations[0]
    assert (violation.field, violation.reason, violation.description) == (
        "max_tokens", "VALUE_OUT_OF_RANGE", err.message)


def test_retry_hint_is_retry_info_and_a_plain_trailer() -> None:
    err = errors.ResourceExhausted("full", reason="TOO_MANY_REQUESTS", retry_after=0.25)
    status = errors.to_status(err)
    trailers = _trailers(status)
    assert trailers["retry-after-ms"] == "250"
    assert "tokenwire-param" not in trailers
    rich = status_pb2.Status.FromString(trailers["grpc-status-details-bin"])
    retry = error_details_pb2.RetryInfo()
    assert len(rich.details) == 2 and rich.details[1].Unpack(retry)  # no BadRequest
    assert retry.retry_delay.ToMilliseconds() == 250


def test_a_non_ascii_param_is_escaped_in_the_plain_trailer() -> None:
    err = errors.InvalidArgument("bad", param="tools[0].function.caf\u00e9", reason="X")
    assert _trailers(errors.to_status(err))["tokenwire-param"] == "tools[0].function.caf\\xe9"


def test_unexpected_exceptions_become_internal_with_an_incident_id() -> None:
    err = errors.classify(KeyError("/secret/path"))
    assert err.code == grpc.StatusCode.INTERNAL and err.reason == "INTERNAL"
    assert "/secret/path" not in err.message and "incident" in err.message


def test_the_contract_lists_every_reason() -> None:
    doc = (ROOT.parents[2] / "docs" / "contract.md").read_text()
    used = {
        reason.value
        for _, call in CALLS
        for reason in [next((k.value for k in call.keywords if k.arg == "reason"), None)]
        if isinstance(reason, ast.Constant)
    }
    missing = sorted(r for r in used if f"`{r}`" not in doc)
    assert not missing, f"docs/contract.md does not list {missing}"
