"""The layers are a contract: import-linter checks pyproject's
[tool.importlinter] contracts over the package as installed
(tools/lint_imports.py, also run by `make lint`), import cycles included. Every server module also
imports on its own (no hidden order between modules)."""

from __future__ import annotations

import importlib
import pathlib
import shutil
import sys

import pytest

import tokenwire.server

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import lint_imports  # noqa: E402

SERVER = pathlib.Path(tokenwire.server.__file__).parent
MODULES = sorted(
    ".".join(p.relative_to(SERVER).with_suffix("").parts)
    for p in SERVER.rglob("*.py") if p.stem != "__init__"
)
VLLM = {"engine.vllm.adapter"}  # imports vLLM; imported only where vLLM is


def test_the_contracts_are_kept(tmp_path: pathlib.Path) -> None:
    result = lint_imports.lint_imports(lint_imports.build_view(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 7 kept, 0 broken." in result.stdout


def test_an_upward_import_a_stray_vllm_import_a_picked_adapter_a_cycle_and_a_borrowing_kind_are_caught(  # noqa: E501
    tmp_path: pathlib.Path,
) -> None:
    view = lint_imports.build_view(tmp_path / "view")
    server = view / "tokenwire" / "server"
    server.unlink()  # a copy to break, not the source tree
    shutil.copytree(SERVER, server, ignore=shutil.ignore_patterns("__pycache__"))
    (server / "core" / "upward.py").write_text("from tokenwire.server.api import servicer\n")
    (server / "inference" / "stray.py").write_text("import vllm\n")
    (server / "api" / "picks.py").write_text("from tokenwire.server.engine.fake import engine\n")
    (server / "inference" / "loop_a.py").write_text(
        "from tokenwire.server.inference import loop_b\n"
    )
    (server / "inference" / "loop_b.py").write_text(
        "from tokenwire.server.inference import loop_a\n"
    )
    (server / "inference" / "completion" / "borrows.py").write_text(
        "from tokenwire.server.inference.chat import request\n"
    )
    (server / "inference" / "shared" / "leans.py").write_text(
        "from tokenwire.server.inference.generate import service\n")
    result = lint_imports.lint_imports(view)
    assert result.returncode == 1
    assert "Contracts: 1 kept, 6 broken." in result.stdout, result.stdout
    assert "tokenwire.server.core.upward -> tokenwire.server.api.servicer" in result.stdout
    assert "tokenwire.server.inference.stray -> vllm" in result.stdout, result.stdout
    assert "tokenwire.server.api.picks -> tokenwire.server.engine.fake" in result.stdout
    assert "No cycles are allowed in tokenwire.server.inference." in result.stdout
    assert "tokenwire.server.inference.completion is not allowed to import" in result.stdout
    assert "tokenwire.server.inference.shared.leans -> " in result.stdout, result.stdout


@pytest.mark.parametrize("name", [m for m in MODULES if m not in VLLM])
def test_each_server_module_imports_on_its_own(name: str) -> None:
    importlib.import_module(f"tokenwire.server.{name}")
