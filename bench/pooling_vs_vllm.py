"""Side by side: vLLM's own OpenAI server and tokenwire (serve + Envoy) on
pooling models, the same bodies: /v1/embeddings (the tiny random Llama with
`--runner pooling --convert embed`; float and base64, a batch, token ids)
and Cohere's /v2/embed (every embedding type, truncation)
and /classify and /pooling (a tiny sequence-classification Llama built
here; then served with pooling task token_classify: a process reward
model's shape), their chat form (`messages`: a reward model scoring a
conversation), and what each refuses. Prints the
keys only one side prints, and the largest difference between the numbers.

    .venv/bin/python -m bench.pooling_vs_vllm    (about 2 minutes here)

Results: docs/contract.md ("Pooling models").
"""

from __future__ import annotations

import base64
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import systems
from bench.vllm_side import compare_bodies
from tests.engine.checkpoints import build_classifier

TINY = systems.ROOT / ".models" / "tiny-random-llama"
ROLLOUT = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
BODIES = {
    "embeddings float": ("/v1/embeddings", {"input": ["The capital of France", "Paris"],
                                             "encoding_format": "float"}),
    "embeddings base64": ("/v1/embeddings", {"input": "The capital of France",
                                              "encoding_format": "base64"}),
    "embeddings ids": ("/v1/embeddings", {"input": [[1, 40, 41, 42], [1, 50]],
                                           "encoding_format": "float"}),
    "embeddings of a conversation": ("/v1/embeddings", {"messages": ROLLOUT,
                                                         "encoding_format": "float"}),
    "cohere embed, every type": ("/v2/embed", {
        "texts": ["The capital of France", "Paris"],
        "embedding_types": ["float", "binary", "ubinary", "base64"]}),
    "cohere embed, truncate START": ("/v2/embed", {"texts": ["The capital of France is Paris"],
                                                   "truncate": "START", "max_tokens": 3}),
    "cohere embed, NONE over max_tokens (both refuse)": ("/v2/embed", {
        "texts": ["The capital of France is Paris"], "truncate": "NONE", "max_tokens": 3}),
    "cohere embed, input_type the model lacks (both refuse)": ("/v2/embed", {
        "texts": ["x"], "input_type": "search_query"}),
    "embeddings truncated": ("/v1/embeddings", {"input": "The capital of France is Paris",
                                                "truncate_prompt_tokens": 3,
                                                "encoding_format": "float"}),
}
CLASSIFY = {
    "classify": ("/classify", {"input": ["A fine answer.", "no"]}),
    "classify a conversation (a reward model)": ("/classify", {"messages": ROLLOUT}),
    "classify a conversation, generation prompt": ("/classify", {
        "messages": ROLLOUT, "add_generation_prompt": True}),
    "pooling a conversation": ("/pooling", {"messages": ROLLOUT}),
    "pooling default task": ("/pooling", {"input": ["A fine answer.", "no"]}),
    "embeddings on a classifier (both refuse)": ("/v1/embeddings", {"input": "x"}),
}
PRM = {
    "pooling token_classify": ("/pooling", {"input": "Step 1. Step 2.",
                                            "task": "token_classify"}),
    "pooling another task (both refuse)": ("/pooling", {"input": "x", "task": "classify"}),
    "classify on a token_classify server (both refuse)": ("/classify", {"input": "x"}),
}


def _numbers(item: dict[str, Any]) -> list[float]:
    value = item.get("embedding", item.get("probs", item.get("data")))
    if isinstance(value, str):
        raw = base64.b64decode(value)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))
    flat: list[float] = []
    for x in value or []:  # a token-level task's rows, flattened
        flat.extend(x if isinstance(x, list) else [x])
    return flat


def _compare_cohere(a: dict[str, Any], b: dict[str, Any]) -> None:
    ea, eb = a["embeddings"], b["embeddings"]
    print(f"  embedding types: {sorted(ea)} / {sorted(eb)}; meta {a.get('meta')} / "
          f"{b.get('meta')}; texts equal: {a.get('texts') == b.get('texts')}")
    for kind in sorted(set(ea) & set(eb)):
        if kind == "base64":
            same = ea[kind] == eb[kind]
            print(f"  base64: byte-equal {same}")
            continue
        worst = max(abs(p - q) for x, y in zip(ea[kind], eb[kind], strict=True)
                    for p, q in zip(x, y, strict=True))
        print(f"  {kind}: largest difference {worst}")


def _compare(a: dict[str, Any], b: dict[str, Any]) -> None:
    print(f"  keys only vLLM prints: {sorted(set(a) - set(b))}; only tokenwire: "
          f"{sorted(set(b) - set(a))}")
    if "embeddings" in a:
        _compare_cohere(a, b)
        return
    da, db = a.get("data") or [], b.get("data") or []
    pairs = list(zip(da, db, strict=False))  # (counts printed above)
    keys = [(sorted(set(x) - set(y)), sorted(set(y) - set(x))) for x, y in pairs]
    print(f"  data items: {len(da)} / {len(db)}; item keys (only vLLM, only tokenwire): "
          f"{keys[:1]}")
    worst = max((abs(p - q) for x, y in pairs
                 for p, q in zip(_numbers(x), _numbers(y), strict=False)), default=None)
    print(f"  largest difference between the numbers: {worst}; labels "
          f"{[x.get('label') for x in da]} / {[y.get('label') for y in db]}")
    print(f"  usage: {a.get('usage')} / {b.get('usage')}")


def _compare_all(model: Path, engine: list[str], bodies: dict[str, Any]) -> None:
    compare_bodies(str(model), engine, bodies, _compare, log_name="pooling-vs-vllm.log")


def main() -> int:
    _compare_all(TINY, ["--runner", "pooling", "--convert", "embed"], BODIES)
    with tempfile.TemporaryDirectory() as folder:
        model = build_classifier(TINY, Path(folder), ("bad", "okay", "good"))
        _compare_all(model, ["--runner", "pooling"], CLASSIFY)
        _compare_all(model, ["--runner", "pooling", "--pooler-config",
                              '{"task": "token_classify"}'], PRM)
    return 0


if __name__ == "__main__":
    sys.exit(main())
