"""vLLM's observability flags never take the engine down: with
`--otlp-traces-endpoint` vLLM's log stats stay on (its tracing asserts
every request's stats), and `--disable-log-stats` given with it is refused
at the start, naming both flags. Log stats are on by default, as in
`vllm serve`."""

from __future__ import annotations

import pytest

from tokenwire.server.runtime.cli import parse_settings

pytest.importorskip("vllm")

OTLP = ("--otlp-traces-endpoint", "http://127.0.0.1:4317")


def test_tracing_keeps_log_stats_on() -> None:
    args = parse_settings(list(OTLP)).engine_args
    assert args["otlp_traces_endpoint"] == OTLP[1] and args["disable_log_stats"] is False


def test_tracing_with_disable_log_stats_is_refused_at_the_start() -> None:
    with pytest.raises(SystemExit) as exc:
        parse_settings([*OTLP, "--disable-log-stats"])
    assert "--otlp-traces-endpoint" in str(exc.value.code)
    assert "--disable-log-stats" in str(exc.value.code)


def test_engine_arguments_given_directly_keep_stats_for_tracing() -> None:
    from tokenwire.server.engine.vllm.args import stats_for_tracing

    fixed = stats_for_tracing({"otlp_traces_endpoint": OTLP[1], "disable_log_stats": True})
    assert fixed["disable_log_stats"] is False
    assert stats_for_tracing({"disable_log_stats": True})["disable_log_stats"] is True


def test_log_stats_are_on_by_default_as_in_vllm_serve() -> None:
    assert parse_settings([]).engine_args["disable_log_stats"] is False
    assert parse_settings(["--disable-log-stats"]).engine_args["disable_log_stats"] is True
