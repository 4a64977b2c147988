"""One /metrics page (--metrics-port) for tokenwire's own metrics and the
engine's: the families of the process's default registry (where vLLM's
stat loggers register `vllm:*`), or, with several serving processes
(PROMETHEUS_MULTIPROC_DIR, vLLM's multi-API-server mode), their aggregate
from that folder, tokenwire's own names left out of it."""

from __future__ import annotations

import os
import subprocess
import sys
import urllib.request
from pathlib import Path

import prometheus_client as prom
import pytest

from tokenwire.server.core.metrics import EngineMetrics, Metrics


def _page(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()


def test_one_page_holds_tokenwire_and_engine_metrics() -> None:
    engine_counter = prom.Counter("vllm:test_generation_tokens", "an engine metric")
    try:
        engine_counter.inc(7)
        metrics = Metrics()
        metrics.completion_tokens.inc(3)
        page = _page(metrics.serve("127.0.0.1", 0))
        assert "tokenwire_completion_tokens_total 3.0" in page
        assert "vllm:test_generation_tokens_total 7.0" in page
        assert "process_cpu_seconds_total" in page or "python_gc_objects" in page
        alone = _page(metrics.serve("127.0.0.1", 0, engine=False))  # a process other than 0
        assert "tokenwire_completion_tokens_total 3.0" in alone and "vllm:" not in alone
    finally:
        prom.REGISTRY.unregister(engine_counter)


WRITER = """
import prometheus_client as prom
prom.Counter("vllm:test_prompt_tokens", "engine").inc({n})
prom.Counter("tokenwire_requests", "own").inc()
"""


def test_several_serving_processes_are_summed_from_the_shared_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    for n in (2, 5):  # two serving processes
        subprocess.run([sys.executable, "-c", WRITER.format(n=n)], env=env, check=True)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    samples = {s.name: s.value for family in EngineMetrics().collect() for s in family.samples}
    assert samples["vllm:test_prompt_tokens_total"] == 7
    assert not any(name.startswith("tokenwire_") for name in samples)
