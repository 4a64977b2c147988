"""Admission: the request and token limits, and the counts given back."""

from __future__ import annotations

import grpc
import pytest

from tokenwire.server.core.admission import RETRY_AFTER_SECONDS, Admission, Limits
from tokenwire.server.core.errors import ResourceExhausted


def test_request_limit_refuses_the_next_request_and_counts_it_back() -> None:
    adm = Admission(max_requests=2, max_tokens=0)
    with adm.hold(10), adm.hold(10):
        assert (adm.requests, adm.tokens) == (2, 20)
        with pytest.raises(ResourceExhausted) as exc, adm.hold(1):
            pass
        assert exc.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert exc.value.retry_after == RETRY_AFTER_SECONDS
        assert "2 requests in flight (limit 2)" in exc.value.message
        assert (adm.requests, adm.tokens) == (2, 20)  # a refusal holds nothing
    assert (adm.requests, adm.tokens) == (0, 0)
    with adm.hold(5):
        assert adm.requests == 1


def test_token_limit_counts_prompt_and_new_tokens_of_requests_in_flight() -> None:
    adm = Admission(max_requests=0, max_tokens=100)
    with adm.hold(60):
        with adm.hold(40):
            assert adm.tokens == 100
        with pytest.raises(ResourceExhausted) as exc, adm.hold(41):
            pass
        assert "60 tokens admitted, this request needs 41 (limit 100)" in exc.value.message


def test_a_lone_request_larger_than_the_token_limit_is_admitted() -> None:
    # The engine, not admission, rejects what can never fit; an idle server
    # takes one big request rather than refusing it forever.
    adm = Admission(max_requests=0, max_tokens=100)
    with adm.hold(500):
        assert adm.tokens == 500


def test_counts_come_back_when_the_request_fails() -> None:
    adm = Admission(max_requests=4, max_tokens=1000)
    with pytest.raises(RuntimeError), adm.hold(300):
        raise RuntimeError("engine failure")
    assert (adm.requests, adm.tokens) == (0, 0)


def test_zero_limits_mean_unlimited() -> None:
    adm = Admission(max_requests=0, max_tokens=0)
    with adm.hold(10**9), adm.hold(10**9):
        assert adm.requests == 2


# -- per-tenant caps (issue #23 item 7) ---------------------------------------


def test_a_tenant_at_its_cap_is_refused_while_others_are_admitted() -> None:
    adm = Admission(max_requests=10, max_tokens=0, tenants={"a": Limits(max_requests=2)})
    with adm.hold(10, "a"), adm.hold(10, "a"):
        with pytest.raises(ResourceExhausted) as exc, adm.hold(1, "a"):
            pass
        assert exc.value.reason == "TENANT_TOO_MANY_REQUESTS"
        assert exc.value.retry_after == RETRY_AFTER_SECONDS
        assert "tenant 'a'" in exc.value.message and "(limit 2)" in exc.value.message
        # Another tenant, a tenant without caps, and no tenant: admitted.
        with adm.hold(10, "b"), adm.hold(10, None):
            assert adm.requests == 4 and adm.by_tenant["a"].requests == 2
    assert adm.requests == 0 and not adm.by_tenant  # counted back, nothing kept
    with adm.hold(1, "a"):  # room again
        pass


def test_a_tenant_token_cap_counts_its_own_tokens_only() -> None:
    adm = Admission(max_requests=0, max_tokens=0, tenants={"a": Limits(max_tokens=100)})
    with adm.hold(60, "a"), adm.hold(1000, "b"):
        with pytest.raises(ResourceExhausted) as exc, adm.hold(41, "a"):
            pass
        assert exc.value.reason == "TENANT_TOO_MANY_TOKENS"
        with adm.hold(40, "a"):
            assert adm.by_tenant["a"].tokens == 100


def test_the_server_limit_still_holds_for_tenants_under_their_cap() -> None:
    adm = Admission(max_requests=1, max_tokens=0, tenants={"a": Limits(max_requests=5)})
    with adm.hold(1, "b"):
        with pytest.raises(ResourceExhausted) as exc, adm.hold(1, "a"):
            pass
        assert exc.value.reason == "TOO_MANY_REQUESTS"
        assert "a" not in adm.by_tenant  # a refusal holds nothing
