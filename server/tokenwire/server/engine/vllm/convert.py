"""Conversion between the domain types and vLLM's: generation parameters
in (SamplingParams, a KV-transfer handshake in its extra_args), RequestOutputs
out (ids, logprobs, weight spans, routed experts, engine timestamps, the KV
connector's answer), vLLM's exceptions as tokenwire errors.
Runs once per engine output: kept lean."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import Any

from tokenwire.server.core import errors
from tokenwire.server.core.domain import (
    LOGPROB_FLOOR,
    Candidate,
    ChoiceOutput,
    EngineOutput,
    EngineTimes,
    GenerationParams,
    PositionLogprobs,
    WeightSpan,
    finite_logprob,
)

log = logging.getLogger("tokenwire.engine")


def sampling_params(p: GenerationParams, stream: bool) -> Any:
    """The domain's generation parameters as vLLM SamplingParams."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams, StructuredOutputsParams

    structured = None
    if p.structured is not None:
        if p.structured.json_schema is not None:
            structured = StructuredOutputsParams(json=p.structured.json_schema)
        elif p.structured.json_object:
            structured = StructuredOutputsParams(json_object=True)
        elif p.structured.structural_tag is not None:
            structured = StructuredOutputsParams(structural_tag=p.structured.structural_tag)
        elif p.structured.regex is not None:
            structured = StructuredOutputsParams(regex=p.structured.regex)
        elif p.structured.grammar is not None:
            structured = StructuredOutputsParams(grammar=p.structured.grammar)
        elif p.structured.choice is not None:
            structured = StructuredOutputsParams(choice=list(p.structured.choice))
    return SamplingParams(
        n=p.n,
        temperature=p.temperature,
        top_p=p.top_p,
        top_k=p.top_k if p.top_k > 0 else 0,
        min_p=p.min_p,
        presence_penalty=p.presence_penalty,
        frequency_penalty=p.frequency_penalty,
        repetition_penalty=p.repetition_penalty,
        max_tokens=p.max_tokens,
        min_tokens=p.min_tokens,
        seed=p.seed,
        stop=list(p.stop) or None,
        stop_token_ids=list(p.stop_token_ids) or None,
        ignore_eos=p.ignore_eos,
        logprobs=p.logprobs,
        prompt_logprobs=p.prompt_logprobs,
        skip_special_tokens=p.skip_special_tokens,
        spaces_between_special_tokens=p.spaces_between_special_tokens,
        include_stop_str_in_output=p.include_stop_str_in_output,
        logit_bias=dict(p.logit_bias) or None,
        thinking_token_budget=p.thinking_token_budget,
        structured_outputs=structured,
        detokenize=p.detokenize,
        stream_interval=p.stream_interval if stream else None,
        output_kind=RequestOutputKind.DELTA if stream else RequestOutputKind.FINAL_ONLY,
        # vLLM's servers pass a router's KV-transfer handshake so (the engine
        # core warns and ignores it when no --kv-transfer-config is set).
        extra_args=(None if p.kv_transfer_params is None
                    else {"kv_transfer_params": dict(p.kv_transfer_params)}),
    )


def _finite(x: float) -> float:
    return finite_logprob(x)[0]


def _position(sampled: int, entry: Any) -> PositionLogprobs:
    """One position of vLLM logprobs ({token_id: Logprob}) to the domain."""
    if entry is None:
        return PositionLogprobs(sampled, LOGPROB_FLOOR, None, [])
    sampled_lp = entry.get(sampled)
    ranked = sorted(
        (Candidate(tid, _finite(lp.logprob), lp.rank) for tid, lp in entry.items()),
        key=lambda c: (c.rank if c.rank is not None else 1 << 30),
    )
    if sampled_lp is None:
        return PositionLogprobs(sampled, LOGPROB_FLOOR, None, ranked)
    logprob, non_finite = finite_logprob(sampled_lp.logprob)
    return PositionLogprobs(sampled, logprob, sampled_lp.rank, ranked, non_finite)


_NO_IDS: list[int] = []  # shared, never mutated


def npy_bytes(array: Any) -> bytes:
    """An array as .npy bytes (what vLLM base64-encodes for routed experts)."""
    import io

    import numpy as np

    buffer = io.BytesIO()
    np.save(buffer, np.asarray(array), allow_pickle=False)
    return buffer.getvalue()


def convert_output(out: Any, wall_offset: float, full: bool) -> EngineOutput:
    """One vLLM RequestOutput to the domain. `full`: also the prompt ids and
    the engine's timestamps (first and last output of a request)."""
    choices = []
    for c in out.outputs:
        ids = c.token_ids
        ids = ids if type(ids) is list else list(ids)
        lps = None
        if c.logprobs is not None:
            lps = [_position(tid, c.logprobs[i]) for i, tid in enumerate(ids)]
        spans = None
        if c.weight_versions:  # set on the output that finishes the choice
            spans = [WeightSpan(str(w.version), int(w.start), int(w.end))
                     for w in c.weight_versions]
        routed = getattr(c, "routed_experts", None)  # with --enable-return-routed-experts
        choices.append(
            ChoiceOutput(c.index, ids, c.text or "", lps, c.finish_reason, c.stop_reason, spans,
                         None if routed is None else npy_bytes(routed))
        )
    if not full:
        return EngineOutput(choices, _NO_IDS, int(out.num_cached_tokens or 0), bool(out.finished))
    prompt_lps = None
    if out.prompt_logprobs is not None:
        prompt_ids = out.prompt_token_ids or []
        prompt_lps = [
            None if entry is None else _position(prompt_ids[i], entry)
            for i, entry in enumerate(out.prompt_logprobs)
        ]
    times = None
    m = getattr(out, "metrics", None)
    if m is not None:

        def wall(ts: float) -> float | None:
            return ts + wall_offset if ts else None

        times = EngineTimes(
            arrival=getattr(m, "arrival_time", None) or None,
            scheduled=wall(getattr(m, "scheduled_ts", 0.0)),
            first_token=wall(getattr(m, "first_token_ts", 0.0)),
            last_token=wall(getattr(m, "last_token_ts", 0.0)),
        )
    return EngineOutput(
        choices=choices,
        prompt_token_ids=list(out.prompt_token_ids or []),
        num_cached_tokens=int(out.num_cached_tokens or 0),
        finished=bool(out.finished),
        prompt_logprobs=prompt_lps,
        times=times,
        kv_transfer_params=getattr(out, "kv_transfer_params", None),
    )


def engine_failure(out: EngineOutput) -> tuple[EngineOutput | None, errors.TokenwireError] | None:
    """An output whose choice finished with vLLM's "error" (a retryable
    request-level failure, as a multimodal processor-cache drift: vLLM's
    server answers 500): None when no choice failed; else the ids that
    came with it (finish cleared, to deliver before the error: nothing is
    lost) or None, and the error that ends the request."""
    if not any(c.finish_reason == "error" for c in out.choices):
        return None
    kept = [dataclasses.replace(c, finish_reason=None, stop_reason=None)
            for c in out.choices if c.token_ids]
    before = dataclasses.replace(out, choices=kept, finished=False) if kept else None
    return before, errors.Unavailable(
        "the engine failed this request during generation (vLLM's retryable request error, "
        "e.g. its multimodal processor cache drifted); send it again",
        reason="ENGINE_REQUEST_FAILED")


def map_engine_error(exc: BaseException) -> errors.TokenwireError:
    """vLLM exceptions to tokenwire errors (validation, overload, death)."""
    from vllm.exceptions import GracefulHTTPError, VLLMClientError, VLLMValidationError
    from vllm.v1.engine.exceptions import EngineDeadError

    if isinstance(exc, errors.TokenwireError):
        return exc
    if isinstance(exc, EngineDeadError):
        return errors.engine_dead(f"the engine died: {exc}")
    if isinstance(exc, VLLMValidationError):
        return errors.InvalidArgument(f"rejected by the engine: {exc}", param=exc.parameter,
                                      reason="ENGINE_REJECTED")
    if isinstance(exc, VLLMClientError):
        return errors.InvalidArgument(f"rejected by the engine: {exc}", reason="ENGINE_REJECTED")
    if isinstance(exc, GracefulHTTPError):
        if int(exc.http_status) in (429, 503):
            return errors.ResourceExhausted(f"the engine is full: {exc.message}",
                                            reason="ENGINE_FULL")
        return errors.Unavailable(exc.message, reason="ENGINE_UNAVAILABLE")
    incident = uuid.uuid4().hex[:12]
    log.error("engine error %s: %s: %s", incident, type(exc).__name__, exc)
    return errors.Internal(f"engine error (incident {incident}; details are in the server log)",
                           reason="INTERNAL")
