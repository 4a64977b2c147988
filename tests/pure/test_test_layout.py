"""The test tree: no test module imports another test module (shared cases
and helpers live in helper modules such as tests/cases.py, tests/servers.py)."""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parents[1]


def _imported_test_modules(path: pathlib.Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        found += [
            n for n in names if n.startswith("tests.") and n.split(".")[-1].startswith("test_")
        ]
    return found


def test_no_test_module_imports_another() -> None:
    offenders = {
        str(p.relative_to(TESTS)): mods for p in TESTS.rglob("test_*.py")
        if (mods := _imported_test_modules(p))
    }
    assert offenders == {}


def test_the_check_sees_such_an_import(tmp_path: pathlib.Path) -> None:
    module = tmp_path / "test_x.py"
    module.write_text("from tests.unit.inference.test_validation_matrix import CHAT_CASES\n")
    assert _imported_test_modules(module) == ["tests.unit.inference.test_validation_matrix"]
