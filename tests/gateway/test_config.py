"""The Envoy config built from the settings is valid for the real Envoy,
and settings reach it."""

from __future__ import annotations

import json
import subprocess

import pytest

from tokenwire.gateway import config, golden, lua_bundle
from tokenwire.gateway.process import envoy_binary
from tokenwire.gateway.settings import GatewaySettings


def _listen_port(doc: dict) -> int:
    return doc["static_resources"]["listeners"][0]["address"]["socket_address"]["port_value"]


def _upstream_port(doc: dict) -> int:
    endpoints = doc["static_resources"]["clusters"][0]["load_assignment"]["endpoints"]
    return endpoints[0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]["port_value"]


def _connection_manager(doc: dict) -> dict:
    return doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]


@pytest.mark.parametrize("admin_port", [-1, 0])
def test_rendered_config_validates(tmp_path, admin_port) -> None:
    settings = GatewaySettings(listen_port=18080, upstream_port=15051, admin_port=admin_port,
                               max_request_bytes=1234567)
    path = config.write(settings, tmp_path)
    doc = json.loads(path.read_text())
    assert _listen_port(doc) == 18080 and _upstream_port(doc) == 15051
    assert ("admin" in doc) == (admin_port >= 0)
    _validate(path)


def test_gateway_print_config_uses_the_flags(capsys) -> None:
    from tokenwire.cli import main

    assert (
        main(["gateway", "--print-config", "--listen-port", "18181", "--upstream-port", "15151"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert _listen_port(doc) == 18181 and _upstream_port(doc) == 15151
    filters = _connection_manager(doc)["http_filters"]
    lua = [f["typed_config"]["default_source_code"]["inline_string"] for f in filters
           if f["name"].startswith("tokenwire.")]
    assert filters[0]["name"] == "tokenwire.openai_rest" and len(lua) == 2
    assert "function envoy_on_request" in lua[0] and 'MODULES["stream_select"]' in lua[0]


def test_admin_binds_loopback_even_when_the_listener_is_public() -> None:
    settings = GatewaySettings(listen_host="0.0.0.0", admin_port=0)
    doc = json.loads(config.render(settings))
    assert doc["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    listener = doc["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listener["address"] == "0.0.0.0"


def _lua_sources(doc: dict) -> dict[str, dict]:
    return {f["name"]: f["typed_config"]["default_source_code"]
            for f in _connection_manager(doc)["http_filters"] if f["name"].startswith("tokenwire.")}


def _validate(path) -> None:
    out = subprocess.run([envoy_binary(), "--mode", "validate", "-c", str(path),
                          "--disable-hot-restart",
                          "--log-level", "error"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_written_config_names_the_lua_bundles(tmp_path) -> None:
    """The gateway's config names each filter's bundle, written beside it
    (lua_bundle: the entry file with the modules it requires)."""
    settings = GatewaySettings(control=True)
    doc = json.loads(config.write(settings, tmp_path).read_text())
    bundles = lua_bundle.bundles(settings)
    assert _lua_sources(doc) == {
        f"tokenwire.{entry}": {"filename": str(tmp_path.resolve() / "lua" / f"{entry}.lua")}
        for entry in ("openai_rest", "grpc_status")
    }
    for entry, text in bundles.items():
        assert (tmp_path / "lua" / f"{entry}.lua").read_text() == text
    assert 'MODULES["wire"]' in bundles["grpc_status"]
    assert '["/update_weights_from_disk"]' in bundles["openai_rest"]  # --control: its rules too


def test_golden_config_is_a_valid_envoy_config(tmp_path) -> None:
    """gateway/golden/envoy.yaml, its placeholders filled in, is what Envoy loads."""
    text = (golden.GOLDEN_DIR / "envoy.yaml").read_text()
    lua_bundle.write(GatewaySettings(), tmp_path / "lua")
    text = text.replace(golden.CONFIG_DIR, str(tmp_path)).replace(
        golden.PACKAGE, str(golden.PACKAGE_DIR)
    )
    (tmp_path / "envoy.yaml").write_text(text)
    _validate(tmp_path / "envoy.yaml")


@pytest.mark.parametrize("heap_bytes,scale", [(1 << 30, 0), (1 << 20, 100)])
def test_overload_resets_high_memory_streams(heap_bytes: int, scale: int) -> None:
    """Envoy 1.40 takes reset_high_memory_stream with its buffer accounting
    (buffer_factory_config) and runs it on the heap monitor: scale 0 under
    a 1 GiB budget, 100 (every tracked stream eligible) over a 1 MiB one."""
    import time

    import httpx

    from tests.gateway.envoy_fixture import start_gateway, stop_gateway
    from tests.servers import free_port

    admin_port = free_port()
    envoy = start_gateway(f"127.0.0.1:{free_port()}", admin_port=admin_port,
                          max_heap_bytes=heap_bytes)
    name = "overload.envoy.overload_actions.reset_high_memory_stream.scale_percent"
    try:
        admin = f"http://127.0.0.1:{admin_port}"
        configs = httpx.get(f"{admin}/config_dump", timeout=10).json()["configs"]
        overload = next(c["bootstrap"]["overload_manager"] for c in configs if "bootstrap" in c)
        assert overload["actions"][0]["name"] == "envoy.overload_actions.reset_high_memory_stream"
        assert overload["buffer_factory_config"] == {"minimum_account_to_track_power_of_two": 20}
        deadline, value = time.monotonic() + 20, None
        while time.monotonic() < deadline:  # the monitor's first readings
            stats = httpx.get(f"{admin}/stats", params={"filter": name}, timeout=10).text
            value = next((int(line.split(": ")[1]) for line in stats.splitlines()
                          if line.startswith(name + ":")), None)
            if value == scale:
                break
            time.sleep(0.25)
        assert value == scale
    finally:
        stop_gateway(envoy)
