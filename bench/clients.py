"""Load drivers and the measured window.

A driver runs one streamed request and reports each message's token ids as
they arrive to its `Record`; only ids actually received count (F, which
returns no ids to REST clients, is counted from content chunks and usage).
`run_window` keeps `concurrency` requests in flight through a warm-up and a
fixed measured window, counting by arrival time, then cancels what is left.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import math
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

ITL_SAMPLE = 50_000  # inter-token gaps kept per cell (a uniform sample beyond that)


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, max(0, round(q * (len(values) - 1))))]


class Window:
    """What arrives inside one measured window [t0, t1) of perf_counter time:
    ids, finished requests, TTFT of requests started in it, inter-token gaps
    (a message carrying k ids spreads its gap over k tokens) whose both ends
    are in it. Closed (infinite) bounds until `open` and `close`."""

    def __init__(self, seed: int = 0) -> None:
        self.t0 = math.inf
        self.t1 = math.inf
        self.tokens = 0
        self.finished = 0
        self.errors: Counter[str] = Counter()  # over the whole cell, warm-up included
        self.ttft: list[float] = []
        self.itl: list[float] = []
        self._gaps_seen = 0
        self._rng = random.Random(seed)

    def open(self, now: float | None = None) -> None:
        self.t0 = time.perf_counter() if now is None else now

    def close(self, now: float | None = None) -> None:
        self.t1 = time.perf_counter() if now is None else now

    def inside(self, t: float) -> bool:
        return self.t0 <= t < self.t1

    def arrived(self, rec: Record, now: float, n: int) -> None:
        """`n` ids of `rec` arrived at `now` (before `rec` is updated)."""
        if not self.inside(now):
            return
        self.tokens += n
        if rec.first is None:
            if rec.start >= self.t0:
                self.ttft.append(now - rec.start)
        elif rec.end >= self.t0:
            gap = (now - rec.end) / n
            for _ in range(n):
                self._gaps_seen += 1
                if len(self.itl) < ITL_SAMPLE:
                    self.itl.append(gap)
                else:
                    j = self._rng.randrange(self._gaps_seen)
                    if j < ITL_SAMPLE:
                        self.itl[j] = gap

    def done(self, rec: Record, now: float) -> None:
        if rec.error:
            self.errors[rec.error] += 1
        elif self.inside(now):
            self.finished += 1

    @property
    def seconds(self) -> float:
        return self.t1 - self.t0

    def result(self) -> dict[str, Any]:
        ms = {k: (pct(v, q) or 0.0) * 1000 for k, v, q in [
            ("ttft_p50_ms", self.ttft, 0.5), ("ttft_p99_ms", self.ttft, 0.99),
            ("itl_p50_ms", self.itl, 0.5), ("itl_p99_ms", self.itl, 0.99),
        ]}
        return {"seconds": self.seconds, "tokens": self.tokens, "finished": self.finished,
                "errors": sum(self.errors.values()), "error_kinds": dict(self.errors), **ms}


@dataclasses.dataclass
class Record:
    start: float
    first: float | None = None
    end: float = 0.0  # the last arrival
    tokens: int = 0
    error: str | None = None
    window: Window | None = None

    def arrived(self, n: int, now: float | None = None) -> None:
        if n <= 0:
            return
        if now is None:
            now = time.perf_counter()
        if self.window is not None:
            self.window.arrived(self, now, n)
        if self.first is None:
            self.first = now
        self.end = now
        self.tokens += n


@dataclasses.dataclass(frozen=True)
class Prompt:
    text: str  # the user message (chat systems render and tokenize it)
    ids: list[int]  # the same prompt rendered and tokenized (token-in systems)


class Driver(Protocol):
    def __call__(
        self, prompt: Prompt, max_tokens: int, window: Window | None = None
    ) -> Awaitable[Record]: ...


Closer = Callable[[], Awaitable[None]]


def _grpc_stream(call_for: Callable[[Any], Any], build: Callable[[Prompt, int], Any],
                 ids_of: Callable[[Any], int]) -> Driver:
    """A driver for a server-streaming gRPC call: `build` makes the request,
    `ids_of` counts the ids of one response. Cancelling the task cancels the
    call (the server sees CANCELLED and aborts the engine request)."""
    import grpc

    async def run(prompt: Prompt, max_tokens: int, window: Window | None = None) -> Record:
        call = call_for(build(prompt, max_tokens))
        rec = Record(time.perf_counter(), window=window)
        try:
            async for resp in call:
                rec.arrived(ids_of(resp))
        except grpc.aio.AioRpcError as exc:
            rec.error = exc.code().name
        except asyncio.CancelledError:
            call.cancel()
            raise
        return rec

    return run


def _tokenwire_stream(
    address: str, method: str, build: Callable[[Prompt, int], Any], own_connection: bool = False
) -> tuple[Driver, Closer]:
    import grpc

    from tokenwire.v1 import service_pb2_grpc

    # own_connection: this channel opens its own TCP connection instead of
    # sharing the process's (several serving processes on one port spread
    # connections, not calls).
    options = [("grpc.use_local_subchannel_pool", 1)] if own_connection else []
    channel = grpc.aio.insecure_channel(address, options=options)
    call = getattr(service_pb2_grpc.TokenwireServiceStub(channel), method)
    return _grpc_stream(
        call, build, lambda chunk: sum(len(ch.token_ids) for ch in chunk.choices)
    ), channel.close


def tokenwire_grpc(address: str, stream_interval: int | None = None,
                   own_connection: bool = False) -> tuple[Driver, Closer]:
    from tokenwire.v1 import chat_pb2

    def build(prompt: Prompt, max_tokens: int) -> chat_pb2.CreateChatCompletionRequest:
        req = chat_pb2.CreateChatCompletionRequest(
            max_tokens=max_tokens, ignore_eos=True, return_token_ids=True, temperature=1.0, seed=0
        )
        req.messages.add(role="user").content.string_value = prompt.text
        if stream_interval:
            req.stream_options.stream_interval = stream_interval
        return req

    return _tokenwire_stream(address, "StreamChatCompletion", build, own_connection)


def tokenwire_generate(address: str, own_connection: bool = False) -> tuple[Driver, Closer]:
    """tokenwire's token-in/token-out StreamGenerate (no chat template, ids
    only in and out: the like-for-like call to E)."""
    from tokenwire.v1 import generate_pb2

    def build(prompt: Prompt, max_tokens: int) -> generate_pb2.GenerateRequest:
        req = generate_pb2.GenerateRequest(token_ids=prompt.ids)
        sp = req.sampling_params
        sp.max_tokens, sp.ignore_eos, sp.temperature, sp.seed = max_tokens, True, 1.0, 0
        return req

    return _tokenwire_stream(address, "StreamGenerate", build, own_connection)


def vllm_grpc(address: str) -> tuple[Driver, Closer]:
    import grpc
    from smg_grpc_proto.generated import vllm_engine_pb2, vllm_engine_pb2_grpc

    channel = grpc.aio.insecure_channel(address)
    stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
    counter = itertools.count()

    def build(prompt: Prompt, max_tokens: int) -> vllm_engine_pb2.GenerateRequest:
        return vllm_engine_pb2.GenerateRequest(
            request_id=f"bench-{next(counter)}",
            tokenized=vllm_engine_pb2.TokenizedInput(input_ids=prompt.ids),
            sampling_params=vllm_engine_pb2.SamplingParams(
                temperature=1.0, top_p=1.0, max_tokens=max_tokens, ignore_eos=True, n=1, seed=0
            ),
            stream=True,
        )

    def ids_of(resp: Any) -> int:
        return len(resp.chunk.token_ids) if resp.HasField("chunk") else 0

    return _grpc_stream(stub.Generate, build, ids_of), channel.close


def openai_sse(
    base_url: str, model: str, *, ids_field: str | None, extra: dict[str, Any] | None = None,
    content: Callable[[Prompt], Any] | None = None,
) -> tuple[Driver, Closer]:
    """REST + SSE chat completions. Cancelling the task closes the stream's
    connection (the server sees the client go and aborts the request).

    ids_field: where the chunk carries the new ids ("token_ids" on each
    choice), or None when the server returns no ids: then each content chunk
    counts one id and the final usage chunk brings the count up to
    `completion_tokens` (counted when it arrives).
    content: the user message's content for a prompt (default: its text),
    e.g. parts with an image (bench.image_ttft).
    """
    import httpx

    client = httpx.AsyncClient(
        base_url=base_url, timeout=httpx.Timeout(600.0), limits=httpx.Limits(max_connections=1024)
    )

    async def run(prompt: Prompt, max_tokens: int, window: Window | None = None) -> Record:
        user = content(prompt) if content else prompt.text
        body: dict[str, Any] = {
            "model": model, "messages": [{"role": "user", "content": user}],
            "max_tokens": max_tokens, "ignore_eos": True, "temperature": 1.0, "seed": 0,
            "stream": True, "stream_options": {"include_usage": True}, "return_token_ids": True,
            **(extra or {}),
        }
        rec = Record(time.perf_counter(), window=window)
        try:
            async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                if resp.status_code != 200:
                    rec.error = f"HTTP {resp.status_code}"
                    await resp.aread()
                    return rec
                async for line in resp.aiter_lines():
                    if not line.startswith("data: ") or line == "data: [DONE]":
                        continue
                    chunk = json.loads(line[6:])
                    choices = chunk.get("choices") or []
                    if ids_field is not None:
                        rec.arrived(sum(len(ch.get(ids_field) or []) for ch in choices))
                        continue
                    rec.arrived(sum(1 for ch in choices if (ch.get("delta") or {}).get("content")))
                    usage = chunk.get("usage")
                    if usage and not choices:  # no ids on the wire: trust usage for the count
                        rec.arrived(int(usage.get("completion_tokens", 0)) - rec.tokens)
        except httpx.HTTPError as exc:
            rec.error = type(exc).__name__
        return rec

    return run, client.aclose


async def run_window(
    driver: Driver, prompts: list[Prompt], concurrency: int, max_tokens: int,
    warmup: float, seconds: float, snapshot: Callable[[], dict[str, float]] | None = None,
) -> dict[str, Any]:
    """Keep `concurrency` requests in flight (each new request takes the next
    prompt, cycling) for `warmup` seconds, then measure `seconds`; at the end
    cancel every request still in flight. The workers start spread over the
    warm-up (the last one as the window opens), so that equal requests do
    not finish in lockstep waves. `snapshot` (CPU seconds by process group) is taken at
    the window's two edges; its difference is `cpu`."""
    win = Window()
    order = itertools.count()

    async def worker(i: int) -> None:
        await asyncio.sleep(warmup * i / concurrency)
        while True:
            try:
                rec = await driver(prompts[next(order) % len(prompts)], max_tokens, win)
            except Exception as exc:  # a driver bug or an unexpected transport error
                rec = Record(0.0, error=type(exc).__name__)
                await asyncio.sleep(0.05)
            win.done(rec, time.perf_counter())

    tasks = [asyncio.create_task(worker(i)) for i in range(concurrency)]
    try:
        await asyncio.sleep(warmup)
        cpu0 = snapshot() if snapshot else {}
        win.open()
        await asyncio.sleep(seconds)
        win.close()
        cpu1 = snapshot() if snapshot else {}
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {**win.result(), "cpu": {g: cpu1[g] - cpu0[g] for g in cpu0}}
