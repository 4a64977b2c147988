"""`tokenwire chat` and `tokenwire complete` as a user runs them (a
subprocess against a fake-engine server)."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys

from tests.servers import ThreadServer
from tokenwire.server.engine.fake.engine import EOS

REPLY = "Hello from the fake engine."


def tokenwire(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tokenwire.cli", *args], input=stdin, capture_output=True,
        text=True, timeout=60,
    )


def test_chat_json_three_turns_continue_token_exactly(fake_server: ThreadServer) -> None:
    for mode in ("session", "tokens"):
        out = tokenwire(
            "chat",
            "--server",
            fake_server.address,
            "--json",
            "--mode",
            mode,
            stdin="What is the capital of France?\nAnd of Germany?\n\nWhich is bigger?\n"
                  "/exit\nignored\n",
        )
        assert out.returncode == 0, out.stderr
        turns = [json.loads(line) for line in out.stdout.splitlines()]
        assert [t["turn"] for t in turns] == [1, 2, 3]
        for a, b in itertools.pairwise(turns):
            assert b["prompt_ids"] == a["prompt_ids"] + a["completion_ids"] + b["suffix_ids"]
        for t in turns:
            assert t["text"] == REPLY and t["completion_ids"][-1] == EOS
            assert len(t["logprobs"]) == len(t["completion_ids"])


def test_chat_streams_text_and_shows_tokens(fake_server: ThreadServer) -> None:
    out = tokenwire("chat", "--server", fake_server.address, stdin="Hi\nAgain\n")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"{REPLY}\n{REPLY}\n"
    out = tokenwire("chat", "--server", fake_server.address, "--show-tokens", "--top-logprobs", "2",
                    "--color", "always", stdin="Hi\n")
    assert out.returncode == 0, out.stderr
    assert "\033[" in out.stdout and "alt:" in out.stdout
    lines = [ln for ln in out.stdout.splitlines() if "'H'" in ln]
    assert lines and " 75" in lines[0], "the id of 'H' (72 + 3) is shown"
    plain = tokenwire(
        "complete", "--server", fake_server.address, "--show-tokens", "--color", "never", "Hi"
    )
    assert (
        "\033[" not in plain.stdout
        and f"{EOS:>6}" in plain.stdout
        and "finish stop" in plain.stdout
    )


def test_complete_one_shot_and_errors(fake_server: ThreadServer) -> None:
    out = tokenwire("complete", "--server", fake_server.address, "What", "is", "this?")
    assert out.returncode == 0 and out.stdout == REPLY + "\n"
    out = tokenwire("complete", "--server", fake_server.address, "--json", stdin="From stdin\n")
    turn = json.loads(out.stdout)
    assert turn["text"] == REPLY and turn["prompt_ids"] and turn["completion_ids"][-1] == EOS
    out = tokenwire("complete", "--server", fake_server.address, "--max-tokens", "-1", "Hi")
    assert out.returncode == 1 and "INVALID_ARGUMENT" in out.stderr and "max_tokens" in out.stderr
    out = tokenwire("chat", "--server", fake_server.address, "--temperature", "-3", stdin="Hi\n")
    assert out.returncode == 1 and "temperature" in out.stderr
