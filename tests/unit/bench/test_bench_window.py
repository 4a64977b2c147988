"""The measured window: only ids arriving inside it count, TTFT only of
requests started in it, gaps only with both ends in it; run_window cancels
what is in flight at its end."""

from __future__ import annotations

import asyncio
import time

from bench.clients import Prompt, Record, Window, run_window


def test_ids_are_counted_by_arrival_time() -> None:
    win = Window()
    win.open(10.0)
    win.close(20.0)
    straddles = Record(start=8.0, window=win)  # started in the warm-up
    straddles.arrived(4, now=9.0)  # before the window: not counted
    straddles.arrived(2, now=10.5)
    straddles.arrived(3, now=19.0)
    straddles.arrived(5, now=20.0)  # at the end: after the window
    inside = Record(start=12.0, window=win)
    inside.arrived(1, now=12.5)
    inside.arrived(1, now=13.0)
    win.done(inside, 13.0)
    win.done(straddles, 21.0)  # finished after the window: not a finished request in it
    r = win.result()
    assert r["tokens"] == 2 + 3 + 1 + 1
    assert r["seconds"] == 10.0
    assert r["finished"] == 1
    assert straddles.tokens == 14  # the record itself counts everything it got
    # TTFT: only `inside` started in the window (0.5 s).
    assert win.ttft == [0.5]
    # Gaps: 9.0 -> 10.5 straddles the start (left out); 10.5 -> 19.0 over 3
    # ids; 12.5 -> 13.0; 19.0 -> 20.0 ends after the window (left out).
    assert sorted(win.itl) == sorted([8.5 / 3] * 3 + [0.5])


def test_errors_count_over_the_whole_cell() -> None:
    win = Window()
    win.done(Record(0.0, error="UNAVAILABLE"), 1.0)  # in the warm-up
    win.open(2.0)
    win.done(Record(2.0, error="UNAVAILABLE"), 3.0)
    r = win.result()
    assert r["errors"] == 2 and r["error_kinds"] == {"UNAVAILABLE": 2}
    assert r["finished"] == 0


def test_itl_sample_is_bounded(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr("bench.clients.ITL_SAMPLE", 10)
    win = Window()
    win.open(0.0)
    rec = Record(0.0, window=win)
    for i in range(100):
        rec.arrived(1, now=1.0 + i)
    assert len(win.itl) == 10 and win.tokens == 100


def test_run_window_cycles_prompts_and_cancels_in_flight_requests() -> None:
    started: list[str] = []
    cancelled = 0

    async def driver(prompt: Prompt, max_tokens: int, window: Window | None = None) -> Record:
        nonlocal cancelled
        started.append(prompt.text)
        rec = Record(time.perf_counter(), window=window)
        try:
            for _ in range(max_tokens):
                await asyncio.sleep(0.01)
                rec.arrived(1)
        except asyncio.CancelledError:
            cancelled += 1
            raise
        return rec

    snaps = iter([{"serving": 1.0, "engine": 5.0}, {"serving": 1.5, "engine": 7.0}])
    prompts = [Prompt(str(i), [i]) for i in range(3)]
    r = asyncio.run(
        run_window(driver, prompts, 4, 5, warmup=0.1, seconds=0.3, snapshot=lambda: next(snaps))
    )
    assert r["cpu"] == {"serving": 0.5, "engine": 2.0}
    assert cancelled == 4  # every worker had one in flight at the end
    assert started[:5] == ["0", "1", "2", "0", "1"]  # each new request takes the next prompt
    assert 0 < r["tokens"] <= 4 * 0.3 / 0.01 + 4
    assert r["finished"] > 0 and r["errors"] == 0
