"""Where an image chat's time to first token goes, per stage, in vLLM's
own server and in tokenwire (issue #46 item 5): both started as in
bench.image_ttft, each through a launcher (`--launch vllm|tokenwire`, this
module) that stamps each request's stages (wall clock) into a JSON-lines
file: the request in, the render (vLLM's `render_chat_async` under both;
tokenwire's header check inside it), the engine call and its first output.
The client stamps its send and its first token id. Prints the mean of each
stage over the measured requests, per system.

    .venv/bin/python -m bench.image_stages    (5 to 8 minutes on the shared 2 cores)

Results: docs/bench.md ("Image chats' time to first token").
"""

from __future__ import annotations

import argparse
import asyncio
import contextvars
import itertools
import json
import os
import pathlib
import runpy
import statistics
import sys
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from bench import clients, contestants, systems
from bench import image_ttft as it

_CUR: contextvars.ContextVar[dict[str, float] | None] = contextvars.ContextVar("stages",
                                                                              default=None)
_IDS = itertools.count()


def _stamp(key: str) -> None:
    stages = _CUR.get()
    if stages is not None:
        stages[key] = time.time()


def _timed(fn: Callable[..., Any], before: str, after: str, *, start: bool = False
           ) -> Callable[..., Any]:
    """`fn` (a coroutine function) stamping `before` and `after`; `start`:
    a new request's stages begin here."""
    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        if start:
            _CUR.set({"id": float(next(_IDS))})
        _stamp(before)
        try:
            return await fn(*args, **kwargs)
        finally:
            _stamp(after)
    return wrapper


def _first_output(fn: Callable[..., Any], log: Any) -> Callable[..., Any]:
    """An engine's `generate` stamping its call and first output, writing the
    request's stages then (bound when called: the stream may be read in
    another task)."""
    def wrapper(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        stages = _CUR.get()
        if stages is None:
            stages = {"id": float(next(_IDS))}

        async def outputs() -> AsyncIterator[Any]:
            stages["gen0"] = time.time()
            first = True
            async for out in fn(*args, **kwargs):
                if first:
                    stages["first"], first = time.time(), False
                    log.write(json.dumps(stages) + "\n")
                yield out
        return outputs()
    return wrapper


def _patch(which: str) -> None:
    log = open(os.environ["IMAGE_STAGES_LOG"], "a", buffering=1)
    if which == "tokenwire":
        from tokenwire.server.api import fronts
        from tokenwire.server.engine.vllm import adapter, chat_media

        fronts._plan = _timed(fronts._plan, "in", "planned", start=True)  # type: ignore[assignment]
        media = chat_media.VllmChatMedia
        media.render = _timed(media.render, "render0", "render1")  # type: ignore[method-assign]
        engine = adapter.VllmEngine
        engine.generate = _first_output(engine.generate, log)  # type: ignore[method-assign]
    else:
        from vllm.entrypoints.openai.chat_completion import serving
        from vllm.v1.engine import async_llm

        chat = serving.OpenAIServingChat
        chat.create_chat_completion = _timed(  # type: ignore[method-assign]
            chat.create_chat_completion, "in", "returned", start=True)
        chat.render_chat_request = _timed(  # type: ignore[method-assign]
            chat.render_chat_request, "render0", "render1")
        llm = async_llm.AsyncLLM
        llm.generate = _first_output(llm.generate, log)  # type: ignore[method-assign]


def _launch(which: str, argv: list[str]) -> None:
    _patch(which)
    if which == "tokenwire":
        from tokenwire.cli import main as cli

        sys.exit(cli(["serve", *argv]))
    sys.argv = ["api_server", *argv]
    runpy.run_module("vllm.entrypoints.openai.api_server", run_name="__main__")


STAGES = [("client TTFT", "start", "first_client"), ("in -> first output", "in", "first"),
          ("in -> render", "in", "render0"), ("render", "render0", "render1"),
          ("render -> engine call", "render1", "gen0"), ("engine call -> first", "gen0", "first")]


def _report(name: str, server: list[dict[str, float]], client: list[dict[str, float]]) -> None:
    def mean(rows: list[dict[str, float]], a: str, b: str) -> str:
        values = [r[b] - r[a] for r in rows if a in r and b in r]
        return f"{statistics.fmean(values) * 1000:7.1f}" if values else "      -"

    print(f"{name} ({len(client)} requests):")
    for label, a, b in STAGES:
        rows = client if a == "start" else server
        print(f"  {label:24s} {mean(rows, a, b)} ms")
    ttft = statistics.fmean(r["first_client"] - r["start"] for r in client)
    inside = [r["first"] - r["in"] for r in server if "in" in r and "first" in r]
    if inside:
        print(f"  {'outside the server':24s} {(ttft - statistics.fmean(inside)) * 1000:7.1f} ms")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--launch", choices=["vllm", "tokenwire"], help=argparse.SUPPRESS)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--requests", type=int, default=64, help="per system per rep")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--gateway-concurrency", type=int, help="Envoy's worker threads")
    ns, rest = ap.parse_known_args()
    if ns.launch:
        return _launch(ns.launch, rest)
    cfg = it.VlmConfig(model=it.VLM, kv_cache_bytes=128 << 20)
    logs = contestants.OUT / "image_stages"
    logs.mkdir(parents=True, exist_ok=True)
    vport, tport = systems.free_port(), systems.free_port()
    log_of = {"vllm": logs / "vllm.jsonl", "tokenwire": logs / "tokenwire.jsonl"}
    for f in log_of.values():
        f.unlink(missing_ok=True)
    me = [systems.PY, "-m", "bench.image_stages", "--launch"]
    procs = [
        systems.spawn("vllm", [*me, "vllm", "--host", "127.0.0.1", "--port", str(vport),
                               *cfg.vllm_flags(), "--disable-uvicorn-access-log"], logs,
                      systems.bench_env({"IMAGE_STAGES_LOG": str(log_of["vllm"])})),
        systems.spawn("tokenwire", [*me, "tokenwire", "--port", str(tport), *cfg.vllm_flags(),
                                    "--log-level", "WARNING"], logs,
                      systems.bench_env({"IMAGE_STAGES_LOG": str(log_of["tokenwire"])})),
    ]
    try:
        address = f"127.0.0.1:{tport}"
        systems.wait_until(lambda: systems.grpc_serving(address), procs, timeout=900)
        workers = ns.gateway_concurrency
        gw = contestants.start_gateway(address, logs,
                                       ["--concurrency", str(workers)] if workers else [])
        if gw is None:
            raise SystemExit("the gateway did not start")
        procs.append(gw[0])
        vurl = f"http://127.0.0.1:{vport}"
        systems.wait_until(lambda: systems.http_ok(vurl + "/health"), procs, timeout=900)
        targets = {"vllm": (vurl, cfg.model), "tokenwire": (gw[1], pathlib.Path(cfg.model).name)}
        pool = iter(it.images((ns.reps * ns.requests + ns.concurrency) * 2, 64, "PNG"))
        sent: dict[str, list[dict[str, float]]] = {name: [] for name in targets}
        for url, model in targets.values():  # warm-up, not counted
            asyncio.run(_turn(url, model, [next(pool) for _ in range(ns.concurrency)],
                              ns.concurrency, []))
        warm = {name: len(_rows(log_of[name])) for name in targets}
        for rep in range(ns.reps):
            order = list(targets.items())
            for name, (url, model) in order[::-1] if rep % 2 else order:
                asyncio.run(_turn(url, model, [next(pool) for _ in range(ns.requests)],
                                  ns.concurrency, sent[name]))
                print(f"rep {rep} {name} done", flush=True)
        for name in targets:
            _report(name, _rows(log_of[name])[warm[name]:], sent[name])
    finally:
        for p in reversed(procs):
            p.stop()


def _rows(path: pathlib.Path) -> list[dict[str, float]]:
    if not path.exists():
        return []
    return sorted((json.loads(line) for line in path.read_text().splitlines()),
                  key=lambda r: r["id"])


async def _turn(url: str, model: str, prompts: list[clients.Prompt], concurrency: int,
                out: list[dict[str, float]]) -> None:
    driver, close = clients.openai_sse(url, model, ids_field="token_ids", content=it.parts)
    queue = iter(prompts)

    async def worker() -> None:
        for prompt in queue:
            start, t0 = time.time(), time.perf_counter()
            rec = await driver(prompt, 32)
            if rec.first is not None and rec.error is None:
                out.append({"start": start, "first_client": start + rec.first - t0})

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await close()


if __name__ == "__main__":
    main()
