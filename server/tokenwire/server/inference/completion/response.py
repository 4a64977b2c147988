"""Domain outputs -> completion protobuf responses (unary and streamed
chunks), with the legacy logprobs shape (tokens, token_logprobs,
top_logprobs, text_offset)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

from google.protobuf import struct_pb2

from tokenwire.server.core.domain import ChoiceOutput, Engine, EngineOutput, PositionLogprobs
from tokenwire.server.inference.completion.request import CompletionPlan
from tokenwire.server.inference.shared.choices import ChoiceAccumulator, finish_choice
from tokenwire.server.inference.shared.kv_transfer import put_kv_answer
from tokenwire.server.inference.shared.logprobs import native_prompt_logprobs
from tokenwire.server.inference.shared.nvext import add_prompt_nvext, response_nvext
from tokenwire.server.inference.shared.usage import timing, usage
from tokenwire.v1 import chat_pb2, common_pb2, completion_pb2

_NULL = struct_pb2.Value(null_value=struct_pb2.NULL_VALUE)


class LegacyLogprobs:
    """Fills CompletionLogProbs position by position; keeps the text offset
    across the chunks of one choice."""

    def __init__(self, engine: Engine, k: int, as_token_ids: bool):
        self.engine = engine
        self.k = k
        self.as_token_ids = as_token_ids
        self.offset = 0

    def _name(self, token_id: int) -> str:
        return f"token_id:{token_id}" if self.as_token_ids else self.engine.token_text(token_id)

    def fill(self, target: completion_pb2.CompletionLogProbs, token_ids: Sequence[int],
             positions: Sequence[PositionLogprobs | None]) -> None:
        for token_id, pos in zip(token_ids, positions, strict=False):
            target.tokens.append(self._name(token_id))
            target.token_ids.append(token_id)
            target.text_offset.append(self.offset)
            self.offset += len(self.engine.token_text(token_id))
            if pos is None:  # the first prompt position has no logprob
                target.token_logprobs.append(_NULL)
                target.top_logprobs.append(_NULL)
                continue
            target.token_logprobs.add(number_value=pos.logprob)
            top = target.top_logprobs.add().struct_value
            # The k most likely and the sampled token (OpenAI: up to k + 1).
            for cand in pos.top[: self.k]:
                top.fields[self._name(cand.token_id)].number_value = cand.logprob
            top.fields[self._name(pos.token_id)].number_value = pos.logprob


def _prompt_text(plan: CompletionPlan, engine: Engine, index: int, prompt_ids: list[int]) -> str:
    """The echoed text of prompt `index`: as sent, or its ids decoded (empty
    with return_token_ids, where the ids carry the prompt, as vLLM does)."""
    if plan.return_token_ids:
        return ""
    text = plan.prompts[index].text
    if text is not None:
        return text
    return engine.decode(prompt_ids, plan.requests[index].params.skip_special_tokens)


def _echo_positions(plan: CompletionPlan, out: EngineOutput, prompt_ids: list[int]
                    ) -> list[PositionLogprobs | None]:
    positions = out.prompt_logprobs or []
    return list(positions) + [None] * (len(prompt_ids) - len(positions))


class CompletionChoiceState:
    """One choice across its chunks: accumulated ids, echo done, offsets."""

    def __init__(self, plan: CompletionPlan, engine: Engine, index: int):
        self.index = index
        self.acc = ChoiceAccumulator(index)
        self.started = False
        self.logprobs = (
            LegacyLogprobs(engine, plan.logprobs, plan.as_token_ids)
            if plan.logprobs is not None else None
        )


def fill_choice(
    ch: completion_pb2.CompletionChoice, plan: CompletionPlan, engine: Engine,
    state: CompletionChoiceState, prompt_index: int, out: EngineOutput, c: ChoiceOutput,
    prompt_ids: list[int],
) -> None:
    """Fill choice message `ch` from `c` (a delta or the whole choice): on
    the choice's first message the echo, the prompt ids and the prompt
    logprobs come first."""
    first = not state.started
    state.started = True
    token_ids = [] if plan.echo_only else c.token_ids
    positions: list[PositionLogprobs | None] = list(c.logprobs or []) if not plan.echo_only else []
    text = "" if plan.echo_only else c.text
    if first and plan.echo:
        text = _prompt_text(plan, engine, prompt_index, prompt_ids) + text
        lp_ids: list[int] = [*prompt_ids, *token_ids]
        positions = _echo_positions(plan, out, prompt_ids) + positions
    else:
        lp_ids = list(token_ids)
    ch.text = text
    if state.logprobs is not None:
        state.logprobs.fill(ch.logprobs, lp_ids, positions)
    if plan.ids_wanted:
        ch.token_ids.extend(token_ids)
    if first:
        if plan.return_token_ids:
            ch.prompt_token_ids.extend(prompt_ids)
        native_prompt_logprobs(ch.prompt_logprobs, engine, out.prompt_logprobs)
    # (echo only: the one token generated to get the prompt's logprobs is not reported)
    state.acc.add(c if not plan.echo_only else dataclasses.replace(
        c, token_ids=[], text="", logprobs=None if c.logprobs is None else []))
    if c.finish_reason is not None:
        ch.finish_reason = c.finish_reason
        finish_choice(ch, c, plan, state.acc, prompt_ids)


def build_completion_response(
    plan: CompletionPlan, engine: Engine, finals: list[EngineOutput], *, worker_id: str,
) -> completion_pb2.CreateCompletionResponse:
    resp = completion_pb2.CreateCompletionResponse(
        id=plan.id, object="text_completion", created=int(plan.received), model=plan.model,
        system_fingerprint=plan.fingerprint,
    )
    prompt_len = completion_len = cached = 0
    mirror = None
    for p_index, final in enumerate(finals):
        prompt_ids = final.prompt_token_ids or plan.requests[p_index].prompt_token_ids
        prompt_len += len(prompt_ids)
        cached += final.num_cached_tokens
        for c in sorted(final.choices, key=lambda c: c.index):
            index = p_index * plan.n + c.index
            state = CompletionChoiceState(plan, engine, index)
            ch = resp.choices.add(index=index)
            fill_choice(ch, plan, engine, state, p_index, final, c, prompt_ids)
            completion_len += len(state.acc.token_ids)
            if index == 0 and ch.HasField("nvext"):
                mirror = ch.nvext
    resp.usage.CopyFrom(usage(prompt_len, completion_len, cached))
    if finals:  # vLLM's: the first prompt's
        put_kv_answer(resp.kv_transfer_params, finals[0].kv_transfer_params)
    if len(finals) == 1:
        nvr = response_nvext(
            plan, worker_id, prompt_ids=finals[0].prompt_token_ids, mirror=mirror,
            timing_msg=timing(plan.received, finals[0].times, None),
            prompt_logprobs=(engine, finals[0].prompt_logprobs),
        )
        if nvr is not None:
            resp.nvext.CopyFrom(nvr)
    return resp


class CompletionStreamBuilder:
    """Turns (prompt index, delta EngineOutput) pairs into chunks."""

    def __init__(self, plan: CompletionPlan, engine: Engine, *, worker_id: str):
        self.plan = plan
        self.engine = engine
        self.worker_id = worker_id
        self.states: dict[int, CompletionChoiceState] = {}
        self.prompt_ids = [r.prompt_token_ids for r in plan.requests]
        self.cached = [0] * len(plan.requests)
        self.first_seen: float | None = None
        self._mirror: chat_pb2.ChoiceNvExt | None = None
        self.started = False

    def _chunk(self) -> completion_pb2.StreamCompletionResponse:
        plan = self.plan
        return completion_pb2.StreamCompletionResponse(
            id=plan.id, object="text_completion", created=int(plan.received), model=plan.model,
            system_fingerprint=plan.fingerprint,
        )

    def on_output(self, p_index: int, out: EngineOutput
                  ) -> completion_pb2.StreamCompletionResponse | None:
        plan = self.plan
        if self.first_seen is None and any(c.token_ids for c in out.choices):
            self.first_seen = time.time()
        if out.prompt_token_ids:
            self.prompt_ids[p_index] = out.prompt_token_ids
        self.cached[p_index] = out.num_cached_tokens
        chunk = self._chunk()
        if not self.started and len(plan.requests) == 1:  # the prompt's nvext, first
            add_prompt_nvext(chunk.nvext, plan.extra_fields, self.prompt_ids[0],
                             (self.engine, out.prompt_logprobs))
        self.started = True
        for c in out.choices:
            index = p_index * plan.n + c.index
            state = self.states.get(index)
            if state is None:
                state = self.states[index] = CompletionChoiceState(plan, self.engine, index)
            echo_due = plan.echo and not state.started
            if not (c.token_ids or c.text or c.finish_reason is not None or echo_due
                    or (plan.return_token_ids and not state.started)):
                continue
            ch = chunk.choices.add(index=index)
            fill_choice(ch, plan, self.engine, state, p_index, out, c, self.prompt_ids[p_index])
            if index == 0 and ch.HasField("nvext"):
                self._mirror = ch.nvext
        if plan.continuous_usage and chunk.choices:
            chunk.usage.CopyFrom(self.usage())
        if out.finished and len(plan.requests) == 1:
            nvr = response_nvext(
                plan, self.worker_id, prompt_ids=None, mirror=self._mirror,
                timing_msg=timing(plan.received, out.times, self.first_seen),
            )
            if nvr is not None:
                chunk.nvext.MergeFrom(nvr)
        if not chunk.choices and not chunk.HasField("nvext"):
            return None
        return chunk

    def usage(self) -> common_pb2.Usage:
        completion = sum(len(s.acc.token_ids) for s in self.states.values())
        return usage(sum(len(p) for p in self.prompt_ids), completion, sum(self.cached))

    def usage_chunk(self) -> completion_pb2.StreamCompletionResponse:
        chunk = self._chunk()
        chunk.usage.CopyFrom(self.usage())
        return chunk
