"""The committed generated code and descriptor set match proto/."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[3]


def test_generated_code_is_fresh(tmp_path: pathlib.Path) -> None:
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gen_proto.py"), "--out-dir", str(tmp_path)],
        check=True,
    )
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert fresh, "generator wrote nothing"
    stale = [
        str(rel) for rel in fresh if (ROOT / rel).read_bytes() != (tmp_path / rel).read_bytes()
    ]
    assert not stale, f"generated files are stale, run `make proto`: {stale}"
    committed = sorted(
        p.relative_to(ROOT) for p in (ROOT / "client" / "tokenwire" / "v1").glob("*_pb2*")
    )
    extra = sorted(set(committed) - set(fresh))
    assert not extra, f"generated files without a proto: {extra}"
