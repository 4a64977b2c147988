"""engine/guarded.py's token accounting: every served id counted once in
the completion-token counter and once in the lag histogram, at the number
of weight updates since its request started (issue #26's metric, kept
exact when the per-token observe became one observe per lag at the end)."""

from __future__ import annotations

import prometheus_client as prom

from tokenwire.server.core.admission import Admission
from tokenwire.server.core.domain import Caller
from tokenwire.server.core.metrics import Metrics
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.guarded import GuardedEngine
from tokenwire.server.inference.generate.service import build_generate_plan, stream_generate
from tokenwire.v1 import common_pb2, generate_pb2

SETTINGS = ServerSettings(engine="fake", max_model_len=512)


def _samples(metrics: Metrics) -> dict[str, float]:
    out = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            key = s.name + ("{" + ",".join(f"{k}={v}" for k, v in sorted(s.labels.items())) + "}"
                            if s.labels else "")
            out[key] = s.value
    return out


async def test_served_ids_are_counted_by_their_lag() -> None:
    fake, metrics, state = FakeEngine(max_model_len=512), Metrics(), ServingState()
    guarded = GuardedEngine(fake, Admission(8, 0), metrics, state)
    req = generate_pb2.GenerateRequest(
        token_ids=[10, 11],
        sampling_params=common_pb2.SamplingParams(max_tokens=30, ignore_eos=True),
    )
    plan = build_generate_plan(
        req, guarded, SETTINGS, served_model="m", caller=Caller(), stream=True
    )  # type: ignore[arg-type]
    ids: list[int] = []
    async for chunk in stream_generate(guarded, plan):  # type: ignore[arg-type]
        for c in chunk.choices:
            ids.extend(c.token_ids)
        if len(ids) in (10, 20):  # a weight update after the 10th and after the 20th id
            state.generation += 1
    assert len(ids) == 30
    s = _samples(metrics)
    name = "tokenwire_served_token_weight_lag_updates"
    assert s[f"{name}_count"] == 30 and s[f"{name}_sum"] == 10 * 0 + 10 * 1 + 10 * 2
    assert [s[f"{name}_bucket{{le={le}}}"] for le in ("0.0", "1.0", "2.0", "+Inf")] == [
        10,
        20,
        30,
        30,
    ]
    assert s["tokenwire_completion_tokens_total"] == 30


def test_the_lag_histogram_is_prometheus_text() -> None:
    metrics = Metrics()
    metrics.served_token_lag.observe(0, 5)
    metrics.served_token_lag.observe(20, 2)  # beyond the last bound: +Inf only
    text = prom.generate_latest(metrics.registry).decode()
    assert "# TYPE tokenwire_served_token_weight_lag_updates histogram" in text
    assert 'tokenwire_served_token_weight_lag_updates_bucket{le="16.0"} 5.0' in text
    assert 'tokenwire_served_token_weight_lag_updates_bucket{le="+Inf"} 7.0' in text
    assert "tokenwire_served_token_weight_lag_updates_sum 40.0" in text
