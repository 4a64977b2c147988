"""The gateway's Lua modules run without Envoy, under LuaJIT (what Envoy
embeds) through lupa: stream selection, SSE framing, OpenAI error bodies,
and the bundles lua_bundle.py hands to Envoy, driven through fake handles.
The generated modules (``wire``: tokenwire.wire's names) are the ones the
bundles carry."""

from __future__ import annotations

import json
import re

import pytest

from tokenwire import wire
from tokenwire.gateway import lua_bundle
from tokenwire.gateway.settings import GatewaySettings

lupa = pytest.importorskip("lupa")
try:
    from lupa import luajit21 as lua_impl  # Envoy's Lua is LuaJIT 2.1
except ImportError:  # pragma: no cover - wheels without LuaJIT
    from lupa import lua51 as lua_impl


@pytest.fixture(scope="module")
def lua():
    runtime = lua_impl.LuaRuntime(unpack_returned_tuples=True)
    runtime.execute(f'package.path = "{lua_bundle.LUA_DIR}/?.lua;" .. package.path')
    for name, source in lua_bundle.generated_modules(GatewaySettings()).items():
        runtime.execute(f"package.preload[{json.dumps(name)}] = function()\n{source}\nend")
    return runtime


def module(lua, name: str):
    return lua.eval(f'require("{name}")')


# stream_select --------------------------------------------------------------

@pytest.mark.parametrize(("body", "expected"), [
    ('{"stream": true}', True),
    ('  {"model": "m", "stream" : true, "n": 1}', True),
    ('{"stream": false}', False),
    ('{"messages": [{"stream": true}], "n": 1}', False),  # nested: not ours
    ('{"nvext": {"stream": true}}', False),
    ('{"a": "\\"stream\\": true", "stream": true}', True),  # key text inside a string
    ('{"a": "x\\\\", "stream": true}', True),  # escaped backslash before the quote
    ('{"a": "stream", "b": true}', False),  # "stream" as a value
    ('[{"stream": true}]', False),  # not an object
    ('{"stream": "true"}', False),  # a string is not true
    ("", False),
    ('{"stream": tr', False),
])
def test_stream_requested(lua, body, expected) -> None:
    assert module(lua, "stream_select").stream_requested(body) is expected


def test_invocation_path(lua) -> None:
    """SageMaker's /invocations: `messages` (before `prompt`) picks a chat,
    `prompt` a completion; only top-level keys count."""
    path = module(lua, "stream_select").invocation_path
    assert path("/invocations", '{"prompt": "x", "messages": []}') == "/v1/chat/completions"
    assert path("/invocations?a=1", '{"prompt": "x"}') == "/v1/completions?a=1"
    assert path("/invocations", '{"input": {"messages": [], "prompt": 1}}') is None
    assert path("/invocations", '[1]') is None
    assert path("/v1/completions", '{"prompt": "x"}') is None


def test_stream_path(lua) -> None:
    select = module(lua, "stream_select")

    def body(text):
        return lambda: text

    assert select.stream_path("POST", "/v1/chat/completions?x=1", body('{"stream":true}')) == \
        ("/v1/chat/completions:events?x=1", "sse")
    assert select.stream_path("POST", "/inference/v1/generate", body('{"stream":true}')) == \
        ("/inference/v1/generate:events", "sse")
    assert select.stream_path("POST", "/v1/chat/completions", body('{"stream":false}')) == \
        ("/v1/chat/completions:json", "json")
    assert select.stream_path("POST", "/inference/v1/generate", body('{"stream":false}')) == \
        ("/inference/v1/generate:json", "json")
    # prime-rl's token route streams as a chat
    assert select.stream_path("POST", "/v1/chat/completions/tokens", body('{"stream":true}')) == \
        ("/v1/chat/completions:events", "sse")
    # a unary chat or completion: the server prints its JSON (every required key)
    assert select.stream_path("POST", "/v1/chat/completions", body('{"logprobs": true}')) == \
        ("/v1/chat/completions:json", "json")
    assert select.stream_path("POST", "/v1/chat/completions/tokens", body('{"logprobs":true}')) == \
        ("/v1/chat/completions:json", "json")
    assert select.stream_path("POST", "/v1/chat/completions", body('{"logprobs": false}')) == \
        ("/v1/chat/completions:json", "json")
    assert select.stream_path("POST", "/v1/completions", body('{}')) == \
        ("/v1/completions:json", "json")
    assert select.stream_path("GET", "/v1/chat/completions", body('{"stream":true}')) is None

    def never():
        raise AssertionError("the body of a route without a stream twin is never read")

    assert select.stream_path("POST", "/tokenize", never) is None


# openai_error ---------------------------------------------------------------

def _render(lua, **rec):
    table = lua.table_from(rec)
    http, body, retry = module(lua, "openai_error").render(table)
    return http, json.loads(body), retry


def test_error_body_from_plain_trailers(lua) -> None:
    http, body, retry = _render(lua, grpc_status="3",
                                grpc_message="max_tokens%20must%20be%20%3E%3D%201",
                                reason="VALUE_OUT_OF_RANGE", param="max_tokens", retry_ms="")
    assert http == 400 and retry is None
    assert body == {"error": {"message": "max_tokens must be >= 1", "type": "invalid_request_error",
                              "param": "max_tokens", "code": "value_out_of_range"}}


@pytest.mark.parametrize(("code", "http", "kind"), [
    ("5", 404, "invalid_request_error"), ("8", 429, "rate_limit_error"),
    ("14", 503, "server_error"), ("16", 401, "authentication_error"),
    ("7", 403, "permission_error"), ("13", 500, "server_error"), ("99", 500, "server_error"),
])
def test_status_mapping(lua, code, http, kind) -> None:
    got_http, body, _ = _render(lua, grpc_status=code, grpc_message="m")
    assert got_http == http and body["error"]["type"] == kind and body["error"]["param"] is None


def test_missing_reason_and_message_fall_back_to_the_code(lua) -> None:
    _, body, _ = _render(lua, grpc_status="14", reason="", param="")
    assert body["error"]["code"] == "unavailable"
    assert body["error"]["message"] == "the call failed with gRPC status unavailable"


def test_retry_hint_and_escaping(lua) -> None:
    message = 'mod\u00e8le "\u2603" \\ \n\t\x01'
    encoded = "".join(c if c.isalnum() or c == " " else "".join(f"%{b:02X}" for b in c.encode())
                      for c in message)
    http, body, retry = _render(lua, grpc_status="8", grpc_message=encoded,
                                reason="TOO_MANY_REQUESTS", retry_ms="1500")
    assert http == 429 and retry == 1500
    assert body["error"]["message"] == message


def test_transcoder_rejection_names_the_field(lua) -> None:
    errs = module(lua, "openai_error")
    text = ('{"error":{"message":"max_tokens: invalid value \\"many\\" for type TYPE_UINT32",'
            '"type":"invalid_request_error","param":null,"code":"invalid_request_body"}}')
    fixed = json.loads(errs.name_rejected_field(text))["error"]
    assert (fixed["param"], fixed["code"]) == ("max_tokens", "invalid_type")
    assert errs.name_rejected_field('{"error":{"message":"Unexpected token"}}') is None


# The bundles Envoy loads, through fake handles ------------------------------

FAKE_ENVOY = """
local function headers(t)
  return {
    get = function(_, k) return t[k] end,
    replace = function(_, k, v) t[k] = v end,
    add = function(_, k, v) t[k] = v end,
    remove = function(_, k) t[k] = nil end,
  }
end
local function body(text)
  local b = { text = text }
  function b:length() return #self.text end
  function b:getBytes(i, n) return self.text:sub(i + 1, i + n) end
  function b:setBytes(s) self.text = s end
  return b
end
-- `last_status`: the gRPC status the trailers bring, recorded just before
-- the last body chunk (the transcoder's closing "]") reaches the filter.
function fake_handle(req_headers, req_body, meta, chunks, trailers, last_status)
  local h = { meta = meta, out = {} }
  local hb = body(req_body)
  function h:headers() return headers(req_headers) end
  function h:clearRouteCache() end
  function h:body() return hb end
  function h:trailers() return trailers and headers(trailers) end
  function h:bodyChunks()
    local i = 0
    return function()
      i = i + 1
      if chunks[i] == nil then return nil end
      if chunks[i + 1] == nil and last_status then
        meta["tokenwire.rest"].grpc_status = last_status
      end
      local c = body(chunks[i])
      h.out[#h.out + 1] = c
      return c
    end
  end
  function h:streamInfo()
    return { dynamicMetadata = function()
      return {
        get = function(_, ns) return meta[ns] end,
        set = function(_, ns, k, v) meta[ns] = meta[ns] or {}; meta[ns][k] = v end,
      }
    end }
  end
  return h
end
"""


def _bundle(entry: str):
    runtime = lua_impl.LuaRuntime(unpack_returned_tuples=True)
    runtime.execute(lua_bundle.bundles(GatewaySettings())[entry])  # self-contained: no package.path
    runtime.execute(FAKE_ENVOY)
    return runtime


def test_bundled_request_filter_picks_the_stream_binding() -> None:
    rt = _bundle("openai_rest")
    hdrs = rt.table_from({":method": "POST", ":path": "/v1/chat/completions",
                          "content-type": "application/json"})
    meta = rt.table()
    rt.globals().envoy_on_request(rt.globals().fake_handle(hdrs, '{"stream": true}', meta))
    assert hdrs[":path"] == "/v1/chat/completions:events"
    assert meta["tokenwire.rest"]["mode"] == "sse"
    grpc_hdrs = rt.table_from(
        {":method": "POST", ":path": "/x", "content-type": "application/grpc"}
    )
    grpc_meta = rt.table()
    rt.globals().envoy_on_request(rt.globals().fake_handle(grpc_hdrs, "", grpc_meta))
    assert grpc_meta["tokenwire.rest"] is None  # native gRPC untouched


def test_bundled_response_filter_passes_server_events_through() -> None:
    rt = _bundle("openai_rest")
    meta = rt.table_from({"tokenwire.rest": rt.table_from({"mode": "sse"})})
    hdrs = rt.table_from({":status": "200", "content-type": "text/event-stream",
                          "grpc-accept-encoding": "gzip"})
    chunks = rt.table_from(['data: {"id":"a","choices":[]}\n\n', "data: [DONE]\n\n"])
    handle = rt.globals().fake_handle(hdrs, "", meta, chunks)
    rt.globals().envoy_on_response(handle)
    assert hdrs["content-type"] == "text/event-stream" and hdrs["cache-control"] == "no-cache"
    assert hdrs["grpc-accept-encoding"] is None
    assert handle.out is None or len(handle.out) == 0  # no chunk went through Lua


@pytest.mark.parametrize("code", list(range(1, 17)))
def test_server_error_event_matches_the_gateway_rendering(lua, code) -> None:
    """A stream that fails after its first event gets the server's error event
    (sse.py); a call that fails before it gets the gateway's error body
    (openai_error.lua). Both must say the same."""
    import grpc

    from tokenwire.server.core.errors import TokenwireError
    from tokenwire.server.inference.shared import openai_wire as sse

    status = next(s for s in grpc.StatusCode if s.value[0] == code)
    err = TokenwireError("bad \u2603 \"x\"", reason="VALUE_OUT_OF_RANGE", param="top_p")
    err.code = status
    http, body, _ = _render(lua, grpc_status=str(code), grpc_message="bad%20%E2%98%83%20%22x%22",
                            reason="VALUE_OUT_OF_RANGE", param="top_p")
    assert sse.HTTP_STATUS[status] == http
    assert json.loads(sse.error_event(err)[len(b"data: "):]) == body


# strict_types ----------------------------------------------------------------

RULES = {"messages": "array", "stream": "bool", "nvext": "object"}


@pytest.mark.parametrize(("body", "found"), [
    ('{"messages": [{"role": "user"}], "stream": true, "nvext": {}}', None),
    ('{"messages": null, "stream": false}', None),
    ('{"messages": {"role": "user", "content": "hi"}}', ("messages", "array")),
    ('{"messages": "hi"}', ("messages", "array")),
    ('{"stream": "yes"}', ("stream", "bool")),
    ('{"stream": 1}', ("stream", "bool")),
    ('{"nvext": ["x"]}', ("nvext", "object")),
    ('{"other": {"messages": "nested: not ours"}, "stream": true}', None),
    ('{"a": "\\"messages\\": 5", "messages": []}', None),
    ('[1, 2]', None),  # not an object: the transcoder answers it
])
def test_strict_types(lua, body, found) -> None:
    got = module(lua, "strict_types").violation(body, lua.table_from(RULES))
    assert got == found


def test_strict_rules_come_from_the_descriptor() -> None:
    rules = lua_bundle.strict_type_rules(["tokenwire.v1.TokenwireService"])
    chat = rules["/v1/chat/completions"]
    assert chat["messages"] == "array" and chat["stream"] == "bool" and chat["logprobs"] == "bool"
    assert chat["nvext"] == "object" and chat["stopTokenIds"] == chat["stop_token_ids"] == "array"
    assert "stop" not in chat  # a google.protobuf.Value takes any JSON
    assert rules["/inference/v1/generate"]["token_ids"] == "array"


# -- list_body --------------------------------------------------------------
@pytest.mark.parametrize(("text", "expected"), [
    ('{"requests": [{"token_ids": [1]}, {"token_ids": [2]}]}',
     '[{"token_ids": [1]}, {"token_ids": [2]}]'),
    ('{"requests":[]}', "[]"),
    ("{}", "[]"),
    (' {\n "requests": [{"a": "}"}]\n}\n', '[{"a": "}"}]'),
    ('{"other": [1]}', None),
    ("[1, 2]", None),
])
def test_list_body_unwraps_the_one_field(lua, text, expected) -> None:
    got = module(lua, "list_body").unwrap(text, "requests")
    assert got == expected
    if expected is not None:
        assert json.loads(got) == json.loads(text).get("requests", [])


def test_list_body_paths(lua) -> None:
    m = module(lua, "list_body")
    assert m.field("/v1/completions/render?x=1") == "requests"
    assert m.field("/v1/completions") is None


# -- affinity_key -------------------------------------------------------------
@pytest.mark.parametrize(("body", "key"), [
    ('{"session_id": "s1", "cache_salt": "c", "user": "u"}', "s1"),
    ('{"user": "u", "cache_salt": "c"}', "c"),
    ('{"cache_salt": "c", "nvext": {"cache_salt": "n"}}', "n"),
    ('{"nvext": {"token_data": [1, 2], "cache_salt": "n"}, "user": "u"}', "n"),
    ('{"user": "u"}', "u"),
    ('{"session_id": "", "user": "u"}', "u"),
    ('{"messages": [{"session_id": "inner", "user": "x"}], "n": 1}', None),  # nested: not ours
    ('{"nvext": {"agent_hints": {"cache_salt": "deep"}}}', None),
    ('{"nvext": {"a": 1}, "x": {"y": 1, "cache_salt": "other"}}', None),  # after nvext closed
    ('{"session_id": 5}', None),
    ('{"session_id": "a\\"b"}', 'a\\"b'),
    ('{"session_id": "' + "x" * 300 + '"}', None),  # too long for a key
    ("[1]", None),
    ("", None),
])
def test_affinity_key(lua, body, key) -> None:
    assert module(lua, "affinity_key").key(body) == key


def test_header_names_come_from_wire(lua) -> None:
    assert module(lua, "affinity_key").HEADER == wire.AFFINITY_HEADER
    assert '"x-tokenwire-affinity"' not in (lua_bundle.LUA_DIR / "affinity_key.lua").read_text()


def test_bundled_request_filter_sets_the_affinity_key_from_the_body() -> None:
    rt = _bundle("openai_rest")
    hdrs = rt.table_from({":method": "POST", ":path": "/v1/chat/completions",
                          "content-type": "application/json"})
    rt.globals().envoy_on_request(rt.globals().fake_handle(hdrs, '{"user": "u-1"}', rt.table()))
    assert hdrs[wire.AFFINITY_HEADER] == "u-1"
    hdrs = rt.table_from({":method": "POST", ":path": "/v1/chat/completions",
                          "content-type": "application/json", wire.SESSION_HEADER: "s"})
    rt.globals().envoy_on_request(rt.globals().fake_handle(hdrs, '{"user": "u-1"}', rt.table()))
    assert hdrs[wire.AFFINITY_HEADER] is None  # X-Session-ID is the key


def test_each_key_stops_at_the_end_of_the_object(lua) -> None:
    keys = []
    module(lua, "json_scan").each_key('{"a": 1} , "b": 2}', lambda k, _after: keys.append(k))
    assert keys == ["a"]


# -- wire names: defined once (tokenwire/wire.py), in Lua by generation -------

def _lua_value(value):
    """A Lua table as plain Python (lists for sequences, dicts otherwise)."""
    if not hasattr(value, "items"):
        return value
    items = dict(value.items())
    if items and set(items) == set(range(1, len(items) + 1)):
        return tuple(_lua_value(items[i]) for i in range(1, len(items) + 1))
    return {k: _lua_value(v) for k, v in items.items()}


def test_lua_wire_module_is_tokenwire_wire(lua) -> None:
    """What the filters require as "wire" holds every name of tokenwire.wire,
    equal: the Lua and the Python sides cannot drift apart."""
    names = lua_bundle.wire_names()
    assert {"SESSION_HEADER", "MIN_VERSION_HEADER", "DP_RANK_HEADERS", "AFFINITY_HEADER",
            "TENANT_HEADER", "REASON_TRAILER", "HTTP_STATUS", "ERROR_TYPES"} <= set(names)
    lua_wire = module(lua, "wire")
    assert {k: _lua_value(lua_wire[k]) for k in names} == names
    assert set(lua_wire.keys()) == set(names)


def test_lua_status_maps_are_the_wire_maps(lua) -> None:
    errors = module(lua, "openai_error")
    for code in range(0, 20):
        http, body, _ = (
            _render(lua, grpc_status=str(code), grpc_message="m") if code else (200, None, None)
        )
        assert http == wire.http_status(code)
        if body is not None:
            assert body["error"]["type"] == wire.error_type(http)
    for http in (200, 400, 401, 403, 404, 409, 413, 429, 499, 500, 503, 504):
        assert errors.error_type(http) == wire.error_type(http)


def _string_literals(lua_source: str) -> set[str]:
    code = "\n".join(line.split("--", 1)[0] for line in lua_source.splitlines())  # no comments
    return set(re.findall(r'"([^"\\]*)"', code)) | set(re.findall(r"'([^'\\]*)'", code))


def test_lua_files_hold_no_copy_of_a_wire_name() -> None:
    """No header name, error type or status table is written out in a Lua
    file: they come from the generated modules."""
    values: set[str] = set()
    for value in [*lua_bundle.wire_names().values(), *lua_bundle.GATEWAY_NAMES.values()]:
        if isinstance(value, str):
            values.add(value)
        elif isinstance(value, tuple):
            values.update(value)
        elif isinstance(value, dict):
            values.update(v for v in value.values() if isinstance(v, str))
    for path in sorted(lua_bundle.LUA_DIR.glob("*.lua")):
        text = path.read_text()
        literals = _string_literals(text)
        copies = {
            v for v in values if v in literals or ("-" in v and any(v in lit for lit in literals))
        }
        assert not copies, f"{path.name} spells out {sorted(copies)}: use the generated modules"
        assert not re.search(r"\[\s*1[46]\s*\]\s*=\s*\d", text), f"{path.name} has a status table"
