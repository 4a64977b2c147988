"""Who may call what (issue #23, item 1 and the access LOWs), on the fake
engine, calling the server directly: control from a proxy needs the admin
key; --trusted-proxy peers are proxies; x-tenant-id counts only from a
trusted hop; GetStats is the operator's; control on a non-loopback address
without an admin key refuses to start (`serve` and `up`)."""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib

import grpc
import pytest

from tests.rpc import chat_request, error_info
from tests.servers import fake_serving, free_port
from tokenwire.client import AsyncClient, Client, TokenwireError
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.security.auth import Proxies, check_exposure, is_local_peer
from tokenwire.v1 import control_pb2, control_pb2_grpc, models_pb2, service_pb2_grpc

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


def _auth(key: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {key}"),)


@contextlib.contextmanager
def _server(**kw) -> collections.abc.Iterator[tuple[grpc.Channel, FakeEngine]]:
    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, **kw) as server, grpc.insecure_channel(server.address) as channel:
        yield channel, engine


@pytest.fixture(scope="module")
def keyless_control(transport: str) -> collections.abc.Iterator[grpc.Channel]:
    with _server(enable_control=True, grpc_transport=transport) as (channel, _):
        yield channel


def _refused(call, code: grpc.StatusCode, reason: str) -> None:
    with pytest.raises(grpc.RpcError) as info:
        call()
    assert info.value.code() == code, info.value
    assert error_info(info.value).reason == reason


@pytest.mark.parametrize("header", [
    ("x-forwarded-for", "203.0.113.9"), ("x-envoy-expected-rq-timeout-ms", "1000"),
    ("x-envoy-internal", "true"), ("forwarded", "for=203.0.113.9"),
])
def test_control_through_a_proxy_needs_the_admin_key(keyless_control, header) -> None:
    control = control_pb2_grpc.ControlServiceStub(keyless_control)
    for method, request in ((control.Pause, control_pb2.PauseRequest(mode="keep")),
                            (control.IsPaused, control_pb2.IsPausedRequest()),
                            (control.Resume, control_pb2.ResumeRequest())):
        _refused(lambda: method(request, metadata=(header,), timeout=10),  # noqa: B023
                 grpc.StatusCode.PERMISSION_DENIED, "CONTROL_VIA_PROXY")
    # Not paused, and a local caller without a proxy's headers still controls.
    assert not control.IsPaused(control_pb2.IsPausedRequest(), timeout=10).is_paused
    assert control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10).state.paused
    assert not control.Resume(control_pb2.ResumeRequest(), timeout=10).state.paused


def test_a_trusted_proxy_peer_is_a_proxy(transport) -> None:
    with _server(enable_control=True, trusted_proxy=("10.0.0.0/8, 127.0.0.1",),
                 grpc_transport=transport) as (channel, _):
        control = control_pb2_grpc.ControlServiceStub(channel)
        _refused(lambda: control.Pause(control_pb2.PauseRequest(), timeout=10),
                 grpc.StatusCode.PERMISSION_DENIED, "CONTROL_VIA_PROXY")
        _refused(lambda: control.IsPaused(control_pb2.IsPausedRequest(), timeout=10),
                 grpc.StatusCode.PERMISSION_DENIED, "CONTROL_VIA_PROXY")


def test_with_an_admin_key_the_key_is_the_rule(transport) -> None:
    with _server(enable_control=True, admin_api_key="admin-key-1",
                 grpc_transport=transport) as (channel, _):
        control = control_pb2_grpc.ControlServiceStub(channel)
        forwarded = (("x-forwarded-for", "203.0.113.9"), ("x-envoy-internal", "true"))
        _refused(lambda: control.IsPaused(control_pb2.IsPausedRequest(), metadata=forwarded,
                                          timeout=10),
                 grpc.StatusCode.UNAUTHENTICATED, "ADMIN_KEY_REQUIRED")
        state = control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10,
                              metadata=forwarded + _auth("admin-key-1")).state
        assert state.paused
        control.Resume(control_pb2.ResumeRequest(), timeout=10, metadata=_auth("admin-key-1"))


# -- x-tenant-id from a trusted hop only ----------------------------------------

def _salt(channel: grpc.Channel, engine: FakeEngine, **headers: str) -> str | None:
    stub = service_pb2_grpc.TokenwireServiceStub(channel)
    stub.CreateChatCompletion(
        chat_request(max_tokens=1), metadata=tuple(headers.items()), timeout=10
    )
    return engine.requests[-1].cache_salt


def test_tenant_header_counts_from_a_local_peer_when_no_proxy_is_named() -> None:
    with _server(trust_tenant_header=True) as (channel, engine):
        assert _salt(channel, engine, **{"x-tenant-id": "alpha"}) is not None


def test_tenant_header_counts_only_from_a_named_proxy() -> None:
    with _server(trust_tenant_header=True, trusted_proxy=("10.1.2.3",)) as (channel, engine):
        assert _salt(channel, engine, **{"x-tenant-id": "alpha"}) is None  # loopback: not it
    with _server(trust_tenant_header=True, trusted_proxy=("127.0.0.0/8",)) as (channel, engine):
        assert _salt(channel, engine, **{"x-tenant-id": "alpha"}) is not None


@pytest.mark.parametrize(("peer", "local", "listed"), [
    ("ipv4:127.0.0.1:5000", True, False),
    ("ipv6:[::1]:5000", True, False),
    ("ipv6:%5B::1%5D:5000", True, False),  # as grpc may print it
    ("unix:/tmp/x.sock", True, False),
    ("ipv4:10.0.0.7:5000", False, True),
    ("ipv6:[fd00::7]:5000", False, True),
    ("ipv4:192.0.2.1:5000", False, False),
    ("", False, False),
])
def test_peers(peer, local, listed) -> None:
    proxies = Proxies.parse(["10.0.0.0/24", "fd00::7"])
    assert is_local_peer(peer) is local
    assert proxies.listed(peer) is listed
    assert proxies.may_name_tenant(peer) is listed  # named proxies: only they
    assert Proxies().may_name_tenant(peer) is local  # none named: a local peer


def test_a_bad_trusted_proxy_is_refused_naming_the_flag() -> None:
    with pytest.raises(ValueError, match="--trusted-proxy 'gateway'"):
        Proxies.parse(["10.0.0.1,gateway"])


# -- GetStats is the operator's ------------------------------------------------

def test_stats_need_the_admin_key_when_there_is_one(transport) -> None:
    with _server(api_key="infer-key-1", admin_api_key="admin-key-1",
                 grpc_transport=transport) as (channel, _):
        stub = service_pb2_grpc.TokenwireServiceStub(channel)
        request = models_pb2.GetStatsRequest()
        _refused(lambda: stub.GetStats(request, metadata=_auth("infer-key-1"), timeout=10),
                 grpc.StatusCode.UNAUTHENTICATED, "ADMIN_KEY_REQUIRED")
        assert stub.GetStats(request, metadata=_auth("admin-key-1"), timeout=10).serving


def test_the_client_sends_its_admin_key_for_stats() -> None:
    """Client.stats() / AsyncClient.stats() carry the admin key when the
    client has one (the server asks for it), the inference key otherwise."""
    with fake_serving(api_key="infer-key-1", admin_api_key="admin-key-1") as server:
        with Client(server.address, api_key="infer-key-1", admin_api_key="admin-key-1") as client:
            assert client.stats().serving
            assert client.list_models().data  # inference calls still carry the inference key
        with Client(server.address, api_key="infer-key-1", admin_api_key="") as client:
            with pytest.raises(TokenwireError) as info:
                client.stats()
            assert info.value.reason == "ADMIN_KEY_REQUIRED"

        async def run() -> bool:
            async with AsyncClient(server.address, api_key="infer-key-1",
                                   admin_api_key="admin-key-1") as aclient:
                return (await aclient.stats()).serving

        assert asyncio.run(run())


def test_stats_are_not_a_tenants(tmp_path) -> None:
    keys = tmp_path / "keys.toml"
    keys.write_text('[[keys]]\nkey = "sk-alpha-one"\ntenant = "alpha"\n')
    with _server(api_key="infer-key-1", api_keys_file=str(keys)) as (channel, _):
        stub = service_pb2_grpc.TokenwireServiceStub(channel)
        request = models_pb2.GetStatsRequest()
        _refused(lambda: stub.GetStats(request, metadata=_auth("sk-alpha-one"), timeout=10),
                 grpc.StatusCode.PERMISSION_DENIED, "STATS_OPERATOR_ONLY")
        assert stub.GetStats(request, metadata=_auth("infer-key-1"), timeout=10).serving
        # The tenant key still serves inference.
        ok = stub.CreateChatCompletion(chat_request(max_tokens=1), metadata=_auth("sk-alpha-one"),
                                       timeout=10)
        assert ok.choices


# -- control on a public address needs an admin key --------------------------

@pytest.mark.parametrize(("host", "refused"), [
    ("127.0.0.1", False), ("127.0.0.2", False), ("::1", False), ("[::1]", False),
    ("localhost", False), ("unix:/tmp/tw.sock", False),
    ("0.0.0.0", True), ("::", True), ("10.0.0.5", True), ("", True), ("myhost", True),
])
def test_control_on_a_public_address_needs_an_admin_key(host, refused) -> None:
    settings = ServerSettings(host=host, enable_control=True)
    if refused:
        with pytest.raises(
            ValueError, match=r"--enable-control on --host .* needs --admin-api-key"
        ):
            check_exposure(settings)
    else:
        check_exposure(settings)
    check_exposure(ServerSettings(host=host, enable_control=True, admin_api_key="k" * 16))
    check_exposure(ServerSettings(host=host))


@pytest.mark.parametrize(("command", "host"), [("serve", "--host"), ("up", "--grpc-host")])
def test_serve_and_up_refuse_to_start(command, host, capsys) -> None:
    """The gRPC listener's flags: `serve --host/--port`, `up --grpc-host/--grpc-port`."""
    from tokenwire.cli import main

    port = "--port" if command == "serve" else "--grpc-port"
    with pytest.raises(SystemExit) as info:
        main([command, "--engine", "fake", "--enable-control", host, "0.0.0.0",
              port, str(free_port())])
    message = str(info.value.code)
    assert message.startswith(f"tokenwire {command}: --enable-control on {host} 0.0.0.0 needs "
                              "--admin-api-key")


def test_up_exposes_control_at_the_gateway_only_with_an_admin_key(monkeypatch, capsys) -> None:
    """`tokenwire up --enable-control`: without an admin key the server
    would refuse control through the gateway, so the gateway does not carry
    it (and up says where control is); with one, it does."""
    from tokenwire import cli
    from tokenwire.gateway import supervisor

    seen: list = []
    monkeypatch.setattr(
        supervisor, "run", lambda replicas, gateway, **kw: seen.append(gateway) or 0
    )
    monkeypatch.delenv("TOKENWIRE_ADMIN_API_KEY", raising=False)
    port = free_port()
    # REST on every address: control stays on the gRPC port, loopback (no refusal)
    assert cli.main(["up", "--engine", "fake", "--enable-control", "--grpc-port", str(port),
                     "--host", "0.0.0.0", "--port", "8123"]) == 0
    assert seen[-1].control is False and seen[-1].listen_host == "0.0.0.0"
    err = capsys.readouterr().err
    assert f"call the server at 127.0.0.1:{port} (its gRPC port, --grpc-port" in err
    assert "REST on --port 8123" in err
    assert cli.main(["up", "--engine", "fake", "--enable-control", "--grpc-port", str(port),
                     "--admin-api-key", "admin-key-1"]) == 0
    assert seen[-1].control is True
