"""The bench report: per-cell figures, medians with their range, per-rep
ratios with their spread, CPU per token by process group, #27's targets."""

from __future__ import annotations

from typing import Any

import pytest

from bench.report import one, summarize, table


def _cell(system: str, conc: int, rep: int, tokens: int, seconds: float = 10.0,
          cpu: dict[str, float] | None = None) -> dict[str, Any]:
    return {"system": system, "concurrency": conc, "rep": rep, "seconds": seconds, "tokens": tokens,
            "finished": tokens // 100, "errors": 0, "ttft_p50_ms": 10.0, "ttft_p99_ms": 20.0,
            "itl_p50_ms": 1.0, "itl_p99_ms": 2.0, "idle_timeout": False, "peak_rss": 100 * 2**20,
            "cpu": cpu if cpu is not None else {"serving": 1.0, "engine": 2.0, "proxy": 0.0,
                                                "driver": 0.5}}


def test_cpu_per_1k_tokens_by_group_and_the_serving_layer() -> None:
    f = one(
        _cell("C", 64, 0, 20_000, cpu={"serving": 2.0, "engine": 9.0, "proxy": 1.0, "driver": 3.0})
    )
    assert f["tok_s"] == 2000.0
    assert f["req_s"] == 20.0
    assert (f["cpu_serving"], f["cpu_proxy"], f["cpu_engine"], f["cpu_driver"]) == pytest.approx(
        (0.1, 0.05, 0.45, 0.15)
    )
    assert f["cpu_layer"] == pytest.approx(0.15)  # serving + proxy; engine and driver apart
    assert "other_cores" not in f
    busy = one(_cell("C", 64, 0, 20_000, cpu={"serving": 2.0, "engine": 9.0, "machine": 16.0}))
    assert busy["other_cores"] == pytest.approx(0.5)  # 5 s of something else over 10 s
    a = one(_cell("A", 64, 0, 20_000, cpu={"serving": 2.0, "engine": 9.0}))
    assert "cpu_proxy" not in a and "cpu_driver" not in a
    assert a["cpu_layer"] == pytest.approx(0.1)


def test_ratios_are_per_rep_with_min_median_max() -> None:
    # E is steady; G is slow in rep 1 only: the per-rep spread shows the bad rep.
    runs = [_cell("E", 64, r, 30_000) for r in range(3)]
    runs += [_cell("G", 64, r, t) for r, t in enumerate([31_500, 15_000, 30_000])]
    s = summarize(runs, {})
    r = s["ratios"]["G/E"]["64"]
    assert r["per_rep"] == [1.05, 0.5, 1.0]
    assert (r["min"], r["median"], r["max"]) == (0.5, 1.0, 1.05)
    g = s["cells"]["G"]["64"]
    assert (g["tok_s"], g["tok_s_min"], g["tok_s_max"], g["reps"]) == (3000.0, 1500.0, 3150.0, 3)


def test_ratios_pair_cells_of_the_same_rep_and_concurrency() -> None:
    # Rep 1 of E at c=64 is missing: only rep 0 pairs (never B's rep 1 with E's rep 0).
    runs = [_cell("E", 64, 0, 10_000), _cell("B", 64, 0, 20_000), _cell("B", 64, 1, 10_000),
            _cell("E", 256, 1, 10_000)]
    s = summarize(runs, {})
    assert s["ratios"]["B/E"]["64"]["per_rep"] == [2.0]
    assert "256" not in s["ratios"]["B/E"]


def test_cpu_ratio_of_the_serving_layer() -> None:
    runs = []
    for rep in range(3):
        runs.append(
            _cell(
                "E",
                64,
                rep,
                10_000,
                cpu={"serving": 1.0, "engine": 5.0, "driver": 1.0, "proxy": 0.0},
            )
        )
        runs.append(_cell("G", 64, rep, 10_000, cpu={"serving": 0.9 + 0.1 * rep, "engine": 7.0,
                                                     "driver": 9.0, "proxy": 0.0}))
    s = summarize(runs, {})
    r = s["ratios"]["G/E cpu"]["64"]
    assert [round(x, 6) for x in r["per_rep"]] == [0.9, 1.0, 1.1]
    assert r["median"] == pytest.approx(1.0)


def test_targets_from_medians_of_per_rep_ratios() -> None:
    runs = []
    for rep in range(3):
        runs += [_cell("E", 64, rep, 10_000), _cell("G", 64, rep, [10_500, 9_000, 10_100][rep]),
                 _cell("B", 64, rep, 9_000)]
    s = summarize(runs, {"mode": "quick", "window": 8.0, "warmup": 2.0, "reps": 3})
    by = {t["ratio"]: t["by_concurrency"] for t in s["targets"]}
    assert by["G/E"]["64"]["met"] is True  # median 1.01, despite the 0.90 rep
    assert by["B/E"]["64"]["met"] is False  # 0.90 < 0.95
    assert by["G/E cpu"]["64"]["met"] is True  # equal CPU per token
    assert by["C/D"] == {}
    text = table(s)
    assert "mode **quick**" in text
    assert "| G/E tok/s | 1.01 (0.90-1.05) |" in text
    assert "| #27: B/E tok/s ≥ 0.95 | NOT met (0.90) |" in text
    assert "| #27: C/D tok/s ≥ 1.00 | not run |" in text
    assert "| G tokenwire gRPC Generate (ids) | 64 | 1010 (900-1050) |" in text


def test_native_variants_against_aio_and_vllm() -> None:
    """Issue #46's targets: b (B on native) against D's CPU per token, c's
    Envoy CPU against C's, and the native variants' tok/s against aio's."""
    runs = []
    for rep in range(3):
        runs += [
            _cell("B", 64, rep, 10_000, cpu={"serving": 1.0, "proxy": 0.0}),
            _cell("b", 64, rep, 10_000, cpu={"serving": 0.7, "proxy": 0.0}),
            _cell("D", 64, rep, 10_000, cpu={"serving": 1.0, "proxy": 0.0}),
            _cell("C", 64, rep, 10_000, cpu={"serving": 1.0, "proxy": 1.0}),
            _cell("c", 64, rep, 10_000, cpu={"serving": 0.7, "proxy": 0.9}),
        ]
    s = summarize(runs, {})
    assert s["ratios"]["b/D cpu"]["64"]["median"] == pytest.approx(0.7)
    assert s["ratios"]["c/C proxy cpu"]["64"]["median"] == pytest.approx(0.9)
    assert s["ratios"]["c/D cpu"]["64"]["median"] == pytest.approx(1.6)
    by = {t["ratio"]: t["by_concurrency"] for t in s["targets"]}
    assert by["b/D cpu"]["64"]["met"] is True
    assert by["c/D cpu"]["64"]["met"] is False
    assert by["b/B"]["64"]["met"] is True  # equal tok/s
    text = table(s)
    assert "| #46: b/D CPU/token ≤ 0.85 | met (0.70) |" in text
    assert "| c/C CPU/token (Envoy) | 0.90 (0.90-0.90) |" in text
    assert "| b tokenwire gRPC chat, native transport | 64 |" in text
