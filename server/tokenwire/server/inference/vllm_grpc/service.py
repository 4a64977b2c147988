"""A VllmEngine Generate run and streamed, answered in smg-grpc-proto's
shape as vLLM's own gRPC servicer answers it, so smg's router reads
tokenwire as it reads `vllm serve --grpc`:

- streamed (`stream: true`): per engine output, one `chunk` per choice
  with its new ids (`completion_tokens`: their count; the router adds them
  up), the prompt's logprobs on each choice's first chunk; when a choice
  finishes, its `complete` (finish reason, matched stop, counts);
- not streamed: one `complete` per choice with all its ids.

Every id the engine sampled is in exactly one chunk; a streamed
`complete` repeats none (its `output_ids` are empty, its
`completion_tokens` the choice's whole count). The engine's KV-connector
answer goes on the `complete` that finishes the request, as
`kv_transfer_params_json` and, when it names a host and port, the legacy
typed `kv_transfer_params` (smg's servicer's mirror)."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from smg_grpc_proto.generated import vllm_engine_pb2 as pb

from tokenwire.server.core.domain import ChoiceOutput, Engine, EngineOutput, PositionLogprobs
from tokenwire.server.core.errors import Internal
from tokenwire.server.core.weight_bounds import ENDED_REASONS
from tokenwire.server.inference.shared.outputs import final_output
from tokenwire.server.inference.vllm_grpc.request import EnginePlan

log = logging.getLogger("tokenwire.requests")


def _top(pos: PositionLogprobs, k: int, into: pb.TopLogProbs) -> None:
    for cand in pos.top[:k]:
        into.values.append(cand.logprob)
        into.token_ids.append(cand.token_id)


def _output_logprobs(positions: list[PositionLogprobs], k: int, into: pb.OutputLogProbs) -> None:
    for pos in positions:
        into.token_logprobs.append(pos.logprob)
        into.token_ids.append(pos.token_id)
        _top(pos, k, into.top_logprobs.add())


def _input_logprobs(out: EngineOutput, k: int, into: pb.InputLogProbs) -> None:
    into.token_ids.extend(out.prompt_token_ids)
    for pos in out.prompt_logprobs or ():
        entry = into.token_logprobs.add()
        top = into.top_logprobs.add()
        if pos is not None:  # (the first prompt position has none)
            entry.value = pos.logprob
            _top(pos, k, top)


def _finish(done: pb.GenerateComplete, c: ChoiceOutput) -> None:
    done.finish_reason = c.finish_reason or "stop"
    sr = c.stop_reason
    if isinstance(sr, int):
        done.matched_token_id = sr
    elif isinstance(sr, str) and not sr.startswith(ENDED_REASONS):
        done.matched_stop_str = sr  # (a weight bound's end is no stop string)


def _kv_answer(done: pb.GenerateComplete, params: dict[str, Any] | None) -> None:
    """The connector's answer as vLLM's servicer writes it (nothing when empty)."""
    if not params:
        return
    try:
        done.kv_transfer_params_json = json.dumps(params)
    except (TypeError, ValueError):
        log.warning("dropping kv_transfer_params JSON cannot hold: %r", params)
    host, port = params.get("remote_host", ""), params.get("remote_port", 0)
    if isinstance(host, str) and host and type(port) is int and 1 <= port <= 65535:
        done.kv_transfer_params.remote_host = host
        done.kv_transfer_params.remote_port = port


def _counts(msg: pb.GenerateStreamChunk | pb.GenerateComplete, out: EngineOutput,
            prompt_len: int) -> None:
    msg.prompt_tokens = len(out.prompt_token_ids) or prompt_len
    msg.cached_tokens = out.num_cached_tokens


async def run_generate(engine: Engine, plan: EnginePlan) -> list[pb.GenerateResponse]:
    """A request not streamed: one `complete` per choice, in index order."""
    final = await final_output(engine, plan.request, None)
    k = plan.request.params.logprobs or 0
    answers = []
    for c in sorted(final.choices, key=lambda c: c.index):
        resp = pb.GenerateResponse()
        done = resp.complete
        done.index = c.index
        done.output_ids.extend(c.token_ids)
        done.completion_tokens = len(c.token_ids)
        _counts(done, final, len(plan.request.prompt_token_ids))
        _finish(done, c)
        _kv_answer(done, final.kv_transfer_params)
        if c.logprobs is not None:
            _output_logprobs(c.logprobs, k, done.output_logprobs)
        if final.prompt_logprobs is not None:
            _input_logprobs(final, plan.request.params.prompt_logprobs or 0, done.input_logprobs)
        answers.append(resp)
    return answers


async def stream_generate(engine: Engine, plan: EnginePlan) -> AsyncIterator[pb.GenerateResponse]:
    """A streamed request's chunks and completes (a request not streamed:
    its completes, as the RPC is a stream either way)."""
    if not plan.stream:
        for resp in await run_generate(engine, plan):
            yield resp
        return
    k = plan.request.params.logprobs or 0
    k_prompt = plan.request.params.prompt_logprobs or 0
    prompt_len = len(plan.request.prompt_token_ids)
    counts: dict[int, int] = {}  # ids sent per choice
    finished = False
    async with contextlib.aclosing(engine.generate(plan.request)) as outputs:  # type: ignore[type-var]
        async for out in outputs:
            finished = out.finished
            for c in out.choices:
                first = c.index not in counts
                sent = counts[c.index] = counts.get(c.index, 0) + len(c.token_ids)
                if c.token_ids or first:
                    resp = pb.GenerateResponse()
                    chunk = resp.chunk
                    chunk.index = c.index
                    chunk.token_ids.extend(c.token_ids)
                    chunk.completion_tokens = len(c.token_ids)
                    _counts(chunk, out, prompt_len)
                    if c.logprobs is not None:
                        _output_logprobs(c.logprobs, k, chunk.output_logprobs)
                    if first and out.prompt_logprobs is not None:
                        _input_logprobs(out, k_prompt, chunk.input_logprobs)
                    yield resp
                if c.finish_reason is not None:
                    resp = pb.GenerateResponse()
                    done = resp.complete
                    done.index = c.index
                    done.completion_tokens = sent
                    _counts(done, out, prompt_len)
                    _finish(done, c)
                    _kv_answer(done, out.kv_transfer_params)
                    yield resp
    if not finished:
        raise Internal("the engine ended the stream without finishing the request",
                       reason="ENGINE_OUTPUT_INCOMPLETE")
