"""Aggregate bench runs: medians over repetitions, ratios, JSON, PNG chart."""

from __future__ import annotations

import json
import pathlib
import statistics
from typing import Any

NAMES = {
    "A": "vLLM AsyncLLM in-process",
    "B": "tokenwire gRPC chat",
    "G": "tokenwire gRPC Generate (ids)",
    "S": "tokenwire gRPC chat, 16 tokens/chunk",
    "C": "tokenwire REST+SSE via Envoy",
    "D": "vLLM OpenAI server SSE",
    "E": "vLLM gRPC (smg servicer)",
    "F": "smg gateway REST+SSE",
}
ORDER = "ABGSCDEF"
PAIRS = [("B", "A"), ("G", "A"), ("S", "A"), ("C", "A"), ("B", "E"), ("G", "E"), ("C", "F"), ("C", "D")]


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    k = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[k]


def _one(run: dict[str, Any]) -> dict[str, Any]:
    recs = run["records"]
    tokens = sum(r["tokens"] for r in recs)
    errors = sum(1 for r in recs if r.get("error"))
    ttft = [r["first"] - r["start"] for r in recs if r.get("first")]
    gaps = [g for r in recs for g in r["gaps"]]
    return {
        "tok_s": tokens / run["wall"],
        "req_s": len(recs) / run["wall"],
        "ttft_p50_ms": (_pct(ttft, 0.5) or 0) * 1000,
        "ttft_p99_ms": (_pct(ttft, 0.99) or 0) * 1000,
        "itl_p50_ms": (_pct(gaps, 0.5) or 0) * 1000,
        "itl_p99_ms": (_pct(gaps, 0.99) or 0) * 1000,
        "cpu_s_per_1k_tok": run["cpu_seconds"] / max(1, tokens) * 1000,
        "peak_rss_mib": run.get("peak_rss", 0) / 2**20,
        "tokens": tokens,
        "errors": errors,
    }


def summarize(runs: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["system"], run["concurrency"]), []).append(_one(run))
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    for (system, conc), reps in sorted(groups.items()):
        med = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
        med["reps"] = len(reps)
        med["tok_s_all"] = [r["tok_s"] for r in reps]
        cells.setdefault(system, {})[str(conc)] = med
    ratios: dict[str, dict[str, float]] = {}
    for num, den in PAIRS:
        if num in cells and den in cells:
            ratios[f"{num}/{den}"] = {
                c: cells[num][c]["tok_s"] / cells[den][c]["tok_s"]
                for c in cells[num] if c in cells[den] and cells[den][c]["tok_s"] > 0
            }
    return {"meta": meta, "cells": cells, "ratios": ratios, "names": NAMES}


def table(summary: dict[str, Any]) -> str:
    cells = summary["cells"]
    a = cells.get("A", {})
    lines = [
        "| system | conc | tok/s | xA | req/s | TTFT p50/p99 ms | ITL p50/p99 ms | CPU s/1k tok | peak RSS MiB | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system in sorted(cells, key=ORDER.index):
        for conc, m in sorted(cells[system].items(), key=lambda kv: int(kv[0])):
            ratio = m["tok_s"] / a[conc]["tok_s"] if conc in a and a[conc]["tok_s"] else float("nan")
            lines.append(
                f"| {system} {NAMES[system]} | {conc} | {m['tok_s']:.0f} | {ratio:.2f} | {m['req_s']:.2f} | "
                f"{m['ttft_p50_ms']:.0f}/{m['ttft_p99_ms']:.0f} | {m['itl_p50_ms']:.1f}/{m['itl_p99_ms']:.1f} | "
                f"{m['cpu_s_per_1k_tok']:.2f} | {m['peak_rss_mib']:.0f} | {m['errors']:.0f} |"
            )
    lines.append("")
    concs = sorted({c for r in summary["ratios"].values() for c in r}, key=int)
    lines.append("| ratio (tok/s, medians) | " + " | ".join(f"c={c}" for c in concs) + " |")
    lines.append("|---|" + "---|" * len(concs))
    for name, vals in summary["ratios"].items():
        lines.append(f"| {name} | " + " | ".join(f"{vals[c]:.2f}" if c in vals else "-" for c in concs) + " |")
    return "\n".join(lines)


def chart(summary: dict[str, Any], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cells = summary["cells"]
    concs = sorted({int(c) for s in cells.values() for c in s})
    systems = sorted(cells, key=ORDER.index)
    fig, ax = plt.subplots(figsize=(9, 4.8))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        xs = [j + i * width for j in range(len(concs))]
        ys = [cells[system].get(str(c), {}).get("tok_s", 0) for c in concs]
        ax.bar(xs, ys, width, label=f"{system}: {NAMES[system]}")
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(concs))])
    ax.set_xticklabels([f"concurrency {c}" for c in concs])
    ax.set_ylabel("output tokens/s (received ids, median)")
    ax.set_title("Serving-layer cost on the tiny random model (higher is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(summary: dict[str, Any], out: pathlib.Path) -> str:
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(summary, indent=2))
    text = table(summary)
    (out / "results.md").write_text(text + "\n")
    try:
        chart(summary, out / "results.png")
    except ImportError:
        text += "\n(matplotlib missing: no chart)"
    return text
