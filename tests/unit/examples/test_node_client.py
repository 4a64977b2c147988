"""The contract serves another language: the Node.js client in
examples/node (@grpc/grpc-js + @grpc/proto-loader, stubs built from
proto/) calls chat, streams token-id deltas, and continues a session turn."""

from __future__ import annotations

import subprocess

from tests.node_example import NODE_DIR, ensure_node_example, run_chat_js
from tests.servers import ThreadServer
from tokenwire.server.engine.fake.engine import EOS, FakeEngine


def test_node_client_reads_token_ids(fake_server: ThreadServer, fake_engine: FakeEngine) -> None:
    node = ensure_node_example()
    r = run_chat_js(node, fake_server.address, "Hello", "from", "Node")
    assert r["model"] == "fake-model" and r["text"] == "Hello from the fake engine."
    assert r["token_ids"][-1] == EOS
    assert fake_engine.decode(r["token_ids"], skip_special_tokens=True) == r["text"]
    assert fake_engine.decode(r["prompt_token_ids"]).endswith(
        "Hello from Node<|im_end|>\n<|im_start|>assistant\n"
    )
    assert r["stream"]["token_ids"] == r["token_ids"] and r["stream"]["text"] == r["text"]
    t1, t2 = r["session"]["turn1"], r["session"]["turn2"]
    assert (
        t2["prompt_token_ids"] == t1["prompt_token_ids"] + t1["token_ids"] + t2["suffix_token_ids"]
    )
    assert "And of Germany?" in fake_engine.decode(t2["suffix_token_ids"])


def test_node_client_reports_errors(fake_server: ThreadServer) -> None:
    node = ensure_node_example()
    out = subprocess.run([node, str(NODE_DIR / "chat.js"), "--server", "127.0.0.1:1"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and "error: code 14" in out.stderr
