"""Response pieces chat and completion share (the choice accumulator, the
choice and top-level nvext, timing) and the finished-choice block every
kind writes once (stop_reason, weight spans, routed_experts, choice nvext).
Each kind's own shape is built in inference/{chat,completion,generate}/;
field conversions every RPC shares are in inference/response_fields.py."""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Protocol

from tokenwire.server.core.domain import (
    ChoiceOutput,
    Engine,
    EngineOutput,
    EngineRequest,
    EngineTimes,
    PositionLogprobs,
    RunOutcome,
    WeightSpan,
)
from tokenwire.server.core.errors import Internal
from tokenwire.server.inference.response_fields import (
    add_weight_spans,
    native_prompt_logprobs,
    stop_reason_value,
)
from tokenwire.v1 import chat_pb2, common_pb2


async def final_output(
    engine: Engine, request: EngineRequest, outcome: RunOutcome | None
) -> EngineOutput:
    """Run one unary request to its final output (INTERNAL if the engine ends
    it unfinished) and fill `outcome` with what it consumed and produced."""
    final: EngineOutput | None = None
    async for out in engine.generate(request):
        final = out
    if final is None or not final.finished:
        raise Internal("the engine ended the request without a final output",
                       reason="ENGINE_OUTPUT_INCOMPLETE")
    if outcome is not None:
        outcome.fill(final.prompt_token_ids or request.prompt_token_ids,
                     {c.index: c.token_ids for c in final.choices})
    return final


def timing(received: float, times: EngineTimes | None, first_seen: float | None) -> common_pb2.Timing:
    finished = time.time()
    t = common_pb2.Timing(request_received_seconds=received, finished_seconds=finished)
    first = (times.first_token if times else None) or first_seen
    if first:
        t.first_token_seconds = first
    t.total_ms = (finished - received) * 1000.0
    if times:
        arrival = times.arrival or received
        if times.scheduled:
            t.queue_ms = max(0.0, (times.scheduled - arrival) * 1000.0)
            if first:
                t.prefill_ms = max(0.0, (first - times.scheduled) * 1000.0)
        if first and times.last_token:
            t.decode_ms = max(0.0, (times.last_token - first) * 1000.0)
    return t


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


class NvExtPlan(Protocol):
    """What the nvext builders read of a plan (chat or completion)."""

    extra_fields: frozenset[str]

    @property
    def request(self) -> EngineRequest: ...


def choice_nvext(plan: NvExtPlan, acc: ChoiceAccumulator, prompt_ids: list[int]) -> chat_pb2.ChoiceNvExt | None:
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


def add_prompt_nvext(
    nv: chat_pb2.NvExtResponse, fields: frozenset[str], prompt_ids: list[int] | None,
    prompt_logprobs: tuple[Engine, list[PositionLogprobs | None] | None] | None,
) -> bool:
    """nvext.prompt_token_ids / prompt_logprobs when asked; True if any."""
    used = False
    if prompt_ids is not None and "prompt_token_ids" in fields:
        nv.prompt_token_ids.extend(prompt_ids)
        used = True
    if prompt_logprobs is not None and "prompt_logprobs" in fields:
        native_prompt_logprobs(nv.prompt_logprobs, *prompt_logprobs)
        used = True
    return used


def response_nvext(
    plan: NvExtPlan,
    worker_id: str,
    *,
    prompt_ids: list[int] | None,
    mirror: chat_pb2.ChoiceNvExt | None,
    timing_msg: common_pb2.Timing | None,
    prompt_logprobs: tuple[Engine, list[PositionLogprobs | None] | None] | None = None,
) -> chat_pb2.NvExtResponse | None:
    """The top-level nvext: prompt ids and prompt logprobs (where the prompt
    is reported), timing, worker id, n = 1 mirror."""
    fields = plan.extra_fields
    nv = chat_pb2.NvExtResponse()
    used = add_prompt_nvext(nv, fields, prompt_ids, prompt_logprobs)
    if timing_msg is not None and "timing" in fields:
        nv.timing.CopyFrom(timing_msg)
        used = True
    if timing_msg is not None and "worker_id" in fields:
        nv.worker_id = worker_id
        used = True
    if mirror is not None and plan.request.params.n == 1:
        nv.completion_token_ids.extend(mirror.completion_token_ids)
        if mirror.HasField("engine_data"):
            nv.engine_data.CopyFrom(mirror.engine_data)
        if mirror.HasField("stop_reason"):
            nv.stop_reason.CopyFrom(mirror.stop_reason)
        used = True
    return nv if used else None


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
