"""Load drivers: each runs one streamed request and records when every token
id arrived. Only ids actually received count (F, which returns no ids to
REST clients, is counted from usage and flagged)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any


@dataclasses.dataclass
class Record:
    start: float
    first: float | None = None
    end: float = 0.0
    tokens: int = 0
    gaps: list[float] = dataclasses.field(default_factory=list)  # per-token inter-arrival
    error: str | None = None

    def arrived(self, n: int) -> None:
        now = time.perf_counter()
        if n <= 0:
            return
        if self.first is None:
            self.first = now
        else:
            last = self.end
            # n ids in one message: the gap is shared by them
            self.gaps.extend([(now - last) / n] * n)
        self.end = now
        self.tokens += n


@dataclasses.dataclass(frozen=True)
class Prompt:
    text: str  # the user message (chat systems render and tokenize it)
    ids: list[int]  # the same prompt rendered and tokenized (token-in systems)


Driver = Callable[[Prompt, int], Awaitable[Record]]


def _tokenwire_stream(
    address: str, method: str, build: Callable[[Prompt, int], Any]
) -> tuple[Driver, Callable[[], Awaitable[None]]]:
    """A driver for one of tokenwire's streaming RPCs: `build` makes the
    request; the ids of every choice of every message are counted."""
    import grpc

    from tokenwire.v1 import service_pb2_grpc

    channel = grpc.aio.insecure_channel(address)
    call = getattr(service_pb2_grpc.TokenwireServiceStub(channel), method)

    async def run(prompt: Prompt, max_tokens: int) -> Record:
        req = build(prompt, max_tokens)
        rec = Record(time.perf_counter())
        try:
            async for chunk in call(req):
                for ch in chunk.choices:
                    rec.arrived(len(ch.token_ids))
        except grpc.aio.AioRpcError as exc:
            rec.error = exc.code().name
        return rec

    return run, channel.close


def tokenwire_grpc(
    address: str, stream_interval: int | None = None
) -> tuple[Driver, Callable[[], Awaitable[None]]]:
    from tokenwire.v1 import chat_pb2

    def build(prompt: Prompt, max_tokens: int) -> chat_pb2.CreateChatCompletionRequest:
        req = chat_pb2.CreateChatCompletionRequest(
            max_tokens=max_tokens, ignore_eos=True, return_token_ids=True, temperature=1.0, seed=0
        )
        req.messages.add(role="user").content.string_value = prompt.text
        if stream_interval:
            req.stream_options.stream_interval = stream_interval
        return req

    return _tokenwire_stream(address, "StreamChatCompletion", build)


def tokenwire_generate(address: str) -> tuple[Driver, Callable[[], Awaitable[None]]]:
    """tokenwire's token-in/token-out StreamGenerate (no chat template, ids
    only in and out: the like-for-like call to E)."""
    from tokenwire.v1 import generate_pb2

    def build(prompt: Prompt, max_tokens: int) -> generate_pb2.GenerateRequest:
        req = generate_pb2.GenerateRequest(token_ids=prompt.ids)
        sp = req.sampling_params
        sp.max_tokens, sp.ignore_eos, sp.temperature, sp.seed = max_tokens, True, 1.0, 0
        return req

    return _tokenwire_stream(address, "StreamGenerate", build)


def vllm_grpc(address: str) -> tuple[Driver, Callable[[], Awaitable[None]]]:
    import grpc
    from smg_grpc_proto.generated import vllm_engine_pb2, vllm_engine_pb2_grpc

    channel = grpc.aio.insecure_channel(address)
    stub = vllm_engine_pb2_grpc.VllmEngineStub(channel)
    counter = iter(range(1 << 62))

    async def run(prompt: Prompt, max_tokens: int) -> Record:
        req = vllm_engine_pb2.GenerateRequest(
            request_id=f"bench-{next(counter)}",
            tokenized=vllm_engine_pb2.TokenizedInput(input_ids=prompt.ids),
            sampling_params=vllm_engine_pb2.SamplingParams(
                temperature=1.0, top_p=1.0, max_tokens=max_tokens, ignore_eos=True, n=1, seed=0
            ),
            stream=True,
        )
        rec = Record(time.perf_counter())
        try:
            async for resp in stub.Generate(req):
                if resp.HasField("chunk"):
                    rec.arrived(len(resp.chunk.token_ids))
        except grpc.aio.AioRpcError as exc:
            rec.error = exc.code().name
        return rec

    return run, channel.close


def openai_sse(
    base_url: str, model: str, *, ids_field: str | None, extra: dict[str, Any] | None = None
) -> tuple[Driver, Callable[[], Awaitable[None]]]:
    """REST + SSE chat completions with prompt ids in the body.

    ids_field: where the chunk carries the new ids ("token_ids" on each
    choice), or None when the server returns no ids (counted from usage).
    """
    import httpx

    client = httpx.AsyncClient(
        base_url=base_url, timeout=httpx.Timeout(600.0), limits=httpx.Limits(max_connections=1024)
    )

    async def run(prompt: Prompt, max_tokens: int) -> Record:
        body: dict[str, Any] = {
            "model": model,
            "messages": [{"role": "user", "content": prompt.text}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "temperature": 1.0,
            "seed": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "return_token_ids": True,
        }
        body.update(extra or {})
        rec = Record(time.perf_counter())
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
                        for ch in choices:
                            rec.arrived(len(ch.get(ids_field) or []))
                    else:
                        for ch in choices:
                            if (ch.get("delta") or {}).get("content"):
                                rec.arrived(1)
                        usage = chunk.get("usage")
                        if usage and not choices:
                            # no ids on the wire: trust usage for the count
                            rec.tokens = int(usage.get("completion_tokens", rec.tokens))
        except httpx.HTTPError as exc:
            rec.error = type(exc).__name__
        return rec

    return run, client.aclose


async def run_level(
    driver: Driver, prompts: list[Prompt], concurrency: int, max_tokens: int,
    progress: Callable[[int], None] | None = None,
) -> tuple[list[Record], float]:
    """Run all prompts with at most `concurrency` in flight; return records
    and wall seconds."""
    queue = list(reversed(prompts))
    records: list[Record] = []

    async def worker() -> None:
        while queue:
            prompt = queue.pop()
            rec = await driver(prompt, max_tokens)
            records.append(rec)
            if progress:
                progress(1)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return records, time.perf_counter() - t0
