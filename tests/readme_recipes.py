"""Run the README's recipes against a test server: its grpcurl blocks and
its client-library Python blocks, with the address swapped in. Keeps the
README honest."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from tests.servers import ROOT

README = ROOT / "README.md"
README_ADDRESS = "127.0.0.1:50051"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def blocks(lang: str, must_contain: str) -> list[str]:
    return [
        body
        for kind, body in BLOCK.findall(README.read_text())
        if kind == lang and must_contain in body
    ]


def run_bash(block: str, address: str) -> str:
    venv_bin = Path(sys.executable).parent
    script = block.replace(README_ADDRESS, address).replace(".venv/bin/", f"{venv_bin}/")
    out = subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, f"{script}\n--- stderr:\n{out.stderr}"
    return out.stdout


def run_python(block: str, address: str) -> str:
    out = subprocess.run([sys.executable, "-c", block.replace(README_ADDRESS, address)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, f"{block}\n--- stderr:\n{out.stderr}"
    return out.stdout


def json_objects(text: str) -> list[dict]:
    """The JSON objects printed one after another (grpcurl's output)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while True:
        i = text.find("{", i)
        if i < 0:
            return out
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:  # a brace of describe's proto text
            i += 1
            continue
        out.append(obj)


def check_grpcurl_recipes(address: str) -> list[dict]:
    """Every grpcurl block of the README runs; the recipes show what they say."""
    found = blocks("bash", "grpcurl")
    assert len(found) >= 2, "the README has the grpcurl recipes and the session recipe"
    output = "".join(run_bash(b, address) for b in found)
    assert "tokenwire.v1.TokenwireService" in output  # list
    assert "message CreateChatCompletionRequest" in output  # describe
    objects = json_objects(output)
    unary = [o for o in objects if o.get("object") == "chat.completion"]
    chunks = [o for o in objects if o.get("object") == "chat.completion.chunk"]
    assert unary and unary[0]["choices"][0]["token_ids"], "unary chat with token ids"
    assert any(c.get("choices", [{}])[0].get("token_ids") for c in chunks), (
        "streamed token-id deltas"
    )
    events = [
        o
        for o in objects
        if "request_id" in o and ("done" in o or "error" in o or "chat_result" in o)
    ]
    assert {"a", "b"} <= {e["request_id"] for e in events}, (
        "the session recipe multiplexes two requests"
    )
    return objects


def check_client_examples(address: str) -> list[str]:
    found = blocks("python", "tokenwire.client")
    assert found, "the README shows the client library"
    conversation = [b for b in found if "Conversation(" in b]
    assert conversation and len(conversation[0].strip().splitlines()) < 20, (
        "a three-turn rollout in < 20 lines"
    )
    return [run_python(b, address) for b in found]
