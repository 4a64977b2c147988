"""A choice as it is generated and finished: the accumulator (everything
generated so far), and the finished-choice block every kind writes once
(stop_reason, weight spans, routed_experts, the choice's nvext);
finish_reason is each kind's own."""

from __future__ import annotations

import dataclasses
from typing import Any

from google.protobuf import struct_pb2

from tokenwire.server.core.domain import ChoiceOutput, WeightSpan
from tokenwire.server.inference.shared.nvext import NvExtPlan
from tokenwire.v1 import chat_pb2


@dataclasses.dataclass
class ChoiceAccumulator:
    """Everything generated so far for one choice (cumulative)."""

    index: int
    token_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    non_finite: list[int] = dataclasses.field(default_factory=list)  # indices into logprobs
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    weight_versions: list[WeightSpan] | None = None

    def add(self, out: ChoiceOutput) -> None:
        self.token_ids.extend(out.token_ids)
        if out.logprobs is not None:
            base = len(self.logprobs)
            self.logprobs.extend(p.logprob for p in out.logprobs)
            self.non_finite.extend(base + i for i, p in enumerate(out.logprobs) if p.non_finite)
        if out.finish_reason is not None:
            self.finish_reason = out.finish_reason
            self.stop_reason = out.stop_reason
            self.weight_versions = out.weight_versions


def stop_reason_value(reason: int | str | None) -> struct_pb2.Value | None:
    if reason is None:
        return None
    if isinstance(reason, str):
        return struct_pb2.Value(string_value=reason)
    return struct_pb2.Value(number_value=float(reason))


def add_weight_spans(target: Any, spans: list[WeightSpan] | None) -> None:
    """Fill a repeated WeightVersionSpan field (a no-op without spans)."""
    if spans:
        for span in spans:
            target.add(version=span.version, start=span.start, end=span.end)


def choice_nvext(
    plan: NvExtPlan, acc: ChoiceAccumulator, prompt_ids: list[int]
) -> chat_pb2.ChoiceNvExt | None:
    fields = plan.extra_fields
    if not fields & {"completion_token_ids", "engine_data", "stop_reason"}:
        return None
    nv = chat_pb2.ChoiceNvExt()
    if "completion_token_ids" in fields:
        nv.completion_token_ids.extend(acc.token_ids)
    if "engine_data" in fields:
        nv.engine_data.prompt_token_ids.extend(prompt_ids)
        nv.engine_data.completion_token_ids.extend(acc.token_ids)
        nv.engine_data.completion_logprobs.extend(acc.logprobs)
        nv.engine_data.non_finite_logprobs.extend(acc.non_finite)
        nv.engine_data.finished = acc.finish_reason is not None
        add_weight_spans(nv.engine_data.weight_versions, acc.weight_versions)
    if "stop_reason" in fields:
        sr = stop_reason_value(acc.stop_reason)
        if sr is not None:
            nv.stop_reason.CopyFrom(sr)
    return nv


def finish_choice(
    ch: Any, c: ChoiceOutput, plan: NvExtPlan | None = None, acc: ChoiceAccumulator | None = None,
    prompt_ids: list[int] | None = None,
) -> chat_pb2.ChoiceNvExt | None:
    """The block of a finished choice message `ch` (chat, completion or
    generate; whole or a chunk) from `c`: stop_reason, weight spans,
    routed_experts and, given the `plan` and the choice's `acc`, the choice
    nvext (returned when set). finish_reason is each kind's own."""
    sr = stop_reason_value(c.stop_reason)
    if sr is not None:
        ch.stop_reason.CopyFrom(sr)
    add_weight_spans(ch.weight_versions, c.weight_versions)
    if c.routed_experts:
        ch.routed_experts = c.routed_experts
    if plan is None or acc is None:
        return None
    nv = choice_nvext(plan, acc, prompt_ids or [])
    if nv is not None:
        ch.nvext.CopyFrom(nv)
    return nv
