"""Image chats' time to first token (issue #46 item 5): vLLM's own OpenAI
server and tokenwire (serve + the Envoy gateway) on the tiny VLM (`make
tiny-vlm`) with the same engine flags, driven over REST + SSE in turns
(A B A B ...): each turn `--requests` streamed chats, `--concurrency` at a
time, each with one random-pixel image (vLLM's random multimodal workload:
`vllm bench serve --dataset-name random-mm`) as a data: URL, a fixed short
text, `--max-tokens` with ignore_eos. Every request has an image of its
own (no processor-cache hit on either side). Prints per turn the mean and
median TTFT, the median inter-token gap and tokens/s, then the ratios
tokenwire / vLLM per rep with their spread (min / median / max).

    .venv/bin/python -m bench.image_ttft    (3 to 6 minutes on the shared 2 cores)

Results: docs/bench.md ("Image chats' time to first token").
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import io
import pathlib
import statistics
import time
from typing import Any

import numpy as np
from PIL import Image

from bench import clients, contestants, systems

VLM = str(systems.ROOT / ".models" / "tiny-random-vlm")
TEXT = "What is in this image?"


@dataclasses.dataclass
class VlmConfig(systems.EngineConfig):
    """The bench's engine flags plus the image limit, the same for both."""

    images: int = 1

    def vllm_flags(self) -> list[str]:
        return [*super().vllm_flags(), "--limit-mm-per-prompt", f'{{"image": {self.images}}}']


def images(count: int, size: int, fmt: str, seed: int = 0) -> list[clients.Prompt]:
    """`count` random-pixel images (each its own) as data URLs, in the
    prompt's text slot (the driver's `content` builds the parts)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buf, fmt)
        url = f"data:image/{fmt.lower()};base64," + base64.b64encode(buf.getvalue()).decode()
        out.append(clients.Prompt(text=url, ids=[]))
    return out


def parts(prompt: clients.Prompt) -> list[dict[str, Any]]:
    return [{"type": "text", "text": TEXT},
            {"type": "image_url", "image_url": {"url": prompt.text}}]


async def turn(url: str, model: str, prompts: list[clients.Prompt], concurrency: int,
               max_tokens: int) -> dict[str, Any]:
    """`prompts` sent, `concurrency` in flight at a time; what arrived."""
    driver, close = clients.openai_sse(url, model, ids_field="token_ids", content=parts)
    win = clients.Window()
    queue = iter(prompts)

    async def worker() -> None:
        for prompt in queue:
            rec = await driver(prompt, max_tokens, win)
            win.done(rec, time.perf_counter())

    try:
        win.open()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        win.close()
    finally:
        await close()
    out = win.result()
    out["ttft_mean_ms"] = statistics.fmean(win.ttft) * 1000 if win.ttft else 0.0
    out["tok_s"] = win.tokens / win.seconds
    return out


def show(name: str, rep: int, r: dict[str, Any]) -> None:
    print(f"  rep {rep} {name:9s} ttft mean {r['ttft_mean_ms']:6.0f} ms  p50 "
          f"{r['ttft_p50_ms']:6.0f} ms  p99 {r['ttft_p99_ms']:6.0f} ms  itl p50 "
          f"{r['itl_p50_ms']:5.1f} ms  {r['tok_s']:6.0f} tok/s  finished {r['finished']}"
          f"  errors {r['errors']} {r['error_kinds'] or ''}", flush=True)


def spread(values: list[float]) -> str:
    return (f"min {min(values):.2f}  median {statistics.median(values):.2f}  "
            f"max {max(values):.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=VLM)
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--requests", type=int, default=64, help="per system per rep")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--size", type=int, default=64, help="image width and height")
    ap.add_argument("--format", default="PNG", choices=["PNG", "JPEG"])
    ap.add_argument("--only", choices=["vllm", "tokenwire"], help="one system only")
    ns = ap.parse_args()

    cfg = VlmConfig(model=ns.model, kv_cache_bytes=128 << 20)
    logs = contestants.OUT / "image_ttft"
    model = pathlib.Path(cfg.model).name
    procs: list[systems.Proc] = []
    systems_: dict[str, tuple[str, str]] = {}  # name -> (base URL, model name)
    try:
        if ns.only != "tokenwire":
            vllm, vurl = contestants.start_vllm_openai(cfg, logs)
            procs.append(vllm)
            systems_["vllm"] = (vurl, cfg.model)
        if ns.only != "vllm":
            tw, address = contestants.start_tokenwire(cfg, logs)
            procs.append(tw)
            systems.wait_until(lambda: systems.grpc_serving(address), [tw], timeout=900)
            gw = contestants.start_gateway(address, logs)
            if gw is None:
                raise SystemExit("the gateway did not start")
            procs.append(gw[0])
            systems_["tokenwire"] = (gw[1], model)
        if "vllm" in systems_:
            systems.wait_until(lambda: systems.http_ok(systems_["vllm"][0] + "/health"),
                               procs, timeout=900)
        total = ns.requests * ns.reps + ns.concurrency
        pool = images(total * len(systems_), ns.size, ns.format)
        print(f"{len(pool)} random {ns.size}x{ns.size} {ns.format} images, "
              f"{len(pool[0].text)} characters each as a data URL", flush=True)
        results: dict[str, list[dict[str, Any]]] = {name: [] for name in systems_}
        for i, (url, served) in enumerate(systems_.values()):  # warm-up
            warm = pool[i * total:i * total + ns.concurrency]
            asyncio.run(turn(url, served, warm, ns.concurrency, ns.max_tokens))
        for rep in range(ns.reps):
            order = list(systems_.items())
            if rep % 2:
                order.reverse()
            for name, (url, served) in order:
                i = list(systems_).index(name)
                start = i * total + ns.concurrency + rep * ns.requests
                r = asyncio.run(turn(url, served, pool[start:start + ns.requests],
                                     ns.concurrency, ns.max_tokens))
                results[name].append(r)
                show(name, rep, r)
        if len(results) == 2:
            print("tokenwire / vLLM per rep:")
            for key in ("ttft_mean_ms", "ttft_p50_ms", "itl_p50_ms", "tok_s"):
                ratios = [t[key] / v[key] for t, v in zip(results["tokenwire"], results["vllm"],
                                                          strict=True) if v[key]]
                print(f"  {key:13s} {spread(ratios)}")
    finally:
        for p in reversed(procs):
            p.stop()


if __name__ == "__main__":
    main()
