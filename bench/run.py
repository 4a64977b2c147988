"""`make bench`: the serving layer's cost, side by side, in one run.

A  vLLM AsyncLLM in-process, no server (the limit)
B  tokenwire, native gRPC streaming (chat: messages in, text + ids out)
G  tokenwire, native gRPC StreamGenerate (ids in, ids out: E's call)
S  B with stream_options.stream_interval=16 (a chunk per 16 tokens; not in
   the default set: a different workload, run it with --systems AS)
C  tokenwire through the Envoy gateway, REST + SSE
D  vLLM's OpenAI-compatible server, SSE with return_token_ids
E  vLLM's gRPC mode (smg-grpc-servicer), native gRPC
F  the smg Rust gateway in front of E, REST + SSE

Same tiny random model, same engine settings, same workload (fixed prompt
and output lengths, ignore_eos), counting only token ids received.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import pathlib
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from bench import clients, systems
from bench.report import summarize, write_outputs

OUT = systems.ROOT / "bench" / "out"


@dataclasses.dataclass
class Workload:
    prompt_words: int = 48
    max_tokens: int = 128
    concurrencies: tuple[int, ...] = (1, 16, 64, 256)
    reps: int = 3

    def requests(self, concurrency: int) -> int:
        # Two waves up to 64; above, one wave plus 64 (keeps c=256 to ~40 s).
        return max(8, min(2 * concurrency, concurrency + 64))


def make_prompts(model: str, count: int, words: int) -> list[clients.Prompt]:
    """Distinct user messages of equal length, with their rendered ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    rng = random.Random(0)
    vocab = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    prompts = []
    for i in range(count):
        text = f"Request {i}: " + " ".join(rng.choice(vocab) for _ in range(words))
        ids = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True,
            return_dict=False,
        )
        prompts.append(clients.Prompt(text, list(ids)))
    return prompts


class Progress:
    """A one-line progress bar on stderr."""

    def __init__(self, total: int):
        self.total = total
        self.done = 0
        self.label = ""
        self.t0 = time.monotonic()

    def step(self, n: int = 1) -> None:
        self.done += n
        width = 30
        filled = int(width * self.done / max(1, self.total))
        elapsed = time.monotonic() - self.t0
        sys.stderr.write(
            f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} requests "
            f"{elapsed:5.0f}s {self.label:<28}"
        )
        sys.stderr.flush()


def measure_server(
    name: str, driver_factory: Callable[[], tuple[clients.Driver, Any]], meter: systems.ResourceMeter,
    prompts: list[clients.Prompt], work: Workload, progress: Progress,
) -> list[dict[str, Any]]:
    runs: list[dict[str, Any]] = []
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            try:
                meter.sample()
            except Exception:
                pass
            time.sleep(0.1)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()

    async def go() -> None:
        driver, close = driver_factory()
        # Warm-up (not measured): first requests compile and fill pools.
        await clients.run_level(driver, prompts[:4], 4, 8)
        for rep in range(work.reps):
            for conc in work.concurrencies:
                progress.label = f"{name} c={conc} rep {rep + 1}"
                meter.reset()
                records, wall = await clients.run_level(
                    driver, prompts[: work.requests(conc)], conc, work.max_tokens, progress.step
                )
                runs.append({
                    "system": name, "concurrency": conc, "rep": rep, "wall": wall,
                    "cpu_seconds": meter.cpu_seconds(), "records": [r.__dict__ for r in records],
                })
        await close()

    try:
        asyncio.run(go())
    finally:
        stop.set()
        thread.join(2)
    for r in runs:
        r["peak_rss"] = meter.peak_rss
    return runs


def run_a(cfg: systems.EngineConfig, prompts: list[clients.Prompt], work: Workload,
          progress: Progress) -> list[dict[str, Any]]:
    levels = [{"concurrency": 4, "rep": -1, "requests": 4}]
    levels += [
        {"concurrency": c, "rep": rep, "requests": work.requests(c)}
        for rep in range(work.reps) for c in work.concurrencies
    ]
    job = {
        "engine_args": cfg.engine_args(), "max_tokens": work.max_tokens, "levels": levels,
        "prompts": [dataclasses.asdict(p) for p in prompts],
    }
    import subprocess

    import psutil

    progress.label = "A in-process"
    proc = subprocess.Popen(
        [systems.PY, "-m", "bench.inprocess"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=open(OUT / "logs" / "A.log", "wb"), env=systems.bench_env(), cwd=systems.ROOT,
    )
    assert proc.stdin and proc.stdout
    proc.stdin.write(json.dumps(job).encode())
    proc.stdin.close()
    ps = psutil.Process(proc.pid)
    runs = []
    peak = 0
    cpu0 = sum(ps.cpu_times()[:2])
    for raw in proc.stdout:
        if not raw.startswith(b"BENCH "):
            continue  # the engine's own prints
        data = json.loads(raw[6:])
        cpu1 = sum(ps.cpu_times()[:2])
        peak = max(peak, ps.memory_info().rss)
        if data["rep"] >= 0:
            progress.step(len(data["records"]))
            runs.append({"system": "A", **data, "cpu_seconds": cpu1 - cpu0})
        cpu0 = cpu1
    if proc.wait() != 0:
        raise RuntimeError(f"A failed: see {OUT / 'logs' / 'A.log'}")
    for r in runs:
        r["peak_rss"] = peak
    return runs


def start_tokenwire(cfg: systems.EngineConfig, logs: pathlib.Path) -> tuple[list[systems.Proc], str]:
    port = systems.free_port()
    proc = systems.spawn("B-tokenwire", [
        systems.PY, "-m", "tokenwire.cli", "serve", "--model", cfg.model, "--port", str(port),
        "--dtype", cfg.dtype, "--max-model-len", str(cfg.max_model_len),
        "--kv-cache-bytes", str(cfg.kv_cache_bytes), "--block-size", str(cfg.block_size),
        "--max-num-seqs", str(cfg.max_num_seqs), "--scheduling-policy", "fcfs",
        "--log-level", "WARNING",
    ], logs, systems.bench_env())
    address = f"127.0.0.1:{port}"
    systems.wait_until(lambda: systems.grpc_serving(address), [proc])
    return [proc], address


def start_gateway(backend: str, logs: pathlib.Path) -> tuple[systems.Proc, str] | None:
    """Start Envoy through tokenwire's own launcher; None if not available."""
    port = systems.free_port()
    host, _, upstream = backend.rpartition(":")
    proc = systems.spawn("C-envoy", [
        systems.PY, "-m", "tokenwire.cli", "gateway", "--upstream-host", host,
        "--upstream-port", upstream, "--listen-port", str(port),
    ], logs, systems.bench_env())
    url = f"http://127.0.0.1:{port}"
    try:
        systems.wait_until(lambda: systems.http_ok(url + "/health"), [proc], timeout=60)
    except Exception as exc:
        proc.stop()
        print(f"\nC skipped: the gateway did not start ({exc})", file=sys.stderr)
        return None
    return proc, url


def envoy_pids(proc: systems.Proc) -> list[int]:
    import psutil

    return [proc.popen.pid] + [c.pid for c in psutil.Process(proc.popen.pid).children(recursive=True)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(systems.ROOT / ".models" / "tiny-random-llama"))
    parser.add_argument("--concurrency", default="1,16,64,256", help="comma-separated levels")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--systems", default="ABGCDEF")
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    ns = parser.parse_args(argv)
    work = Workload(
        max_tokens=ns.max_tokens, reps=ns.reps,
        concurrencies=tuple(int(c) for c in ns.concurrency.split(",")),
    )
    cfg = systems.EngineConfig(model=ns.model)
    logs = ns.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prompts = make_prompts(cfg.model, max(work.requests(c) for c in work.concurrencies), work.prompt_words)
    per_system = sum(work.requests(c) for c in work.concurrencies) * work.reps
    progress = Progress(per_system * len(ns.systems))
    runs: list[dict[str, Any]] = []
    started = time.time()

    if "A" in ns.systems:
        runs += run_a(cfg, prompts, work, progress)

    if any(x in ns.systems for x in "BGSC"):
        procs, address = start_tokenwire(cfg, logs)
        try:
            server_pid = procs[0].popen.pid
            if "B" in ns.systems:
                runs += measure_server("B", lambda: clients.tokenwire_grpc(address),
                                       systems.ResourceMeter([server_pid]), prompts, work, progress)
            if "S" in ns.systems:
                runs += measure_server("S", lambda: clients.tokenwire_grpc(address, stream_interval=16),
                                       systems.ResourceMeter([server_pid]), prompts, work, progress)
            if "G" in ns.systems:
                runs += measure_server("G", lambda: clients.tokenwire_generate(address),
                                       systems.ResourceMeter([server_pid]), prompts, work, progress)
            if "C" in ns.systems:
                gw = start_gateway(address, logs)
                if gw is not None:
                    gproc, url = gw
                    try:
                        model = pathlib.Path(cfg.model).name
                        runs += measure_server(
                            "C", lambda: clients.openai_sse(url, model, ids_field="token_ids"),
                            systems.ResourceMeter([server_pid, *envoy_pids(gproc)]), prompts, work, progress,
                        )
                    finally:
                        gproc.stop()
        finally:
            for p in procs:
                p.stop()

    if "D" in ns.systems:
        port = systems.free_port()
        proc = systems.spawn("D-vllm-openai", [
            systems.PY, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
            "--port", str(port), *cfg.vllm_flags(), "--disable-uvicorn-access-log",
        ], logs, systems.bench_env())
        try:
            url = f"http://127.0.0.1:{port}"
            systems.wait_until(lambda: systems.http_ok(url + "/health"), [proc])
            runs += measure_server("D", lambda: clients.openai_sse(url, cfg.model, ids_field="token_ids"),
                                   systems.ResourceMeter([proc.popen.pid]), prompts, work, progress)
        finally:
            proc.stop()

    if "E" in ns.systems or "F" in ns.systems:
        port = systems.free_port()
        proc = systems.spawn("E-vllm-grpc", [
            systems.PY, "-m", "vllm.entrypoints.launchers.grpc_server", "--host", "127.0.0.1",
            "--port", str(port), *cfg.vllm_flags(),
        ], logs, systems.bench_env())
        address = f"127.0.0.1:{port}"
        try:
            systems.wait_until(lambda: systems.grpc_serving(address), [proc])
            if "E" in ns.systems:
                runs += measure_server("E", lambda: clients.vllm_grpc(address),
                                       systems.ResourceMeter([proc.popen.pid]), prompts, work, progress)
            if "F" in ns.systems:
                fport = systems.free_port()
                smg = systems.spawn("F-smg", [
                    str(systems.BIN / "smg"), "launch", "--host", "127.0.0.1", "--port", str(fport),
                    "--worker-urls", f"grpc://{address}", "--model-path", cfg.model,
                    "--tokenizer-path", cfg.model,
                ], logs, systems.bench_env())
                try:
                    furl = f"http://127.0.0.1:{fport}"
                    systems.wait_until(lambda: _smg_ready(furl), [proc, smg], timeout=120)
                    runs += measure_server(
                        "F", lambda: clients.openai_sse(furl, cfg.model, ids_field=None),
                        systems.ResourceMeter([proc.popen.pid, smg.popen.pid]), prompts, work, progress,
                    )
                finally:
                    smg.stop()
        finally:
            proc.stop()

    sys.stderr.write("\n")
    meta = {
        "started": started, "finished": time.time(), "model": cfg.model,
        "engine": dataclasses.asdict(cfg), "workload": dataclasses.asdict(work),
        "machine": _machine(),
    }
    summary = summarize(runs, meta)
    table = write_outputs(summary, ns.out)
    print(table)
    return 0


def _smg_ready(url: str) -> bool:
    import httpx

    r = httpx.get(url + "/v1/models", timeout=2)
    return r.status_code == 200 and bool(r.json().get("data"))


def _machine() -> dict[str, Any]:
    import os
    import platform

    import psutil

    return {
        "cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "processor": platform.processor() or platform.machine(), "python": platform.python_version(),
    }


if __name__ == "__main__":
    sys.exit(main())

