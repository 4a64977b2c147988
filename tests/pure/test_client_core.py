"""The client's sans-I/O core, driven directly: one call's attempts (what
each attempt is sent with; after a failure the wait or the typed error)."""

from __future__ import annotations

import grpc
import pytest

from tokenwire.client import RetryPolicy, UnavailableError
from tokenwire.client._common import Attempts, ClientCore, Deadline
from tokenwire.client.errors import ResourceExhaustedError, TokenwireError


class FakeRpcError(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str = "nope"):
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


POLICY = RetryPolicy(max_attempts=3, initial_backoff=0.25, max_backoff=4.0, multiplier=2.0)


def _attempts(timeout: float | None = None, policy: RetryPolicy = POLICY) -> Attempts:
    return Attempts(policy, Deadline(timeout), (("authorization", "Bearer k"),))


def test_each_attempt_carries_the_metadata_and_the_remaining_deadline() -> None:
    call = _attempts(timeout=30.0)
    kwargs = call.kwargs()
    assert kwargs["metadata"] == (("authorization", "Bearer k"),)
    assert 0 < kwargs["timeout"] <= 30.0
    assert _attempts().kwargs()["timeout"] is None


def test_unavailable_is_retried_with_backoff_until_attempts_run_out() -> None:
    call = _attempts()
    first = call.failed(FakeRpcError(grpc.StatusCode.UNAVAILABLE))
    assert 0.125 <= first <= 0.25
    second = call.failed(FakeRpcError(grpc.StatusCode.RESOURCE_EXHAUSTED))
    assert 0.25 <= second <= 0.5
    with pytest.raises(UnavailableError) as exc:
        call.failed(FakeRpcError(grpc.StatusCode.UNAVAILABLE, "third"))
    assert exc.value.message == "third" and call.attempt == 3


@pytest.mark.parametrize(("code", "received", "typed"), [
    (grpc.StatusCode.INVALID_ARGUMENT, False, TokenwireError),
    # a stream already gave a message
    (grpc.StatusCode.RESOURCE_EXHAUSTED, True, ResourceExhaustedError),
])
def test_unsafe_failures_raise_the_typed_error_at_once(
    code: grpc.StatusCode, received: bool, typed: type[TokenwireError]
) -> None:
    call = _attempts()
    with pytest.raises(typed) as exc:
        call.failed(FakeRpcError(code), received=received)
    assert exc.value.code == code and call.attempt == 1


def test_no_retry_past_the_deadline() -> None:
    call = _attempts(timeout=0.01)  # the shortest backoff (0.125 s) would outlive it
    with pytest.raises(UnavailableError):
        call.failed(FakeRpcError(grpc.StatusCode.UNAVAILABLE))


def test_operator_calls_carry_the_admin_key_when_there_is_one() -> None:
    def core(admin: str | None) -> ClientCore:
        return ClientCore("t", timeout=None, retry=None, tenant="acme", metadata=(), api_key="inf",
                          tls=False, root_certificates=None, admin_api_key=admin)

    def auth(a: Attempts) -> list[str]:
        return [v for k, v in a.metadata if k == "authorization"]

    assert auth(core("adm")._attempts(None, None)) == ["Bearer inf"]
    assert auth(core("adm")._attempts(None, [("x", "1")], operator=True)) == ["Bearer adm"]
    assert auth(core("")._attempts(None, None, operator=True)) == ["Bearer inf"]
    assert ("x-tenant-id", "acme") in core("adm")._attempts(None, None).metadata
