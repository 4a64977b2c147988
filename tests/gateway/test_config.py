"""The Envoy config built from the settings is valid for the real Envoy,
and settings reach it."""

from __future__ import annotations

import json
import subprocess

import pytest

from tokenwire.gateway import config
from tokenwire.gateway.process import envoy_binary
from tokenwire.gateway.settings import GatewaySettings

pytestmark = pytest.mark.gateway


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
    out = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path), "--disable-hot-restart",
         "--log-level", "error"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_gateway_print_config_uses_the_flags(capsys) -> None:
    from tokenwire.cli import main

    assert main(["gateway", "--print-config", "--listen-port", "18181", "--upstream-port", "15151"]) == 0
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
