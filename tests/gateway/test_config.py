"""The Envoy config rendered from the template is valid for the real Envoy,
and settings reach it."""

from __future__ import annotations

import subprocess

import pytest

from tokenwire.gateway import config
from tokenwire.gateway.process import envoy_binary
from tokenwire.gateway.settings import GatewaySettings

pytestmark = pytest.mark.gateway


@pytest.mark.parametrize("admin_port", [-1, 0])
def test_rendered_config_validates(tmp_path, admin_port) -> None:
    settings = GatewaySettings(listen_port=18080, upstream_port=15051, admin_port=admin_port,
                               max_request_bytes=1234567)
    path = config.write(settings, tmp_path)
    text = path.read_text()
    assert "$" not in text, "every placeholder is filled"
    assert "port_value: 18080" in text and "port_value: 15051" in text
    assert ("admin:" in text) == (admin_port >= 0)
    out = subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path), "--disable-hot-restart",
         "--log-level", "error"],
        capture_output=True, text=True, timeout=60,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_gateway_print_config_uses_the_flags(capsys) -> None:
    from tokenwire.cli import main

    assert main(["gateway", "--print-config", "--listen-port", "18181", "--upstream-port", "15151"]) == 0
    text = capsys.readouterr().out
    assert "port_value: 18181" in text and "port_value: 15151" in text
    assert str(config.LUA_DIR / "openai_rest.lua") in text


def test_admin_binds_loopback_even_when_the_listener_is_public() -> None:
    import yaml

    settings = GatewaySettings(listen_host="0.0.0.0", admin_port=0)
    doc = yaml.safe_load(config.render(settings))
    assert doc["admin"]["address"]["socket_address"]["address"] == "127.0.0.1"
    listener = doc["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listener["address"] == "0.0.0.0"
