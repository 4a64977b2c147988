"""Check the import contracts of pyproject.toml ([tool.importlinter]) with
import-linter: the server's layers, only the vLLM adapter imports vLLM, only
runtime picks an engine adapter, the client never imports the server.

One distribution maps the package ``tokenwire`` from three folders
([tool.setuptools.package-dir]: client/tokenwire, server/tokenwire/server,
gateway). import-linter (grimp) finds a package's modules by walking the
folder of its top-level package, so it would see only client/tokenwire.
This builds the package as installed, a temporary folder of symlinks (one
per mapped folder), and runs ``lint-imports`` with it first on the path.

    .venv/bin/python tools/lint_imports.py      (also run by `make lint`)
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]


def build_view(dest: pathlib.Path) -> pathlib.Path:
    """The installed layout of every mapped package under `dest` (symlinks
    to the source folders); returns `dest`."""
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapping = pyproject["tool"]["setuptools"]["package-dir"]
    for name, folder in sorted(mapping.items(), key=lambda item: item[0].count(".")):
        source = ROOT / folder
        target = dest.joinpath(*name.split("."))
        if target.is_symlink() and target.resolve() == source.resolve():
            continue  # already inside its parent's folder
        if target.is_symlink():
            target.unlink()
        if "." not in name:  # a top-level package: a real folder, its entries linked
            target.mkdir(parents=True)
            for entry in source.iterdir():
                if entry.name != "__pycache__":
                    (target / entry.name).symlink_to(entry)
        else:
            target.symlink_to(source, target_is_directory=True)
    return dest


def lint_imports(view: pathlib.Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(view), os.environ.get("PYTHONPATH", "")]),
    }
    return subprocess.run(
        [sys.executable, "-c",
         "import sys; from importlinter.cli import lint_imports_command as m; sys.exit(m())",
         "--no-cache", "--no-logo", "--config", str(ROOT / "pyproject.toml")],
        cwd=ROOT, env=env, capture_output=True, text=True, check=False,
    )


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="tokenwire-imports-") as tmp:
        result = lint_imports(build_view(pathlib.Path(tmp)))
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
