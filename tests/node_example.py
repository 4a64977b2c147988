"""Running the Node.js example client (examples/node) from tests: installs
its npm dependencies on first use (`npm ci`, node_modules is git-ignored)."""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

import pytest

from tests.servers import ROOT

NODE_DIR = ROOT / "examples" / "node"


def ensure_node_example() -> str:
    """The node binary, with examples/node/node_modules installed from the lock file."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("Node.js (node and npm) is not installed")
    stamp = NODE_DIR / "node_modules" / ".package-lock.json"
    lock = NODE_DIR / "package-lock.json"
    if not stamp.exists() or stamp.stat().st_mtime < lock.stat().st_mtime:
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=NODE_DIR, check=True,
                       capture_output=True, timeout=600)
    return node


def run_chat_js(node: str, address: str, *args: str) -> dict[str, Any]:
    out = subprocess.run(
        [node, str(NODE_DIR / "chat.js"), "--server", address, "--json", *args],
        capture_output=True, text=True, timeout=300,
    )
    assert out.returncode == 0, out.stderr
    return dict(json.loads(out.stdout))
