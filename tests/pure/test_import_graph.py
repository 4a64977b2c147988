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
MODULES = sorted(p.stem for p in ROOT.glob("*.py") if p.stem != "__init__")
OPTIONAL = {"vllm_engine"}  # imports vLLM; checked by the AST walk, imported only if vLLM is


def _imports(name: str) -> set[str]:
    """Server modules that module `name` imports, anywhere in its source."""
    tree = ast.parse((ROOT / f"{name}.py").read_text())
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == PACKAGE:  # from tokenwire.server import x
                found.update(a.name for a in node.names)
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name.split(".")[2])
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
    assert "data_plane" in GRAPH["servicer"]
    assert "serving_state" in GRAPH["prefill"]
    assert "validation" in GRAPH["chat_request"]  # `from tokenwire.server import validation`


def test_no_import_cycle_among_server_modules() -> None:
    cycle = _cycle()
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_check_finds_a_cycle() -> None:
    saved = set(GRAPH["serving_state"])
    GRAPH["serving_state"].add("servicer")  # servicer -> ... -> serving_state -> servicer
    try:
        assert _cycle() is not None
    finally:
        GRAPH["serving_state"] = saved


@pytest.mark.parametrize("name", [m for m in MODULES if m not in OPTIONAL])
def test_each_server_module_imports_on_its_own(name: str) -> None:
    importlib.import_module(f"{PACKAGE}.{name}")
