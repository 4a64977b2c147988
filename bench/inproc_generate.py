"""Where tokenwire's Generate stream spends its Python per token, stage by
stage, against the smg servicer's (system E of `make bench`), with no gRPC,
no network and no engine: the same prebuilt vLLM `RequestOutput`s (one new
id each, as vLLM's DELTA streams give them) replayed through each path in
one process. Deterministic enough to compare changes on a shared machine
(the stages are interleaved and each is the median of `--reps`).

    .venv/bin/python -m bench.inproc_generate [--requests 64] [--tokens 128] [--reps 7]

Stages (cumulative, microseconds per token):
  replay     iterate the prebuilt outputs (the floor)
  adapter    + VllmEngine.generate (vLLM output -> domain, engine/vllm/convert.py)
  guarded    + GuardedEngine.generate (admission, metrics, weight bounds)
  chunks     + stream_generate (domain -> GenerateResponse)
  serialize  + SerializeToString of every chunk (what grpc does next)
  E          smg-grpc-servicer's _chunk_response + SerializeToString
Also the bytes per chunk on the wire for tokenwire and for E.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import statistics
import time
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

from tokenwire.server.core.admission import Admission
from tokenwire.server.core.domain import Caller
from tokenwire.server.core.metrics import Metrics
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.guarded import GuardedEngine
from tokenwire.server.engine.vllm.adapter import VllmEngine
from tokenwire.server.inference.generate.service import build_generate_plan, stream_generate
from tokenwire.v1 import generate_pb2

PROMPT = list(range(100, 160))


def outputs(request_id: str, tokens: int) -> list[Any]:
    """The DELTA outputs vLLM's AsyncLLM yields for one request: one id each,
    prompt ids on every output (as vLLM sends them), the last finished."""
    from vllm.outputs import CompletionOutput, RequestOutput

    out = []
    for i in range(tokens):
        last = i == tokens - 1
        c = CompletionOutput(index=0, text="", token_ids=[1000 + i], cumulative_logprob=None,
                             logprobs=None, finish_reason="length" if last else None)
        out.append(RequestOutput(request_id, None, PROMPT, None, [c], last, num_cached_tokens=0))
    return out


class _Replay:
    """AsyncLLM.generate replaying prebuilt outputs."""

    model_config = SimpleNamespace(runner_type="generate")  # a generative model's

    def __init__(self, streams: dict[str, list[Any]]):
        self.streams = streams

    async def generate(self, prompt: Any, sp: Any, request_id: str, **_: Any) -> AsyncIterator[Any]:
        for out in self.streams[request_id]:
            yield out


def _engine(streams: dict[str, list[Any]]) -> VllmEngine:
    engine = VllmEngine.__new__(VllmEngine)  # no AsyncLLM: the replay instead
    engine._llm = _Replay(streams)
    engine._max_model_len = 4096
    engine._vocab_size = 50000
    engine._max_token_chars = 16  # (stream chunks are bounded by it: inference/chunk_bounds.py)
    engine._loras = {}
    engine._sampling_defaults = {}
    engine.lora_request = lambda name: None  # type: ignore[method-assign]
    return engine


def _request(i: int, tokens: int) -> generate_pb2.GenerateRequest:
    req = generate_pb2.GenerateRequest(token_ids=PROMPT, request_id=f"r{i}")
    sp = req.sampling_params
    sp.max_tokens, sp.ignore_eos, sp.temperature, sp.seed = tokens, True, 1.0, 0
    return req


async def _tokenwire(stage: str, engine: VllmEngine, guarded: GuardedEngine,
                     settings: ServerSettings, requests: int, tokens: int) -> int:
    n = 0
    for i in range(requests):
        plan = build_generate_plan(_request(i, tokens), guarded, settings, served_model="bench",
                                   caller=Caller(), stream=True)
        if stage == "adapter":
            async with contextlib.aclosing(engine.generate(plan.request)) as outs:
                async for _ in outs:
                    n += 1
        elif stage == "guarded":
            async with contextlib.aclosing(guarded.generate(plan.request)) as outs:
                async for _ in outs:
                    n += 1
        else:
            serialize = stage == "serialize"
            async with contextlib.aclosing(stream_generate(guarded, plan)) as chunks:
                async for chunk in chunks:
                    if serialize:
                        chunk.SerializeToString()
                    n += 1
    return n


async def _replay(streams: dict[str, list[Any]]) -> int:
    llm = _Replay(streams)
    n = 0
    for rid in streams:
        async for _ in llm.generate(None, None, rid):
            n += 1
    return n


async def _smg(streams: dict[str, list[Any]]) -> int:
    from smg_grpc_servicer.vllm.servicer import VllmEngineServicer

    llm = _Replay(streams)
    n = 0
    for rid in streams:
        seen: set[int] = set()
        async for output in llm.generate(None, None, rid):
            for completion in output.outputs:
                first = completion.index not in seen
                seen.add(completion.index)
                VllmEngineServicer._chunk_response(output, completion=completion, num_logprobs=None,
                                                   num_prompt_logprobs=None,
                                                   is_first_chunk=first).SerializeToString()
                if completion.finish_reason:
                    VllmEngineServicer._complete_response(
                        output, completion=completion, num_logprobs=None, num_prompt_logprobs=None
                    ).SerializeToString()
                n += 1
    return n


def chunk_bytes(guarded: GuardedEngine, settings: ServerSettings, tokens: int) -> tuple[int, int]:
    """Serialized size of a middle chunk: tokenwire's, E's."""
    from smg_grpc_servicer.vllm.servicer import VllmEngineServicer

    async def ours() -> int:
        plan = build_generate_plan(_request(0, tokens), guarded, settings, served_model="bench",
                                   caller=Caller(), stream=True)
        sizes = []
        async with contextlib.aclosing(stream_generate(guarded, plan)) as chunks:
            async for chunk in chunks:
                sizes.append(chunk.ByteSize())
        return sizes[len(sizes) // 2]

    out = outputs("x", 3)[1]
    theirs = VllmEngineServicer._chunk_response(out, completion=out.outputs[0], num_logprobs=None,
                                                num_prompt_logprobs=None, is_first_chunk=False)
    return asyncio.run(ours()), theirs.ByteSize()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=7)
    ns = parser.parse_args(argv)
    streams = {f"r{i}": outputs(f"r{i}", ns.tokens) for i in range(ns.requests)}
    # Generate plans name their engine request "gen-<request_id>".
    streams.update({f"gen-r{i}": streams[f"r{i}"] for i in range(ns.requests)})
    engine = _engine(streams)
    settings = ServerSettings(engine="fake", max_model_len=4096)
    guarded = GuardedEngine(engine, Admission(1 << 20, 1 << 40), Metrics(), ServingState())
    plain = {k: v for k, v in streams.items() if k.startswith("r")}

    def ours(stage: str) -> Callable[[], Any]:
        return lambda: _tokenwire(stage, engine, guarded, settings, ns.requests, ns.tokens)

    stages: dict[str, Callable[[], Any]] = {
        "replay": lambda: _replay(plain),
        **{s: ours(s) for s in ("adapter", "guarded", "chunks", "serialize")},
    }
    smg = importlib.util.find_spec("smg_grpc_servicer") is not None  # the bench extra
    if smg:
        stages["E"] = lambda: _smg(plain)
    times: dict[str, list[float]] = {s: [] for s in stages}
    for _ in range(ns.reps):
        for name, run in stages.items():  # interleaved: drift hits every stage alike
            t0 = time.perf_counter()
            n = asyncio.run(run())
            times[name].append((time.perf_counter() - t0) / n * 1e6)
    print(f"{ns.requests} requests x {ns.tokens} tokens, median of {ns.reps} (min-max), us/token:")
    for name, ts in times.items():
        print(f"  {name:<10} {statistics.median(ts):6.2f} ({min(ts):.2f}-{max(ts):.2f})")
    if not smg:
        print("  (E: smg-grpc-servicer is not installed: pip install -e '.[bench]')")
        return 0
    mine, theirs = chunk_bytes(guarded, settings, ns.tokens)
    print(f"bytes per middle chunk: tokenwire {mine}, E {theirs}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
