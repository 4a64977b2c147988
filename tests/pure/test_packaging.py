"""The wheel holds every package: pyproject's [tool.setuptools] packages list
names every folder with an __init__.py under the mapped source roots."""

from __future__ import annotations

import ast
import pathlib
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_every_package_is_listed_for_the_wheel() -> None:
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    roots = {name: ROOT / folder for name, folder in setuptools["package-dir"].items()}
    found = set()
    for name, folder in roots.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            found.add(".".join([name, *rel.parts]))
    assert found - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - found == set(), "these listed packages do not exist"


FOLDERS = ("server", "client/tokenwire", "gateway", "tools", "bench", "examples")
# A module over LONG lines is a sign that it holds several jobs: it may be
# longer only when it is one job, named here with that job (a review, not a
# count to pack lines under: ruff enforces the line length).
LONG = 400
ONE_JOB: dict[str, str] = {}


def _modules() -> list[pathlib.Path]:
    """Our Python modules (generated code aside)."""
    return [p for folder in FOLDERS for p in (ROOT / folder).rglob("*.py")
            if "v1" not in p.relative_to(ROOT).parts]


def test_every_module_says_its_job() -> None:
    """Each module opens with a docstring saying what it holds."""
    silent = [str(p.relative_to(ROOT)) for p in _modules()
              if p.stat().st_size and not ast.get_docstring(ast.parse(p.read_text()))]
    assert silent == []


def test_a_long_module_is_one_job() -> None:
    """Over LONG lines only a module named in ONE_JOB, with its one job."""
    long = {str(p.relative_to(ROOT)): n for p in _modules()
            if (n := len(p.read_text().splitlines())) > LONG}
    assert set(long) - set(ONE_JOB) == set(), (
        f"{long}: split where the meaning splits, or name the module's one job in ONE_JOB")
    assert all(job.strip() for job in ONE_JOB.values())
