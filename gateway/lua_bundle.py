"""The Lua the gateway's filters run: the files in ``lua/``, the modules
generated from Python data, and the bundle step that joins them.

Envoy loads one Lua chunk per filter, while the files stay small and are
tested one by one with lupa (tests/pure/test_lua.py). ``write`` bundles each
filter's entry file (``openai_rest``, ``grpc_status``) with the modules it
``require``s into ``<config dir>/lua/<entry>.lua``; the Envoy config names
that file (a ``filename`` data source), see gateway/golden/.

Generated modules (name -> source), built from data at config time:

- ``wire``: every UPPER_CASE name of :mod:`tokenwire.wire` (header and
  trailer names, the gRPC -> HTTP status and OpenAI error type maps), the
  names the client and the server use too;
- ``gateway_names``: the names only the config builder and the filters
  share (the dynamic metadata namespace, the local-reply codes);
- ``strict_rules``: the JSON kind each REST body field must have, from the
  proto descriptor (strict_types.lua checks it before the transcoder);
- ``stream_routes``: the REST paths with an SSE or a printed-JSON twin and
  the base of its binding, from :mod:`tokenwire.gateway.stream_routes`
  (itself generated from the server's registry of fronts by
  tools/gen_routes.py; stream_select.lua picks the route with it).
"""

from __future__ import annotations

import pathlib
import re
from typing import Any

from tokenwire import wire
from tokenwire.gateway import stream_routes
from tokenwire.gateway.settings import PACKAGE_DIR, GatewaySettings, services

LUA_DIR = PACKAGE_DIR / "lua"
# Lua modules bundled with each filter's entry file (see lua_source).
LUA_MODULES = ("affinity_key", "anthropic_error", "json_scan", "json_text", "list_body",
               "openai_error", "stream_select", "strict_types")
ENTRIES = ("openai_rest", "grpc_status")  # the filters' entry files

# Names the Lua filters share with the config builder (gateway_names).
REST_METADATA = "tokenwire.rest"  # dynamic metadata namespace of a REST call
STRICT_PARAM = "strict_param"  # ... its key: the field strict_types.lua refused
INVALID_BODY_CODE = "invalid_request_body"  # Envoy's 400 (the transcoder's rejection)
INVALID_TYPE_CODE = "invalid_type"  # ... when it names the field of the wrong kind
GATEWAY_NAMES = {"REST_METADATA": REST_METADATA, "STRICT_PARAM": STRICT_PARAM,
                 "INVALID_BODY_CODE": INVALID_BODY_CODE, "INVALID_TYPE_CODE": INVALID_TYPE_CODE}

# Message types whose JSON form is not an object (the transcoder's well-known types).
_FREE_FORM = {"google.protobuf.Value", "google.protobuf.Struct", "google.protobuf.ListValue"}
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def wire_names() -> dict[str, Any]:
    """The names :mod:`tokenwire.wire` defines (its UPPER_CASE constants)."""
    return {k: v for k, v in vars(wire).items() if k.isupper()}


def strict_type_rules(service_names: list[str]) -> dict[str, dict[str, str]]:
    """For each REST path with a JSON body, the kind each top-level field's
    value must have ("array", "object", "bool"), from the proto descriptor:
    what strict_types.lua checks before the transcoder coerces."""
    from google.api import annotations_pb2
    from google.protobuf import descriptor

    from tokenwire.v1 import control_pb2, events_pb2, service_pb2

    files = {"tokenwire.v1.TokenwireService": service_pb2,
             "tokenwire.v1.ControlService": control_pb2,
             "tokenwire.v1.EventStreamService": events_pb2}
    rules: dict[str, dict[str, str]] = {}
    for full_name in service_names:
        service = files[full_name].DESCRIPTOR.services_by_name[full_name.rsplit(".", 1)[1]]
        for method in service.methods:
            options = method.GetOptions()
            if not options.HasExtension(annotations_pb2.http):
                continue
            http = options.Extensions[annotations_pb2.http]
            if http.body != "*" or not http.post:
                continue
            kinds: dict[str, str] = {}
            for field in method.input_type.fields:
                if field.is_repeated:
                    entry = (
                        field.message_type is not None and field.message_type.GetOptions().map_entry
                    )
                    kind = "object" if entry else "array"
                elif field.type == descriptor.FieldDescriptor.TYPE_BOOL:
                    kind = "bool"
                elif (field.type == descriptor.FieldDescriptor.TYPE_MESSAGE
                      and field.message_type.full_name not in _FREE_FORM
                      and not field.message_type.full_name.startswith("google.protobuf.")):
                    kind = "object"
                else:
                    continue
                kinds[field.name] = kinds[field.json_name] = kind
            rules[http.post] = kinds
    return rules


def lua_literal(value: Any) -> str:
    """A Lua literal for plain data: str, int, bool, list/tuple, dict."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if not value.isascii():
            raise ValueError(f"not an ASCII name: {value!r}")
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list | tuple):
        return "{ " + ", ".join(lua_literal(v) for v in value) + " }"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {lua_literal(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def _key(key: Any) -> str:
    return key if isinstance(key, str) and _NAME.fullmatch(key) else f"[{lua_literal(key)}]"


def lua_module(values: dict[str, Any], comment: str) -> str:
    """A Lua module returning ``values`` as a table, one entry a line."""
    rows = "".join(f"  {_key(k)} = {lua_literal(v)},\n" for k, v in values.items())
    return f"-- {comment} (generated: do not edit)\nreturn {{\n{rows}}}\n"


def generated_modules(settings: GatewaySettings) -> dict[str, str]:
    """The Lua modules built from data at config time (name -> source)."""
    rules = strict_type_rules(services(settings))
    return {
        "wire": lua_module(wire_names(), "tokenwire.wire: names shared with the client and "
                                         "the server"),
        "gateway_names": lua_module(GATEWAY_NAMES, "tokenwire.gateway.lua_bundle: names shared "
                                                   "with the config builder"),
        "strict_rules": lua_module({p: dict(sorted(k.items())) for p, k in sorted(rules.items())},
                                   "the JSON kind of each REST body field, from the descriptor"),
        "stream_routes": lua_module(
            {"STREAMABLE": stream_routes.STREAMABLE, "ALWAYS_JSON": stream_routes.ALWAYS_JSON},
            "tokenwire.gateway.stream_routes: the REST paths with an :events / :json twin"),
    }


def lua_source(entry: str, generated: dict[str, str] | None = None) -> str:
    """The Lua code of filter ``entry`` (a file in lua/) with the modules it
    requires bundled in front."""
    generated = generated or {}
    sources = {m: (LUA_DIR / f"{m}.lua").read_text() for m in LUA_MODULES} | generated
    text = (LUA_DIR / f"{entry}.lua").read_text()
    needed = [m for m in sources if f'require("{m}")' in text]
    for name in needed:  # modules' own requires (appended ones are visited too)
        needed += [m for m in sources if f'require("{m}")' in sources[name] and m not in needed]
    if not needed:
        return text
    parts = [
        f"-- {entry}.lua with the modules it requires (bundled by tokenwire.gateway.lua_bundle)",
        "local MODULES, LOADED = {}, {}",
        "local function require(name)\n"
        "  if LOADED[name] == nil then LOADED[name] = MODULES[name]() end\n"
        "  return LOADED[name]\n"
        "end",
    ]
    for name in needed:
        parts.append(f'MODULES["{name}"] = function()\n{sources[name]}end')
    return "\n".join(parts) + "\n" + text


def bundles(settings: GatewaySettings) -> dict[str, str]:
    """Each filter's bundled Lua (entry -> source)."""
    generated = generated_modules(settings)
    return {entry: lua_source(entry, generated) for entry in ENTRIES}


def write(settings: GatewaySettings, directory: pathlib.Path) -> dict[str, pathlib.Path]:
    """Write each filter's bundle to ``directory/<entry>.lua`` (entry -> path)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for entry, source in bundles(settings).items():
        paths[entry] = directory / f"{entry}.lua"
        paths[entry].write_text(source)
    return paths
