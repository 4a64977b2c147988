"""Names on the wire are defined once, in tokenwire/wire.py: no Python
module of the client, the server or the gateway spells out a header or
trailer name of its own (they import tokenwire.wire), and the server's SSE
error event maps statuses with the same tables the gateway's Lua reads
(tests/pure/test_lua.py holds the Lua side)."""

from __future__ import annotations

import ast
import pathlib
import tokenize

import grpc

from tokenwire import wire

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = ("client/tokenwire/client", "server/tokenwire", "gateway")
# The standard HTTP credential header doubles as the `param` of key errors.
NOT_CHECKED = {wire.AUTHORIZATION_HEADER}


def _names() -> set[str]:
    out: set[str] = set()
    for key, value in vars(wire).items():
        if key.endswith(("_HEADER", "_HEADERS", "_TRAILER", "_PREFIX")):
            out.update((value,) if isinstance(value, str) else value)
    return out - NOT_CHECKED


def _string_constants(path: pathlib.Path) -> set[str]:
    found = set()
    with path.open("rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type == tokenize.STRING:
                try:
                    value = ast.literal_eval(tok.string)
                except (ValueError, SyntaxError):  # f-strings and the like
                    continue
                if isinstance(value, str):
                    found.add(value)
    return found


def test_no_module_spells_out_a_wire_name() -> None:
    names = _names()
    assert {"x-session-id", "x-min-weight-version", "x-tenant-id", "x-tokenwire-affinity",
            "tokenwire-reason", "retry-after-ms", "x-data-parallel-rank"} <= names
    copies = {}
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found = _string_constants(path) & names
            if found:
                copies[str(path.relative_to(ROOT))] = sorted(found)
    assert copies == {}, "import these names from tokenwire.wire"


def test_server_error_event_uses_the_wire_status_map() -> None:
    from tokenwire.server.inference.shared import openai_wire as sse

    for code in grpc.StatusCode:
        assert sse.HTTP_STATUS[code] == wire.http_status(code.value[0])
    for http in (400, 401, 403, 404, 409, 413, 429, 499, 500, 501, 503, 504):
        assert sse.error_type(http) == wire.error_type(http)
