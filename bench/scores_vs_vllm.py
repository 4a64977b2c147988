"""Side by side: vLLM's own OpenAI server and tokenwire (serve + Envoy) on
/score and /rerank, the same bodies, in vLLM's three scoring ways: a
cross-encoder (a tiny random BERT reranker with segment ids, and a tiny
sequence-classification Llama with one label: vLLM's "LLM as reranker"),
a bi-encoder (the tiny random Llama as an embedding model) and late
interaction (the same with pooling task token_embed); and what each
refuses. Prints the keys only one side prints, the order, the largest
difference between the scores and the usage.

    .venv/bin/python -m bench.scores_vs_vllm    (about 4 minutes here)

Results: docs/contract.md ("Scores and reranking").
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from bench import systems
from bench.vllm_side import compare_bodies
from tests.engine.checkpoints import build_bert_cross_encoder, build_classifier

TINY = systems.ROOT / ".models" / "tiny-random-llama"
QUERY = "What is the capital of France?"
DOCS = ["Paris is the capital of France.", "Bananas are yellow.", "France borders Spain."]
BODIES = {
    "score 1:N": ("/score", {"queries": QUERY, "documents": DOCS}),
    "score N:N (text_1, text_2)": ("/score", {"text_1": ["capital?", "fruit?"],
                                              "text_2": DOCS[:2]}),
    "score data_1 / data_2, cut documents": ("/v1/score", {
        "data_1": QUERY, "data_2": DOCS, "max_tokens_per_doc": 3}),
    "score truncated": ("/score", {"queries": QUERY, "documents": DOCS,
                                   "truncate_prompt_tokens": 8}),
    "score truncated on the left": ("/score", {"queries": QUERY, "documents": DOCS,
                                               "truncate_prompt_tokens": 8,
                                               "truncation_side": "left"}),
    "rerank": ("/rerank", {"query": QUERY, "documents": DOCS}),
    "rerank top_n (v2)": ("/v2/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2}),
    "score 2:3 (both refuse)": ("/score", {"queries": ["a", "b"], "documents": DOCS}),
}
REFUSED = {"score on a 3-label classifier (both refuse)": ("/score", {"queries": "a",
                                                                     "documents": "b"})}


def _items(body: dict[str, Any]) -> list[dict[str, Any]]:
    return body.get("data") or body.get("results") or []


def _score(item: dict[str, Any]) -> float:
    return float(item.get("score", item.get("relevance_score", 0.0)))


def _compare(a: dict[str, Any], b: dict[str, Any]) -> None:
    print(f"  keys only vLLM prints: {sorted(set(a) - set(b))}; only tokenwire: "
          f"{sorted(set(b) - set(a))}")
    ia, ib = _items(a), _items(b)
    keys = [(sorted(set(x) - set(y)), sorted(set(y) - set(x))) for x, y in zip(ia, ib,
                                                                                 strict=False)]
    print(f"  items: {len(ia)} / {len(ib)}; item keys (only vLLM, only tokenwire): {keys[:1]}")
    print(f"  order: {[x['index'] for x in ia]} / {[y['index'] for y in ib]}; documents "
          f"equal: {[x.get('document') for x in ia] == [y.get('document') for y in ib]}")
    worst = max((abs(_score(x) - _score(y)) for x, y in zip(ia, ib, strict=False)),
                default=None)
    print(f"  largest difference between the scores: {worst} (vLLM's {[_score(x) for x in ia]})")
    print(f"  usage: {a.get('usage')} / {b.get('usage')}; id {a.get('id', '')[:6]}… / "
          f"{b.get('id', '')[:6]}…")


def _compare_all(title: str, model: Path, engine: list[str], bodies: dict[str, Any]) -> None:
    print(f"\n#### {title}")
    compare_bodies(str(model), engine, bodies, _compare, log_name="scores-vs-vllm.log")


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        bert = build_bert_cross_encoder(Path(folder) / "bert")
        _compare_all("cross-encoder: tiny BERT reranker", bert,
                     ["--runner", "pooling", "--max-model-len", "128"], BODIES)
        llama = build_classifier(TINY, Path(folder) / "llama-ce", ("relevant",))
        _compare_all("cross-encoder: Llama with one label", llama, ["--runner", "pooling"],
                     BODIES)
        three = build_classifier(TINY, Path(folder) / "llama-3", ("bad", "okay", "good"))
        _compare_all("a 3-label classifier", three, ["--runner", "pooling"], REFUSED)
    _compare_all("bi-encoder: the tiny Llama embedding", TINY,
                 ["--runner", "pooling", "--convert", "embed"], BODIES)
    _compare_all("late interaction: token embeddings", TINY,
                 ["--runner", "pooling", "--convert", "embed", "--pooler-config",
                  '{"task": "token_embed"}'], BODIES)
    return 0


if __name__ == "__main__":
    sys.exit(main())
