"""docs/architecture.md stays true of the code, both ways: every module it
names exists, every server module is named in it, and every server package
is described."""

from __future__ import annotations

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SERVER = ROOT / "server" / "tokenwire" / "server"
DOC = (ROOT / "docs" / "architecture.md").read_text()
TOP = (
    "client/",
    "server/",
    "gateway/",
    "tests/",
    "tools/",
    "bench/",
    "examples/",
    "deploy/",
    "proto/",
)
NAMED = sorted(set(re.findall(r"`([\w./-]+\.py)`", DOC)))
MODULES = sorted(
    "/".join(p.relative_to(SERVER).parts) for p in SERVER.rglob("*.py")
    if p.name != "__init__.py"
)
PACKAGES = sorted(
    "/".join(p.parent.relative_to(SERVER).parts) + "/"
    for p in SERVER.rglob("__init__.py") if p.parent != SERVER
)


def _exists(name: str) -> bool:
    if name.startswith(TOP):
        return (ROOT / name).is_file()
    if "/" in name:  # a server module, named from the package root
        return (SERVER / name).is_file()
    return any(ROOT.joinpath(top).rglob(name) for top in ("client", "server", "gateway"))


def test_the_doc_names_modules() -> None:
    assert len(NAMED) > 50
    assert "inference/data_plane.py" in NAMED


@pytest.mark.parametrize("name", NAMED)
def test_every_module_named_exists(name: str) -> None:
    assert _exists(name), f"docs/architecture.md names {name}, which does not exist"


def test_there_are_packages() -> None:
    assert {"core/", "api/", "engine/vllm/", "inference/chat/"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_package_is_described(package: str) -> None:
    assert f"`{package}`" in DOC, f"docs/architecture.md does not describe {package}"


def test_there_are_modules() -> None:
    assert {"inference/data_plane.py", "control/plane.py", "api/servicer.py"} <= set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_every_server_module_is_named(module: str) -> None:
    assert f"`{module}`" in DOC, (
        f"docs/architecture.md does not name {module}: give it a row in its package's table")
