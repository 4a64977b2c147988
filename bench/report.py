"""Aggregate bench cells: per-cell figures, medians over repetitions,
per-rep ratios with their spread, issue #27's targets; JSON, table, chart."""

from __future__ import annotations

import json
import pathlib
import statistics
from typing import Any

NAMES = {
    "A": "vLLM AsyncLLM in-process",
    "B": "tokenwire gRPC chat",
    "b": "tokenwire gRPC chat, native transport",
    "G": "tokenwire gRPC Generate (ids)",
    "g": "tokenwire gRPC Generate (ids), native transport",
    "S": "tokenwire gRPC chat, 16 tokens/chunk",
    "C": "tokenwire REST+SSE via Envoy",
    "c": "tokenwire REST+SSE via Envoy, native transport",
    "D": "vLLM OpenAI server SSE",
    "E": "vLLM gRPC (smg servicer)",
    "F": "smg gateway REST+SSE",
    "R": "smg gateway REST+SSE -> tokenwire (VllmEngine)",
}
ORDER = "ABbGgSCcDEFR"
PAIRS = [("B", "E"), ("G", "E"), ("C", "D"), ("C", "F"), ("R", "F"),
         ("b", "B"), ("g", "G"), ("c", "C"),
         ("S", "A"), ("B", "A"), ("G", "A"), ("C", "A")]
# A's serving includes its load generator
CPU_PAIRS = [("B", "E"), ("G", "E"), ("C", "D"), ("C", "F"), ("R", "F"),
             ("B", "D"), ("b", "D"), ("g", "E"), ("c", "D"), ("b", "B"), ("g", "G"), ("c", "C")]
# Envoy's own CPU per token (upstream and downstream sides together): does it
# get cheaper when the server's writes carry several streams (native)?
PROXY_PAIRS = [("c", "C")]
GROUPS = ("serving", "proxy", "engine", "driver")
# (ratio key, comparison, bound, issue), judged on the median of the per-rep ratios.
TARGETS = [("G/E", ">=", 1.0, 27), ("B/E", ">=", 0.95, 27), ("G/E cpu", "<=", 1.0, 27),
           ("C/D", ">=", 1.0, 27), ("C/F", ">=", 1.0, 27),
           ("b/D cpu", "<=", 0.85, 46), ("g/E cpu", "<=", 0.85, 46), ("c/D cpu", "<=", 1.15, 46),
           ("b/B", ">=", 1.0, 46), ("g/G", ">=", 1.0, 46), ("c/C", ">=", 1.0, 46)]


def one(run: dict[str, Any]) -> dict[str, Any]:
    """The figures of one cell (one system, concurrency and rep)."""
    seconds, tokens = run["seconds"], run["tokens"]
    per_1k = 1000 / max(1, tokens)
    cpu = run.get("cpu", {})
    out: dict[str, Any] = {
        "tok_s": tokens / seconds,
        "req_s": run["finished"] / seconds,
        **{k: run[k] for k in ("ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")},
        # The serving layer: what is compared between systems.
        "cpu_layer": (cpu.get("serving", 0.0) + cpu.get("proxy", 0.0)) * per_1k,
        "peak_rss_mib": run.get("peak_rss", 0) / 2**20,
        "tokens": tokens,
        "errors": run.get("errors", 0),
        "idle_timeout": int(bool(run.get("idle_timeout"))),
    }
    for g in GROUPS:
        if g in cpu:
            out[f"cpu_{g}"] = cpu[g] * per_1k
    if "machine" in cpu:  # anything else on the machine, in cores
        out["other_cores"] = (
            max(0.0, cpu["machine"] - sum(cpu.get(g, 0.0) for g in GROUPS)) / seconds
        )
    return out


def spread(values: list[float]) -> dict[str, Any]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values),
            "per_rep": values}


def summarize(runs: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    figures: dict[tuple[str, int, int], dict[str, Any]] = {
        (r["system"], r["concurrency"], r["rep"]): one(r) for r in runs
    }
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for (system, conc, _), f in sorted(figures.items()):
        groups.setdefault((system, conc), []).append(f)
    cells: dict[str, dict[str, dict[str, Any]]] = {}
    for (system, conc), reps in groups.items():
        med: dict[str, Any] = {k: statistics.median(r[k] for r in reps) for k in reps[0]}
        med.update(reps=len(reps), tok_s_min=min(r["tok_s"] for r in reps),
                   tok_s_max=max(r["tok_s"] for r in reps), tok_s_all=[r["tok_s"] for r in reps],
                   errors=sum(r["errors"] for r in reps),
                   idle_timeout=sum(r["idle_timeout"] for r in reps))
        cells.setdefault(system, {})[str(conc)] = med
    ratios: dict[str, dict[str, dict[str, Any]]] = {}
    for pairs, metric, suffix in ((PAIRS, "tok_s", ""), (CPU_PAIRS, "cpu_layer", " cpu"),
                                  (PROXY_PAIRS, "cpu_proxy", " proxy cpu")):
        for num, den in pairs:
            per: dict[str, list[float]] = {}
            for (system, conc, rep), f in sorted(figures.items()):
                other = figures.get((den, conc, rep))
                if system == num and other and other.get(metric, 0) > 0 and metric in f:
                    per.setdefault(str(conc), []).append(f[metric] / other[metric])
            if per:
                ratios[f"{num}/{den}{suffix}"] = {c: spread(v) for c, v in per.items()}
    return {
        "meta": meta,
        "cells": cells,
        "ratios": ratios,
        "targets": targets(ratios),
        "names": NAMES,
    }


def targets(ratios: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each target (issues #27, #46) per concurrency: the median of the
    per-rep ratios and whether it meets the bound."""
    out = []
    for key, op, bound, issue in TARGETS:
        per = {}
        for conc, s in ratios.get(key, {}).items():
            med = s["median"]
            per[conc] = {"median": med, "met": med >= bound if op == ">=" else med <= bound}
        out.append({"ratio": key, "op": op, "bound": bound, "issue": issue,
                    "by_concurrency": per})
    return out


def _cpu(m: dict[str, Any], g: str) -> str:
    return f"{m[f'cpu_{g}']:.3f}" if f"cpu_{g}" in m else "-"


def header(meta: dict[str, Any]) -> str:
    if not meta:
        return ""
    return (
        f"mode **{meta.get('mode', '?')}**: warm-up {meta.get('warmup')} s, window "
        f"{meta.get('window')} s, {meta.get('reps')} reps, {meta.get('max_tokens')} tokens per "
        f"request; commit {meta.get('commit', '?')}; load average before "
        f"{meta.get('loadavg_before', '?')}\n\n"
    )


def table(summary: dict[str, Any]) -> str:
    cells = summary["cells"]
    lines = [
        header(summary.get("meta", {})) +
        "| system | conc | tok/s median (min-max) | req/s | TTFT p50/p99 ms | ITL p50/p99 ms "
        "| CPU s/1k tok: serving layer | serving | proxy | engine | driver | other load, cores "
        "| peak RSS MiB | errors | idle timeouts |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for system in sorted(cells, key=ORDER.index):
        for conc, m in sorted(cells[system].items(), key=lambda kv: int(kv[0])):
            lines.append(
                f"| {system} {NAMES[system]} | {conc} | {m['tok_s']:.0f} "
                f"({m['tok_s_min']:.0f}-{m['tok_s_max']:.0f}) "
                f"| {m['req_s']:.2f} | {m['ttft_p50_ms']:.0f}/{m['ttft_p99_ms']:.0f} "
                f"| {m['itl_p50_ms']:.1f}/{m['itl_p99_ms']:.1f} | {m['cpu_layer']:.3f} | "
                + " | ".join(_cpu(m, g) for g in GROUPS)
                + (f" | {m['other_cores']:.2f}" if "other_cores" in m else " | -")
                + f" | {m['peak_rss_mib']:.0f} | {m['errors']:.0f} | {m['idle_timeout']:.0f} |"
            )
    concs = sorted({c for r in summary["ratios"].values() for c in r}, key=int)
    lines += ["",
              "| ratio, per rep: median (min-max) | " + " | ".join(f"c={c}" for c in concs) + " |",
              "|---|" + "---|" * len(concs)]
    for name, vals in summary["ratios"].items():
        row = [
            f"{vals[c]['median']:.2f} ({vals[c]['min']:.2f}-{vals[c]['max']:.2f})"
            if c in vals
            else "-"
            for c in concs
        ]
        if name.endswith(" proxy cpu"):
            label = name.replace(" proxy cpu", " CPU/token (Envoy)")
        elif name.endswith(" cpu"):
            label = name.replace(" cpu", " CPU/token (serving layer)")
        else:
            label = f"{name} tok/s"
        lines.append(f"| {label} | " + " | ".join(row) + " |")
    lines += [
        "",
        "| target (median of per-rep ratios) | "
        + " | ".join(f"c={c}" for c in concs)
        + " |",
        "|---|" + "---|" * len(concs),
    ]
    for t in summary.get("targets", []):
        what = "CPU/token" if t["ratio"].endswith(" cpu") else "tok/s"
        name = t["ratio"].removesuffix(" cpu")
        row = []
        for c in concs:
            v = t["by_concurrency"].get(c)
            row.append(
                "not run"
                if v is None
                else f"{'met' if v['met'] else 'NOT met'} ({v['median']:.2f})"
            )
        lines.append(
            f"| #{t.get('issue', 27)}: {name} {what} {'≥' if t['op'] == '>=' else '≤'} "
            f"{t['bound']:.2f} | "
            + " | ".join(row)
            + " |"
        )
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
        ms = [cells[system].get(str(c), {}) for c in concs]
        ys = [m.get("tok_s", 0) for m in ms]
        err = [[y - m.get("tok_s_min", y) for y, m in zip(ys, ms, strict=True)],
               [m.get("tok_s_max", y) - y for y, m in zip(ys, ms, strict=True)]]
        ax.bar(xs, ys, width, yerr=err, capsize=2, label=f"{system}: {NAMES[system]}")
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(concs))])
    ax.set_xticklabels([f"concurrency {c}" for c in concs])
    ax.set_ylabel("output tokens/s in the window (median, min-max)")
    mode = summary.get("meta", {}).get("mode")
    ax.set_title(
        "Serving-layer cost on the tiny random model (higher is better)"
        + (f", {mode} mode" if mode else "")
    )
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
