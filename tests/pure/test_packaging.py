"""The wheel holds every package: pyproject's [tool.setuptools] packages list
names every folder with an __init__.py under the mapped source roots."""

from __future__ import annotations

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


def test_no_module_over_400_lines() -> None:
    """Server, client, gateway, tools, bench and examples (generated code aside)."""
    folders = ("server", "client/tokenwire", "gateway", "tools", "bench", "examples")
    long = {str(p.relative_to(ROOT)): n for folder in folders for p in (ROOT / folder).rglob("*.py")
            if "v1" not in p.relative_to(ROOT).parts
            and (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
