"""`buf lint` (STANDARD rules, exceptions named in buf.yaml) passes over proto/.

buf lints the descriptor image tools/gen_proto.py builds (it carries the
google/api imports from googleapis-common-protos), so no network is needed.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
BUF = shutil.which("buf", path=str(pathlib.Path(sys.executable).parent)) or shutil.which("buf")


@pytest.mark.skipif(BUF is None, reason="buf not installed (pip install buf-bin, the dev extra)")
def test_buf_lint_is_clean(tmp_path: pathlib.Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--out-dir", str(tmp_path)],
        check=True,
    )
    image = tmp_path / "gateway" / "tokenwire.pb"
    assert BUF is not None
    done = subprocess.run(
        [BUF, "lint", f"{image}#format=binpb", "--path", "tokenwire",
         "--config", str(ROOT / "buf.yaml")],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
