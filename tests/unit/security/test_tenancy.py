"""Tenancy from the credential (issue #11 items 4 and 5): API keys map to
tenants and priority ranges from a file; a tenant's cache domain is always
applied and cannot be named by anyone else; x-tenant-id counts only from a
trusted hop; priorities are clamped to the caller's range."""

from __future__ import annotations

import collections.abc

import grpc
import pytest

from tests.rpc import chat_request
from tests.servers import ThreadServer, fake_serving
from tests.session_rpc import RawSession, start_chat
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.security.tenancy import Tenancy, load_keys
from tokenwire.v1 import generate_pb2, service_pb2_grpc

KEYS = """
[[keys]]
key = "sk-alpha-one"
tenant = "alpha"
priority = [-5, 5]

[[keys]]
key = "sk-alpha-two"
tenant = "alpha"

[[keys]]
key = "sk-beta-0001"
tenant = "beta"
"""


def _auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


@pytest.fixture(scope="module")
def tenant_server(tmp_path_factory) -> collections.abc.Iterator[tuple[ThreadServer, FakeEngine]]:
    path = tmp_path_factory.mktemp("keys") / "keys.toml"
    path.write_text(KEYS)
    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, api_keys_file=str(path), api_key="sk-plain-key",
                      min_priority=0, max_priority=100) as server:
        yield server, engine


@pytest.fixture
def stub(tenant_server):
    with grpc.insecure_channel(tenant_server[0].address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


def _salt(stub, engine, key: str, salt: str = "", **headers: str) -> str | None:
    metadata = _auth(key) + tuple(headers.items())
    stub.CreateChatCompletion(
        chat_request(max_tokens=1, cache_salt=salt), metadata=metadata, timeout=10
    )
    return engine.requests[-1].cache_salt


def test_keys_of_one_tenant_share_a_cache_domain_others_do_not(tenant_server, stub) -> None:
    engine = tenant_server[1]
    one, two = _salt(stub, engine, "sk-alpha-one"), _salt(stub, engine, "sk-alpha-two")
    beta = _salt(stub, engine, "sk-beta-0001")
    assert one == two and one is not None and one != beta
    assert "alpha" not in one  # the prefix is secret, not the tenant's name
    # A request's own salt stays inside the tenant's domain.
    assert _salt(stub, engine, "sk-alpha-one", "user-7") == f"{one}:user-7"


def test_no_caller_can_name_another_tenants_salt(tenant_server, stub) -> None:
    engine = tenant_server[1]
    alpha = _salt(stub, engine, "sk-alpha-one")
    assert _salt(stub, engine, "sk-beta-0001", alpha) != alpha
    assert _salt(stub, engine, "sk-plain-key", alpha) == alpha  # no tenant: its own salt ...
    assert _salt(stub, engine, "sk-alpha-one", "x") != _salt(stub, engine, "sk-plain-key", "x")
    # ... and a header does not make the caller a tenant without --trust-tenant-header.
    assert _salt(stub, engine, "sk-plain-key", "", **{"x-tenant-id": "alpha"}) is None
    assert _salt(stub, engine, "sk-beta-0001", "", **{"x-tenant-id": "alpha"}) != alpha


def test_unknown_keys_are_refused(stub) -> None:
    with pytest.raises(grpc.RpcError) as info:
        stub.CreateChatCompletion(
            chat_request(max_tokens=1), metadata=_auth("sk-nobody-00"), timeout=10
        )
    assert info.value.code() == grpc.StatusCode.UNAUTHENTICATED


@pytest.mark.parametrize(("key", "asked", "got"), [
    ("sk-alpha-one", -(2**31), -5), ("sk-alpha-one", 3, 3), ("sk-alpha-one", 50, 5),
    ("sk-alpha-two", -1, 0), ("sk-alpha-two", 10**6, 100),  # the server's range
    ("sk-plain-key", -(2**31), 0),
])
def test_priority_is_clamped_to_the_keys_range(tenant_server, stub, key, asked, got) -> None:
    engine = tenant_server[1]
    stub.CreateChatCompletion(
        chat_request(max_tokens=1, priority=asked), metadata=_auth(key), timeout=10
    )
    assert engine.requests[-1].priority == got
    stub.Generate(
        generate_pb2.GenerateRequest(token_ids=[5, 6], priority=asked),
        metadata=_auth(key),
        timeout=10,
    )
    assert engine.requests[-1].priority == got


def test_session_requests_run_in_the_tenant_domain(tenant_server, stub) -> None:
    engine = tenant_server[1]
    alpha = _salt(stub, engine, "sk-alpha-one")
    s = RawSession(stub, metadata=_auth("sk-alpha-two"))
    s.send(start_chat("a", max_tokens=2, cache_salt="conv"))
    s.until_terminal("a")
    assert engine.requests[-1].cache_salt == f"{alpha}:conv"
    s.close()


def test_trusted_header_names_the_tenant() -> None:
    tenancy = Tenancy(trust_tenant_header=True, secret=b"s" * 32)
    caller = tenancy.caller([("x-tenant-id", "gamma")], trusted_hop=True)
    assert caller.salt_prefix == tenancy.salt_prefix("gamma") != tenancy.salt_prefix("delta")
    # Not from a trusted hop (auth.Proxies), or not trusted at all: no tenant.
    assert tenancy.caller([("x-tenant-id", "gamma")]).salt_prefix is None
    untrusting = Tenancy(secret=b"s" * 32)
    assert untrusting.caller([("x-tenant-id", "gamma")], trusted_hop=True).salt_prefix is None


@pytest.mark.parametrize(("text", "error"), [
    ("", "one or more [[keys]]"),
    ('[[keys]]\nkey = "short"\ntenant = "a"', "at least 8 characters"),
    ('[[keys]]\nkey = "sk-12345678"', "tenant must be"),
    ('[[keys]]\nkey = "sk-12345678"\ntenant = "a"\npriority = [5, 1]', "low <= high"),
    ('[[keys]]\nkey = "sk-12345678"\ntenant = "a"\nrole = "x"', "unknown field"),
    ('[[keys]]\nkey = "sk-12345678"\ntenant = "a"\n[[keys]]\nkey = "sk-12345678"\ntenant = "b"',
     "listed twice"),
])
def test_bad_key_files_are_refused_at_start(tmp_path, text, error) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=error.replace("[", r"\[")):
        load_keys(str(path))


# -- per-tenant admission caps (issue #23 item 7) -------------------------------

CAPPED_KEYS = """
[[keys]]
key = "sk-alpha-one"
tenant = "alpha"
max_concurrent_requests = 1

[[keys]]
key = "sk-alpha-two"
tenant = "alpha"

[[keys]]
key = "sk-beta-0001"
tenant = "beta"
"""


def test_a_tenant_at_its_cap_is_refused_while_another_is_admitted(tmp_path) -> None:
    from tests.rpc import error_info

    path = tmp_path / "keys.toml"
    path.write_text(CAPPED_KEYS)
    engine = FakeEngine(max_model_len=512, token_delay=0.05)  # a long request runs ~20 s
    with fake_serving(engine, api_keys_file=str(path)) as server:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            long = stub.StreamChatCompletion(chat_request(max_tokens=400, ignore_eos=True),
                                             metadata=_auth("sk-alpha-one"), timeout=60)
            next(long)  # alpha's one slot is taken
            for key in ("sk-alpha-one", "sk-alpha-two"):  # the cap is the tenant's
                with pytest.raises(grpc.RpcError) as info:
                    stub.CreateChatCompletion(chat_request(max_tokens=1), metadata=_auth(key),
                                              timeout=10)
                assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert error_info(info.value).reason == "TENANT_TOO_MANY_REQUESTS"
            ok = stub.CreateChatCompletion(chat_request(max_tokens=1),
                                           metadata=_auth("sk-beta-0001"), timeout=10)
            assert ok.choices[0].finish_reason == "length"
            long.cancel()


def test_a_tenant_named_by_a_trusted_hop_gets_its_caps(tmp_path) -> None:
    """x-tenant-id from a trusted hop (here a local peer, no --trusted-proxy)
    names the tenant for admission too, not only for its cache domain."""
    from tests.rpc import error_info

    path = tmp_path / "keys.toml"
    path.write_text(CAPPED_KEYS)
    engine = FakeEngine(max_model_len=512, token_delay=0.05)
    with fake_serving(engine, api_keys_file=str(path), api_key="sk-the-hop-key",
                      trust_tenant_header=True) as server:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            named = (*_auth("sk-the-hop-key"), ("x-tenant-id", "alpha"))
            long = stub.StreamChatCompletion(chat_request(max_tokens=400, ignore_eos=True),
                                             metadata=named, timeout=60)
            next(long)
            with pytest.raises(grpc.RpcError) as info:
                stub.CreateChatCompletion(
                    chat_request(max_tokens=1), metadata=_auth("sk-alpha-two"), timeout=10
                )
            assert error_info(info.value).reason == "TENANT_TOO_MANY_REQUESTS"
            long.cancel()


@pytest.mark.parametrize(("text", "error"), [
    ('[[keys]]\nkey = "sk-12345678"\ntenant = "a"\nmax_concurrent_requests = 0',
     r"keys\[0\].max_concurrent_requests must be a positive integer"),
    ('[[keys]]\nkey = "sk-12345678"\ntenant = "a"\nmax_admitted_tokens = "many"',
     r"keys\[0\].max_admitted_tokens must be a positive integer"),
    ('[[keys]]\nkey = "sk-12345678"\ntenant = "a"\nmax_concurrent_requests = 2\n'
     '[[keys]]\nkey = "sk-87654321"\ntenant = "a"\nmax_concurrent_requests = 3',
     r"keys\[1\]: tenant 'a' has other caps in keys\[0\]"),
])
def test_bad_tenant_caps_name_the_entry(tmp_path, text, error) -> None:
    path = tmp_path / "keys.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match=error):
        load_keys(str(path))


def test_a_tenants_caps_come_from_any_of_its_keys(tmp_path) -> None:
    from tokenwire.server.core.admission import Limits

    path = tmp_path / "keys.toml"
    path.write_text(CAPPED_KEYS)
    tenancy = Tenancy(load_keys(str(path)), secret=b"s" * 32)
    assert tenancy.limits == {"alpha": Limits(max_requests=1)}
    callers = [tenancy.caller(_auth(k)) for k in ("sk-alpha-one", "sk-alpha-two", "sk-beta-0001")]
    assert [c.tenant for c in callers] == ["alpha", "alpha", "beta"]


def test_the_shared_salt_secret_is_the_operators_when_given(monkeypatch) -> None:
    import os

    from tokenwire.server.security.tenancy import SECRET_ENV, share_secret

    monkeypatch.setenv(SECRET_ENV, "the-operators-secret")
    share_secret()
    assert os.environ[SECRET_ENV] == "the-operators-secret"
    monkeypatch.delenv(SECRET_ENV)
    share_secret()  # else one is drawn, for every process started after
    drawn = os.environ[SECRET_ENV]
    assert len(bytes.fromhex(drawn)) == 32
    share_secret()  # kept: a second call draws nothing new
    assert os.environ[SECRET_ENV] == drawn
