"""The bench report aggregates runs into medians and ratios correctly."""

from __future__ import annotations

from bench.report import summarize, table


def _run(system: str, conc: int, rep: int, tokens_per_req: int, wall: float) -> dict:
    recs = [{"start": 0.0, "first": 0.01 * (i + 1), "end": 1.0, "tokens": tokens_per_req,
             "gaps": [0.001] * (tokens_per_req - 1), "error": None} for i in range(4)]
    return {"system": system, "concurrency": conc, "rep": rep, "wall": wall,
            "cpu_seconds": 0.5, "records": recs, "peak_rss": 100 * 2**20}


def test_medians_and_ratios() -> None:
    runs = [_run("A", 1, r, 100, w) for r, w in enumerate([1.0, 2.0, 4.0])]
    runs += [_run("B", 1, r, 100, w) for r, w in enumerate([2.0, 2.0, 8.0])]
    s = summarize(runs, {})
    assert s["cells"]["A"]["1"]["tok_s"] == 200.0  # median of 400, 200, 100
    assert s["cells"]["B"]["1"]["tok_s"] == 200.0
    assert s["ratios"]["B/A"]["1"] == 1.0
    assert s["cells"]["A"]["1"]["cpu_s_per_1k_tok"] == 0.5 / 400 * 1000
    assert "| B/A | 1.00 |" in table(s)
