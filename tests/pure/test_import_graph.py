"""The server's modules import each other without a cycle, counting imports
under TYPE_CHECKING and inside functions too: layers stay layers."""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

import tokenwire.server

PACKAGE = "tokenwire.server"
ROOT = pathlib.Path(tokenwire.server.__file__).parent
MODULES = sorted(
    ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in ROOT.rglob("*.py") if p.stem != "__init__"
)
OPTIONAL = {"engine.vllm.adapter"}  # imports vLLM; checked by the AST walk, imported only if vLLM is


def _imports(name: str) -> set[str]:
    """Server modules that module `name` imports, anywhere in its source."""
    tree = ast.parse((ROOT / f"{name.replace('.', '/')}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith(PACKAGE + "."):
                sub = node.module[len(PACKAGE) + 1:]
                found.add(sub)  # from tokenwire.server.core.errors import X
                found.update(f"{sub}.{a.name}" for a in node.names)  # from tokenwire.server.core import errors
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name[len(PACKAGE) + 1:])
    return found & set(MODULES)


GRAPH = {name: _imports(name) for name in MODULES}


def _cycle() -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(GRAPH[node]):
            if state.get(dep) == 1:
                return [*path[path.index(dep):], dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for name in MODULES:
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def test_the_walk_sees_the_imports() -> None:
    assert "inference.data_plane" in GRAPH["api.servicer"]
    assert "core.serving_state" in GRAPH["inference.prefill"]
    # `from tokenwire.server.core import validation`
    assert "core.validation" in GRAPH["inference.chat.request"]


def test_no_import_cycle_among_server_modules() -> None:
    cycle = _cycle()
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle() -> None:
    saved = set(GRAPH["core.serving_state"])
    GRAPH["core.serving_state"].add("api.servicer")  # servicer -> ... -> serving_state -> servicer
    try:
        assert _cycle() is not None
    finally:
        GRAPH["core.serving_state"] = saved


@pytest.mark.parametrize("name", [m for m in MODULES if m not in OPTIONAL])
def test_each_server_module_imports_on_its_own(name: str) -> None:
    importlib.import_module(f"{PACKAGE}.{name}")
