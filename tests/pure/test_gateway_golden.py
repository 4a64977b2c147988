"""The golden gateway config (gateway/golden/) is what the builder renders
for the default settings: a change to the builder's output fails here until
the golden files are refreshed (`python -m tokenwire.gateway.golden`) and
the change is reviewed with them."""

from __future__ import annotations

import pytest

from tokenwire.gateway import config, golden, lua_bundle

yaml = pytest.importorskip("yaml")


def test_golden_files_are_the_builders_output() -> None:
    assert golden.stale() == [], (
        f"the gateway config changed: run `{golden.COMMAND}` and commit gateway/golden/"
    )


def test_a_builder_change_makes_the_golden_stale(monkeypatch) -> None:
    monkeypatch.setattr(config, "CLUSTER", "renamed_cluster")
    assert golden.stale() == ["envoy.yaml"]
    monkeypatch.setattr(lua_bundle, "GATEWAY_NAMES", {**lua_bundle.GATEWAY_NAMES, "EXTRA": "x"})
    assert golden.stale() == ["envoy.yaml", "lua/gateway_names.lua"]


def test_golden_names_the_lua_by_file() -> None:
    """Readable: the Lua stays in its files; the config names the bundles."""
    text = (golden.GOLDEN_DIR / "envoy.yaml").read_text()
    doc = yaml.safe_load(text)
    hcm = doc["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    sources = {f["name"]: f["typed_config"]["default_source_code"] for f in hcm["http_filters"]
               if f["name"].startswith("tokenwire.")}
    assert sources == {
        "tokenwire.openai_rest": {"filename": f"{golden.CONFIG_DIR}/lua/openai_rest.lua"},
        "tokenwire.grpc_status": {"filename": f"{golden.CONFIG_DIR}/lua/grpc_status.lua"},
    }
    # no machine paths
    assert "envoy_on_request" not in text and str(golden.PACKAGE_DIR) not in text
    assert sorted(p.name for p in (golden.GOLDEN_DIR / "lua").iterdir()) == [
        "gateway_names.lua", "stream_routes.lua", "strict_rules.lua", "wire.lua"]
