"""bench.run's progress: no carriage-return updates when stderr is a log file."""

from __future__ import annotations

import io

import pytest

# bench/ needs the bench extra (tqdm, psutil).
Progress = pytest.importorskip("bench.run").Progress


def test_progress_in_a_log_writes_one_line_per_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    log = io.StringIO()
    monkeypatch.setattr("sys.stderr", log)
    progress = Progress(100)
    progress.label = "B c=1 rep 1"
    for _ in range(100):
        progress.step()
    progress.label = "B c=16 rep 1"
    progress.close()
    assert "\r" not in log.getvalue()
    assert log.getvalue().splitlines() == [
        "B c=1 rep 1 (0/100 requests)",
        "B c=16 rep 1 (100/100 requests)",
    ]
