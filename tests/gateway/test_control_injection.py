"""`tokenwire gateway --control --inject-admin-key` (issue #28): the gateway
itself adds the admin key ($TOKENWIRE_ADMIN_API_KEY) to ControlService calls
only, over whatever the caller sent, so trainers that send no credential on
control (slime, AReaL, TRL, SkyRL) work through it, while the server's rule
(control through a proxy needs the admin key) stays. Through a real Envoy:
in front of the server (keyless slime / AReaL control succeeds; without the
flag 401), and in front of an echo upstream that records the metadata each
call arrived with (the key is on control calls only, never on inference)."""

from __future__ import annotations

import collections.abc
import concurrent.futures
import contextlib
import os
import stat
import threading
from pathlib import Path

import grpc
import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway, tokenwire_up
from tests.servers import ThreadServer, free_port
from tokenwire.gateway import config
from tokenwire.gateway.settings import ADMIN_KEY_ENV, GatewaySettings, injected_admin_key
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine

pytestmark = pytest.mark.gateway

ADMIN_KEY = "injected-admin-key"
INFERENCE_KEY = "inference-key"
WRONG = {"authorization": "Bearer not-the-admin-key"}


@contextlib.contextmanager
def _admin_key_env(value: str) -> collections.abc.Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ADMIN_KEY_ENV, value)
        yield


# -- the settings and the written file (no Envoy) ---------------------------


def test_the_flag_needs_control_and_a_key() -> None:
    with _admin_key_env(ADMIN_KEY):
        with pytest.raises(ValueError, match="needs --control"):
            injected_admin_key(GatewaySettings(inject_admin_key=True))
        assert injected_admin_key(GatewaySettings(control=True, inject_admin_key=True)) == ADMIN_KEY
        assert injected_admin_key(GatewaySettings(control=True)) == ""  # not asked for
    with _admin_key_env(""):
        with pytest.raises(ValueError, match=ADMIN_KEY_ENV):
            config.build(GatewaySettings(control=True, inject_admin_key=True))


def test_the_cli_refuses_to_start_without_the_key(tmp_path: Path) -> None:
    from tokenwire.cli import main

    with _admin_key_env(""), pytest.raises(SystemExit, match=ADMIN_KEY_ENV):
        main(["gateway", "--control", "--inject-admin-key", "--config-dir", str(tmp_path)])
    with _admin_key_env(ADMIN_KEY), pytest.raises(SystemExit, match="needs --control"):
        main(["gateway", "--inject-admin-key", "--config-dir", str(tmp_path)])


def test_the_key_only_on_control_routes_and_the_file_private(tmp_path: Path) -> None:
    folder = tmp_path / "gw"
    folder.mkdir(mode=0o755)
    with _admin_key_env(ADMIN_KEY):
        path = config.write(GatewaySettings(control=True, inject_admin_key=True), folder)
        plain = config.render(GatewaySettings(control=True))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert ADMIN_KEY in path.read_text() and ADMIN_KEY not in plain
    routes = config.build(GatewaySettings(control=True, inject_admin_key=True), admin_key="K")[
        "static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"][
        "route_config"]["virtual_hosts"][0]["routes"]
    with_key = [r for r in routes if "request_headers_to_add" in r]
    assert with_key and all(r["match"]["prefix"] == config.CONTROL_PREFIX for r in with_key)
    assert all(r["request_headers_to_add"][0]["append_action"] == "OVERWRITE_IF_EXISTS_OR_ADD"
               for r in with_key)


# -- through Envoy, in front of the server -----------------------------------


@pytest.fixture(scope="module")
def server() -> collections.abc.Iterator[ThreadServer]:
    server = ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                         served_model_name="fake-model", enable_control=True,
                                         admin_api_key=ADMIN_KEY),
                          FakeEngine(max_model_len=512)).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def injecting(server: ThreadServer) -> collections.abc.Iterator[httpx.Client]:
    with _admin_key_env(ADMIN_KEY):
        envoy = start_gateway(server.address, control=True, inject_admin_key=True)
    try:
        with httpx.Client(base_url=envoy.url, timeout=60) as client:
            yield client
    finally:
        stop_gateway(envoy)


@pytest.fixture(scope="module")
def plain(server: ThreadServer) -> collections.abc.Iterator[httpx.Client]:
    envoy = start_gateway(server.address, control=True)
    try:
        with httpx.Client(base_url=envoy.url, timeout=60) as client:
            yield client
    finally:
        stop_gateway(envoy)


def _is_paused(client: httpx.Client) -> bool:
    r = client.get("/is_paused", headers={"authorization": f"Bearer {ADMIN_KEY}"})
    r.raise_for_status()
    return bool(r.json()["is_paused"])


@pytest.mark.parametrize("pause,resume", [
    ("/pause_generation", "/continue_generation"),  # slime, AReaL's SGLang path
    ("/areal_pause_generation", "/areal_continue_generation"),  # AReaL's vLLM path
])
def test_keyless_trainer_control_works_only_with_the_flag(
        injecting: httpx.Client, plain: httpx.Client, pause: str, resume: str) -> None:
    r = plain.post(pause, json={})  # the server's rule: through a proxy, the admin key
    assert r.status_code == 401, r.text
    assert _is_paused(plain) is False
    r = injecting.post(pause, json={})  # exactly what slime / AReaL send: no credential
    assert r.status_code == 200, r.text
    assert _is_paused(plain) is True
    assert plain.post(resume, json={}).status_code == 401
    assert _is_paused(plain) is True
    r = injecting.post(resume, json={}, headers=WRONG)  # a wrong key is overwritten
    assert r.status_code == 200, r.text
    assert _is_paused(plain) is False


def test_the_key_does_not_reach_inference_or_stats(injecting: httpx.Client) -> None:
    # GetStats (TokenwireService) needs the admin key: the gateway does not add it there.
    r = injecting.get("/tokenwire/v1/stats")
    assert r.status_code in (401, 403), r.text
    r = injecting.post("/v1/completions", json={"model": "fake-model", "prompt": [1, 2, 3],
                                                "max_tokens": 2})
    assert r.status_code == 200, r.text  # inference still works, with no key needed here


# -- through Envoy, in front of an echo upstream -----------------------------


class _Echo(grpc.GenericRpcHandler):
    """Answers every unary call (health: SERVING; others: an empty message)
    and records the authorization values each method arrived with."""

    def __init__(self) -> None:
        self.seen: dict[str, list[tuple[str, ...]]] = {}
        self.lock = threading.Lock()

    def service(self, details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method

        def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
            auth = tuple(v for k, v in context.invocation_metadata() if k == "authorization")
            if not method.startswith("/grpc.health"):
                with self.lock:
                    self.seen.setdefault(method, []).append(auth)
            return b"\x08\x01" if method.startswith("/grpc.health") else b""

        return grpc.unary_unary_rpc_method_handler(answer)


@pytest.fixture(scope="module")
def echo() -> collections.abc.Iterator[tuple[_Echo, str]]:
    handler = _Echo()
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4),
                         handlers=[handler])
    port = free_port()
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    with _admin_key_env(ADMIN_KEY):
        envoy = start_gateway(f"127.0.0.1:{port}", control=True, inject_admin_key=True)
    try:
        yield handler, envoy.url
    finally:
        stop_gateway(envoy)
        server.stop(None)


def test_echo_control_carries_the_key_inference_does_not(echo: tuple[_Echo, str]) -> None:
    handler, url = echo
    bearer = f"Bearer {ADMIN_KEY}"
    with httpx.Client(base_url=url, timeout=30) as client:
        client.post("/pause_generation", json={})
        client.post("/continue_generation", json={}, headers=WRONG)
        client.post("/v1/completions", json={"model": "m", "prompt": [1, 2], "max_tokens": 1},
                    headers={"authorization": f"Bearer {INFERENCE_KEY}"})
        client.post("/v1/chat/completions", json={"model": "m", "max_tokens": 1,
                                                  "messages": [{"role": "user", "content": "hi"}]})
    address = url.split("://", 1)[1]
    with grpc.insecure_channel(address) as channel:  # native gRPC, the same split
        call = channel.unary_unary("/tokenwire.v1.ControlService/IsPaused")
        call(b"", metadata=(("authorization", "Bearer wrong"),), timeout=10)
        call = channel.unary_unary("/tokenwire.v1.TokenwireService/ListModels")
        call(b"", metadata=(("authorization", f"Bearer {INFERENCE_KEY}"),), timeout=10)
    control = {m: v for m, v in handler.seen.items() if m.startswith(config.CONTROL_PREFIX)}
    other = {m: v for m, v in handler.seen.items() if not m.startswith(config.CONTROL_PREFIX)}
    assert len(control) == 3, handler.seen  # Pause, Resume (REST), IsPaused (native)
    assert all(auth == (bearer,) for calls in control.values() for auth in calls), control
    assert len(other) >= 3, handler.seen  # completion, chat, ListModels
    assert not any(bearer in auth for calls in other.values() for auth in calls), other
    assert (f"Bearer {INFERENCE_KEY}",) in other["/tokenwire.v1.TokenwireService/ListModels"]


def test_up_passes_the_flag_only_with_control_and_a_key() -> None:
    from tokenwire.cli import main

    with _admin_key_env(""), pytest.raises(SystemExit, match="needs --enable-control"):
        main(["up", "--engine", "fake", "--grpc-port", str(free_port()), "--enable-control",
              "--gateway-inject-admin-key"])


def test_up_with_the_flag_gives_keyless_control() -> None:
    env = {**os.environ, ADMIN_KEY_ENV: ADMIN_KEY}
    with tokenwire_up("--enable-control", "--gateway-inject-admin-key", env=env) as up:
        url = up.url
        assert httpx.post(f"{url}/pause_generation", json={}, timeout=10).status_code == 200
        assert httpx.get(f"{url}/is_paused", timeout=10).json() == {"is_paused": True}
        assert httpx.post(f"{url}/continue_generation", json={}, timeout=10).status_code == 200
    assert ADMIN_KEY not in up.output
