"""`--inject-admin-key` and web pages (issue #32, item 1): a page open in a
browser on the trainer's host can send simple (no-CORS) requests to the
gateway's loopback port, and with DNS rebinding read the answers. Before,
the gateway put the admin key on every such control call: a text/plain POST
to /update_weight_version or /pause?mode=abort, an <img> GET of
/flush_cache. Now the key goes only on calls a browser cannot have sent
(gateway/control_routes.py); the browser's shapes get 403
`control_refused` from Envoy and change nothing on the server (checked
there: not paused, version unchanged, no cache reset). The flag refuses a
non-loopback listener. The trainers' own keyless shapes:
test_trainers_keyless.py."""

from __future__ import annotations

import collections.abc
import socket
from pathlib import Path

import grpc
import httpx
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import fake_serving, free_port
from tokenwire.gateway.process import EnvoyProcess
from tokenwire.gateway.settings import ADMIN_KEY_ENV, GatewaySettings, injected_admin_key
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc

pytestmark = pytest.mark.gateway

ADMIN_KEY = "browser-test-admin-key"
EVIL = "http://evil.example"
BROWSER_UA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/130.0"
IMG = {"sec-fetch-dest": "image", "sec-fetch-mode": "no-cors", "sec-fetch-site": "cross-site",
       "user-agent": BROWSER_UA, "accept": "image/avif,image/webp,*/*"}


@pytest.fixture(scope="module")
def engine() -> FakeEngine:
    return FakeEngine(max_model_len=512)


@pytest.fixture(scope="module")
def served(engine: FakeEngine) -> collections.abc.Iterator[tuple[str, EnvoyProcess]]:
    """(the server's own address, the injecting gateway in front of it)."""
    with fake_serving(engine, served_model_name="fake-model", enable_control=True,
                      admin_api_key=ADMIN_KEY) as server:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv(ADMIN_KEY_ENV, ADMIN_KEY)
            envoy = start_gateway(server.address, control=True, inject_admin_key=True)
        try:
            yield server.address, envoy
        finally:
            stop_gateway(envoy)


def _state(served: tuple[str, EnvoyProcess], engine: FakeEngine) -> tuple[bool, str, int]:
    """(paused, weight version, cache resets), asked of the server itself."""
    with grpc.insecure_channel(served[0]) as channel:
        state = control_pb2_grpc.ControlServiceStub(channel).GetControlState(
            control_pb2.GetControlStateRequest(), timeout=10,
            metadata=(("authorization", f"Bearer {ADMIN_KEY}"),)).state
    return state.paused, state.weight_version, engine.resets


# What a page can make a browser send, and the refusal's reason.
BROWSER_SHAPED = {
    "form-post-sets-version": ("POST", "/update_weight_version", {
        "content": '{"new_version": "evil"}', "headers": {"content-type": "text/plain"}},
        "not JSON"),
    "form-post-pauses": ("POST", "/pause?mode=abort", {
        "content": "mode=abort",
        "headers": {"content-type": "application/x-www-form-urlencoded"}}, "not JSON"),
    "blob-post-loads-weights": ("POST", "/update_weights_from_disk", {
        "content": '{"model_path": "/tmp"}'}, "not JSON"),  # a Blob body: no content type
    "img-get-flushes": ("GET", "/flush_cache", {"headers": IMG}, "Sec-Fetch-*"),
    "old-browser-img-get": ("GET", "/flush_cache", {"headers": {"user-agent": BROWSER_UA}},
                            "User-Agent"),
    "old-browser-empty-form-post": ("POST", "/pause?mode=abort", {
        "content": "", "headers": {"content-type": "text/plain", "user-agent": BROWSER_UA}},
        "User-Agent"),
    "fetch-with-origin": ("POST", "/pause", {"json": {}, "headers": {"origin": EVIL}}, "Origin"),
    "sandboxed-origin-null": ("POST", "/update_weight_version", {
        "json": {"new_version": "evil"}, "headers": {"origin": "null"}}, "Origin"),
    "same-origin-after-rebinding": ("POST", "/pause", {
        "json": {}, "headers": {"sec-fetch-site": "same-origin"}}, "Sec-Fetch-*"),
    "foreign-host": ("POST", "/update_weight_version", {
        "json": {"new_version": "evil"}, "headers": {"host": "rebound.evil.example"}}, "Host"),
}


@pytest.mark.parametrize("case", list(BROWSER_SHAPED))
def test_browser_shaped_control_is_refused_and_changes_nothing(
        served: tuple[str, EnvoyProcess], engine: FakeEngine, case: str) -> None:
    method, path, kwargs, why = BROWSER_SHAPED[case]
    before = _state(served, engine)
    assert before[:2] == (False, "default")
    with httpx.Client(base_url=served[1].url, timeout=30) as client:
        if kwargs.get("headers", {}).get("host"):  # a rebound name, with the listener's port
            kwargs["headers"]["host"] += f":{served[1].settings.listen_port}"
        r = client.request(method, path, **kwargs)
    assert r.status_code == 403, r.text
    error = r.json()["error"]
    assert (error["code"], error["type"]) == ("control_refused", "permission_error"), error
    assert why in error["message"] and "browser" in error["message"], error
    assert _state(served, engine) == before


def test_the_same_calls_without_the_browser_marks_work(
        served: tuple[str, EnvoyProcess], engine: FakeEngine) -> None:
    """The refusals above are the marks, not the routes."""
    before = _state(served, engine)
    with httpx.Client(base_url=served[1].url, timeout=30) as client:
        assert client.get("/flush_cache").status_code == 200
        r = client.post("/update_weight_version", json={"new_version": "v2"})
        assert r.status_code == 200, r.text
        assert _state(served, engine) == (False, "v2", before[2] + 1)
        assert client.post("/update_weight_version",
                           json={"new_version": "default"}).status_code == 200


def _chunked(body: bytes) -> collections.abc.Iterator[bytes]:
    yield body  # httpx sends a generator's body chunked: no Content-Length


@pytest.mark.parametrize("content_type", ["text/plain", None], ids=["text-plain", "no-type"])
def test_a_chunked_body_that_is_not_json_is_refused(
        served: tuple[str, EnvoyProcess], engine: FakeEngine, content_type: str | None) -> None:
    """A chunked body has no Content-Length, yet it is a body: not the "no
    body" the rule lets through (issue #42, L-1; no browser sends it, but it
    is one layer of the defence). Envoy drops Transfer-Encoding before any
    filter, so a POST with no length at all is refused too; a chunked JSON
    body, and an empty body with Content-Length: 0, still get the key."""
    before = _state(served, engine)
    headers = {"content-type": content_type} if content_type else {}
    with httpx.Client(base_url=served[1].url, timeout=30) as client:
        r = client.post("/update_weight_version", headers=headers,
                        content=_chunked(b'{"new_version": "evil"}'))
        assert r.request.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.request.headers
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "control_refused"
        assert "not JSON" in r.json()["error"]["message"]
        assert _state(served, engine) == before
        ok = client.post("/update_weight_version", headers={"content-type": "application/json"},
                         content=_chunked(b'{"new_version": "v3"}'))
        assert ok.status_code == 200, ok.text
        assert _state(served, engine)[1] == "v3"
        assert client.post("/update_weight_version",
                           json={"new_version": "default"}).status_code == 200
        before = _state(served, engine)
        empty = client.post("/flush_cache")  # httpx: Content-Length: 0
        assert empty.request.headers["content-length"] == "0" and empty.status_code == 200
        assert _state(served, engine) == (*before[:2], before[2] + 1)
    # No Content-Length and no body (curl -X POST): cannot be told from chunked.
    port = served[1].settings.listen_port
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(f"POST /flush_cache HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                     "Connection: close\r\n\r\n".encode())
        answer = b"".join(iter(lambda: sock.recv(65536), b""))
    assert answer.startswith(b"HTTP/1.1 403") and b"Content-Length: 0" in answer, answer
    assert _state(served, engine)[2] == before[2] + 1


@pytest.mark.parametrize("metadata,authority", [
    ((("origin", EVIL),), None),
    ((("sec-fetch-site", "cross-site"),), None),
    ((), "rebound.evil.example"),
])
def test_native_grpc_with_browser_marks_is_refused(
        served: tuple[str, EnvoyProcess], engine: FakeEngine,
        metadata: tuple[tuple[str, str], ...], authority: str | None) -> None:
    before = _state(served, engine)
    options = [("grpc.default_authority", f"{authority}:{served[1].settings.listen_port}")] \
        if authority else []
    with grpc.insecure_channel(served[1].address, options=options) as channel:
        stub = control_pb2_grpc.ControlServiceStub(channel)
        with pytest.raises(grpc.RpcError) as caught:
            stub.Pause(control_pb2.PauseRequest(mode="abort"), metadata=metadata, timeout=10)
    assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "browser" in (caught.value.details() or "")
    assert _state(served, engine) == before
    with grpc.insecure_channel(served[1].address) as channel:  # the plain call: the key added
        stub = control_pb2_grpc.ControlServiceStub(channel)
        assert stub.IsPaused(control_pb2.IsPausedRequest(), timeout=10).is_paused is False


def test_only_read_only_control_routes_answer_get() -> None:
    """GET is what a page's <img>, <link> or navigation sends. The one
    state-changing GET is SGLang's /flush_cache (slime sends it, keyless,
    and waits for 200 at start): kept, and given the key only as above."""
    from google.api import annotations_pb2

    service = control_pb2.DESCRIPTOR.services_by_name["ControlService"]
    gets = set()
    for method in service.methods:
        rule = method.GetOptions().Extensions[annotations_pb2.http]
        for binding in (rule, *rule.additional_bindings):
            if binding.get:
                gets.add((method.name, binding.get))
    assert gets == {
        ("IsPaused", "/is_paused"), ("GetControlState", "/tokenwire/v1/control/state"),
        ("GetWeightInfo", "/weight_info"), ("GetWeightInfo", "/get_weight_version"),
        ("IsSleeping", "/is_sleeping"), ("GetWorldSize", "/get_world_size"),
        ("GetServerInfo", "/server_info"), ("ResetPrefixCache", "/flush_cache"),
    }


# -- the listener -------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "::"])
def test_the_flag_refuses_a_listener_beyond_loopback(host: str, tmp_path: Path) -> None:
    from tokenwire.cli import main

    settings = GatewaySettings(control=True, inject_admin_key=True, listen_host=host)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(ADMIN_KEY_ENV, ADMIN_KEY)
        with pytest.raises(ValueError, match="loopback"):
            injected_admin_key(settings)
        with pytest.raises(SystemExit, match=r"tokenwire gateway: .*loopback"):
            main(["gateway", "--control", "--inject-admin-key", "--listen-host", host,
                  "--config-dir", str(tmp_path)])
        with pytest.raises(SystemExit, match=r"tokenwire up: .*loopback"):
            main(["up", "--engine", "fake", "--grpc-port", str(free_port()), "--enable-control",
                  "--gateway-inject-admin-key", "--host", host])
        for loopback in ("127.0.0.1", "127.0.0.2", "::1"):
            settings = GatewaySettings(control=True, inject_admin_key=True, listen_host=loopback)
            assert injected_admin_key(settings) == ADMIN_KEY
