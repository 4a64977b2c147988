"""The gateway's stream and JSON routes (gateway/stream_routes.py) are what
tools/gen_routes.py makes of the registry of fronts now (regenerate: python
tools/gen_routes.py), every front with an SSE or printed-JSON twin has its
REST paths there, and the bundled Lua reads the same tables."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
from types import ModuleType

import pytest

from tokenwire import wire
from tokenwire.gateway import lua_bundle, stream_routes
from tokenwire.gateway.settings import GatewaySettings
from tokenwire.server.inference.fronts import FRONTS
from tokenwire.v1 import events_pb2, service_pb2

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVICE = service_pb2.DESCRIPTOR.services_by_name["TokenwireService"]
EVENTS = events_pb2.DESCRIPTOR.services_by_name["EventStreamService"]


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_routes", ROOT / "tools" / "gen_routes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_the_committed_routes_are_fresh() -> None:
    gen = _generator()
    assert gen.TARGET == ROOT / "gateway" / "stream_routes.py"
    assert gen.TARGET.read_text() == gen.render(), "stale: run `python tools/gen_routes.py`"
    assert gen.main(["--check"]) == 0


def test_every_twin_of_the_registry_has_its_paths() -> None:
    gen = _generator()
    tables = {"events": stream_routes.STREAMABLE, "json": stream_routes.ALWAYS_JSON}
    expected: dict[str, set[str]] = {"events": set(), "json": set()}
    for entry in FRONTS:
        if entry.unary is None:  # (vLLM's gRPC engine service: no REST)
            assert not (entry.events or entry.json)
            continue
        paths = gen.post_paths(SERVICE.methods_by_name[entry.unary])
        for attr, table in tables.items():
            twin = getattr(entry, attr)
            if twin is None:
                continue
            assert paths, f"{entry.unary} has an {attr} twin and no POST path"
            (target,) = gen.post_paths(EVENTS.methods_by_name[twin])
            for path in paths:
                assert path in table, f"{entry.unary}: {path} missing from {attr}"
                assert f"{table[path]}:{attr}" == target, (entry.unary, path)
                expected[attr].add(path)
    assert set(stream_routes.STREAMABLE) == expected["events"]
    assert set(stream_routes.ALWAYS_JSON) == expected["json"]
    # The routes the gateway has always had (prime-rl's tokens path is a chat).
    assert stream_routes.STREAMABLE["/v1/chat/completions/tokens"] == "/v1/chat/completions"
    assert stream_routes.STREAMABLE[wire.ANTHROPIC_PATH_PREFIX] == wire.ANTHROPIC_PATH_PREFIX
    assert {"/v1/chat/completions", "/v1/completions", "/inference/v1/generate",
            "/v1/responses"} <= set(stream_routes.ALWAYS_JSON)


def test_the_lua_module_carries_the_tables() -> None:
    source = lua_bundle.generated_modules(GatewaySettings())["stream_routes"]
    for name, table in (("STREAMABLE", stream_routes.STREAMABLE),
                        ("ALWAYS_JSON", stream_routes.ALWAYS_JSON)):
        assert f"  {name} = {lua_bundle.lua_literal(table)},\n" in source
    assert 'require("stream_routes")' in (lua_bundle.LUA_DIR / "stream_select.lua").read_text()
    assert 'MODULES["stream_routes"]' in lua_bundle.bundles(GatewaySettings())["openai_rest"]


def test_stream_select_reads_the_tables() -> None:
    pytest.importorskip("lupa")
    try:
        from lupa import luajit21 as lua_impl  # Envoy's Lua is LuaJIT 2.1
    except ImportError:  # pragma: no cover - wheels without LuaJIT
        from lupa import lua51 as lua_impl
    runtime = lua_impl.LuaRuntime(unpack_returned_tuples=True)
    runtime.execute(f'package.path = "{lua_bundle.LUA_DIR}/?.lua;" .. package.path')
    for name, source in lua_bundle.generated_modules(GatewaySettings()).items():
        runtime.execute(f"package.preload[{json.dumps(name)}] = function()\n{source}\nend")
    select = runtime.eval('require("stream_select")')
    assert dict(select.STREAMABLE.items()) == stream_routes.STREAMABLE
    assert dict(select.ALWAYS_JSON.items()) == stream_routes.ALWAYS_JSON
