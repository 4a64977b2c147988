"""Generate the client's RPC methods, sync and async twins from one source.

Usage: python tools/gen_client.py [--check]

Reads the service descriptors (tokenwire.v1 TokenwireService and
ControlService, from the generated ``*_pb2`` modules: request and response
types, which RPCs stream) and tools/client_table.py (the Python name,
parameters, request and result of each method), and writes one module per
service in client/tokenwire/client/ with one mixin per I/O style: _service_methods.py
(ServiceMethods / AsyncServiceMethods for Client / AsyncClient) and
_control_methods.py (ControlMethods / AsyncControlMethods for the control
clients). The classes that use them only do I/O (``_unary``/``_stream``/
``_call``). Every RPC of a service is in the table or in its not_exposed, so
a new RPC fails here until the client decides. ``--check`` exits 1 when a
committed module is stale (tests/pure/test_client_methods_fresh.py too).
Run it after ``make proto`` when a service changes.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import textwrap
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "client" / "tokenwire" / "client"
WIDTH = 100

sys.path.insert(0, str(ROOT / "tools"))  # the table beside this file, run as a script or not
from client_table import SERVICES, Method, Service  # noqa: E402


def _type_name(desc: Any) -> tuple[str, str]:
    """(module, module.Message) of a message descriptor of tokenwire.v1."""
    module = pathlib.PurePosixPath(desc.file.name).stem + "_pb2"
    return module, f"{module}.{desc.name}"


def _wrap(head: str, parts: list[str], tail: str, indent: str = "    ") -> list[str]:
    """A def's lines: on one line when it fits, else its parameters packed
    on continuation lines."""
    one = f"{indent}{head}({', '.join(parts)}){tail}"
    if len(one) <= WIDTH:
        return [one]
    lines, line = [f"{indent}{head}("], indent * 2
    for part in parts:
        piece = part + ","
        if line.strip() and len(line) + 1 + len(piece) > WIDTH:
            lines.append(line)
            line = indent * 2
        line += (" " if line.strip() else "") + piece
    lines.append(line)
    lines.append(f"{indent}){tail}")
    return lines


def _pack(args: str, indent: str) -> list[str]:
    """A call's arguments (`args`: up to its closing parenthesis) packed on
    continuation lines of at most WIDTH characters."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(args):
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            parts.append(args[start : i + 1].strip())
            start = i + 1
    parts.append(args[start:].strip())
    lines, line = [], indent
    for part in parts:
        if line.strip() and len(line) + 1 + len(part) > WIDTH:
            lines.append(line)
            line = indent
        line += (" " if line.strip() else "") + part
    lines.append(line)
    return lines


def _doc(text: str, indent: str) -> list[str]:
    one = f'{indent}"""{text}"""'
    if len(one) <= WIDTH:
        return [one]
    body = textwrap.wrap(text, WIDTH - len(indent) - 3)
    return [f'{indent}"""{body[0]}', *(indent + b for b in body[1:]), f'{indent}"""']


def _method(service: Service, m: Method, rpc: Any, aio: bool, modules: set[str]) -> list[str]:
    if rpc.client_streaming:
        raise SystemExit(f"{service.name}.{m.rpc} streams requests: write it by hand")
    stream = rpc.server_streaming
    in_module, in_type = _type_name(rpc.input_type)
    out_module, out_type = _type_name(rpc.output_type)
    modules.add(in_module)
    if m.params is None:
        parts = [f"request: {in_type} | Mapping[str, Any] | None = None", "/", "*"]
        request = m.request or "build({In}, request, fields)"
    else:
        parts = [p for p in re.split(r",\s*(?![^\[]*\])", m.params) if p]
        if "*" not in parts:
            parts.append("*")
        request = m.request or "{In}()"
    parts.append("timeout: float | None = None")
    if service.metadata:
        parts.append("metadata: Metadata = None")
    if m.params is None:
        parts.append("**fields: Any")
    returns = m.returns
    if returns is None:
        modules.add(out_module)
        returns = f"{'AsyncIterator' if aio else 'Iterator'}[{out_type}]" if stream else out_type
    head = f"{'async ' if aio and not stream else ''}def {m.name}"
    lines = _wrap(head, ["self", *parts], f" -> {returns}:")
    lines += _doc(m.doc, "        ")
    req = f"        req = {request.format(In=in_type)}"
    if len(req) > WIDTH and "(" in req:
        head, rest = req.split("(", 1)
        req = f"{head}(\n" + "\n".join(_pack(rest, "            "))
    lines.append(req)
    args = f"self.stub.{m.rpc}, req, timeout"
    if service.metadata:
        args += ", metadata"
    if m.operator:
        args += ", operator=True"
    if stream:
        lines.append(f"        return self._stream({args})")
        return lines
    call = f"self.{service.call}({args})"
    if aio:
        call = f"await {call}" if m.result == "{}" else f"(await {call})"
    value = m.result.format(call)
    lines.append(f"        {value}" if returns == "None" else f"        return {value}")
    return lines


def _declarations(service: Service, aio: bool) -> list[str]:
    """What a mixin needs of the class that uses it (for the type checker)."""
    a = "async " if aio else ""
    lines = ["    if TYPE_CHECKING:", "        stub: Any", ""]
    if service.call == "_unary":
        it = "AsyncIterator" if aio else "Iterator"
        lines += [
            f"        {a}def _unary(",
            "            self, method: Any, request: Any, "
            "timeout: float | None, metadata: Metadata,",
            "            *, operator: bool = False,",
            "        ) -> Any: ...",
            "",
            "        def _stream(",
            "            self, method: Any, request: Any, "
            "timeout: float | None, metadata: Metadata",
            f"        ) -> {it}[Any]: ...",
        ]
    else:
        lines.append(
            f"        {a}def _call("
            "self, method: Any, request: Any, timeout: float | None) -> Any: ..."
        )
    return lines


def render_service(service: Service) -> str:
    """The generated module of one service: its sync and async mixins."""
    import importlib

    proto = importlib.import_module(f"tokenwire.v1.{service.proto_module}")
    rpcs = proto.DESCRIPTOR.services_by_name[service.name].methods_by_name
    named = {m.rpc for m in service.methods}
    if unknown := (named | set(service.not_exposed)) - set(rpcs):
        raise SystemExit(f"{service.name} has no RPC {sorted(unknown)}")
    missing = set(rpcs) - named - set(service.not_exposed)
    if missing:
        raise SystemExit(f"{service.name}.{sorted(missing)}: add to the table or not_exposed")
    modules: set[str] = set()
    classes: list[str] = []
    for aio in (False, True):
        name = f"{'Async' if aio else ''}{service.mixin}"
        style = "asyncio" if aio else "blocking"
        body = [f"class {name}:", *_doc(f"{service.doc[:-1]}; {style}.", "    "), ""]
        body += _declarations(service, aio)
        for m in service.methods:
            body.append("")
            body += _method(service, m, rpcs[m.rpc], aio, modules)
        classes.append("\n".join(body))
    v1 = ", ".join(sorted(modules))
    if len(f"from tokenwire.v1 import {v1}") > WIDTH:
        v1 = "(\n" + "".join(f"    {m},\n" for m in sorted(modules)) + ")"
    abc = ["AsyncIterator", "Iterator", "Mapping", "Sequence"]
    used = [n for n in abc if any(f"{n}[" in c for c in classes)]
    common = [n for n in ("Metadata", "build", "struct") if any(
        f"{n}(" in c or f": {n}" in c for c in classes)]
    header = f'''"""{service.name}'s methods, sync and async twins from one source.

Generated by tools/gen_client.py from the tokenwire.v1 service descriptors
and its table of methods. DO NOT EDIT: change the table and run
`python tools/gen_client.py` (tests/pure/test_client_methods_fresh.py fails
while this file is stale). The classes using these mixins only do I/O.
"""
# The async methods take a gRPC deadline (`timeout`), like the sync ones.
# ruff: noqa: ASYNC109

from __future__ import annotations

from collections.abc import {", ".join(used)}
from typing import TYPE_CHECKING, Any

from tokenwire.client._common import {", ".join(common)}
from tokenwire.v1 import {v1}
'''
    return header + "\n\n" + "\n\n\n".join(classes) + "\n"


def render() -> dict[pathlib.Path, str]:
    """Every generated module, by its path."""
    sys.path.insert(0, str(ROOT / "client"))
    return {PACKAGE / f"{s.out}.py": render_service(s) for s in SERVICES}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when a module is stale")
    ns = parser.parse_args(argv)
    stale = []
    for path, text in render().items():
        if ns.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path)
        else:
            path.write_text(text)
    for path in stale:
        print(f"{path.relative_to(ROOT)} is stale: run python tools/gen_client.py", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
