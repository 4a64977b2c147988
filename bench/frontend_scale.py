"""Does the frontend scale past one core? tokenwire on its fake engine with
--api-server-count N (several serving processes sharing the port), the same
streaming load from several driver processes (each with its own
connections, so the kernel can spread them), tokens/s and CPU of each.

    .venv/bin/python -m bench.frontend_scale [--counts 1,2] [--paths chat]
        [--seconds 15] [--concurrency 64] [--drivers 2] [--envoy-threads 1]
        [--transports aio,native]

paths: `chat` (gRPC StreamChatCompletion), `generate` (gRPC StreamGenerate,
ids in) and `rest` (OpenAI SSE chat through `tokenwire gateway`'s Envoy with
--envoy-threads workers). On a 2-core host the drivers take CPU from the
servers, so the ratio measured there is a floor of what a host with spare
cores gives; on a many-core host (docs/bench.md) it is the scaling itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import pathlib
import sys
import time
from typing import Any

import psutil

from bench import systems
from bench.contestants import OUT, check_transport, envoy_pids, start_gateway


def _drive(path: str, target: str, concurrency: int, seconds: float, max_tokens: int,
           channels: int, result: Any) -> None:
    """One driver process: `concurrency` streams over `channels` connections
    (gRPC) or one HTTP client (REST); counts ids that arrive."""
    from bench import clients
    from bench.frontend import _prompts

    prompts = _prompts(64, 48)

    async def main() -> tuple[int, float]:
        if path == "rest":
            made = [clients.openai_sse(target, "fake", ids_field="token_ids")]
        else:
            make = clients.tokenwire_generate if path == "generate" else clients.tokenwire_grpc
            made = [make(target, own_connection=True) for _ in range(channels)]
        tokens = 0

        async def worker(i: int, until: float, count: bool) -> None:
            nonlocal tokens
            run = made[i % len(made)][0]
            n = 0
            while time.perf_counter() < until:
                rec = await run(prompts[(i + n) % len(prompts)], max_tokens)
                n += 1
                if rec.error:
                    raise RuntimeError(rec.error)
                if count:
                    tokens += rec.tokens

        warm = time.perf_counter() + 2.0
        await asyncio.gather(*(worker(i, warm, False) for i in range(concurrency)))
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i, t0 + seconds, True) for i in range(concurrency)))
        wall = time.perf_counter() - t0
        for _, close in made:
            await close()
        return tokens, wall

    result.put(asyncio.run(main()))


def _family(pid: int) -> list[psutil.Process]:
    return [psutil.Process(pid), *psutil.Process(pid).children(True)]


def _cpu(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            total += sum(p.cpu_times()[:2])
        except psutil.NoSuchProcess:
            pass
    return total


def measure(path: str, count: int, ns: argparse.Namespace, logs: pathlib.Path,
            transport: str = "aio") -> dict[str, Any]:
    port = systems.free_port()
    server = systems.spawn(f"scale-{path}-{count}-{transport}", [
        systems.PY, "-m", "tokenwire.cli", "serve", "--engine", "fake", "--port", str(port),
        "--api-server-count", str(count), "--max-model-len", "4096", "--log-level", "WARNING",
        "--served-model-name", "fake", "--grpc-transport", transport,
    ], logs, systems.bench_env())
    address = f"127.0.0.1:{port}"
    gateway = None
    try:
        systems.wait_until(lambda: systems.grpc_serving(address), [server], timeout=90)
        time.sleep(1.0 + 0.25 * count)  # every serving process is up
        check_transport(server, transport)
        target = address
        envoy: list[psutil.Process] = []
        if path == "rest":
            gateway = start_gateway(address, logs, ["--concurrency", str(ns.envoy_threads)])
            if gateway is None:
                raise RuntimeError("the gateway did not start")
            target = gateway[1]
            envoy = [psutil.Process(p) for p in envoy_pids(gateway[0])]
        family = _family(server.popen.pid)
        cpu0, env0 = _cpu(family), _cpu(envoy)
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        share = ns.concurrency // ns.drivers
        drivers = [ctx.Process(target=_drive, args=(path, target, share, ns.seconds,
                                                    ns.max_tokens, ns.connections, queue))
                   for _ in range(ns.drivers)]
        for d in drivers:
            d.start()
        results = [queue.get(timeout=ns.seconds + 120) for _ in drivers]
        for d in drivers:
            d.join(30)
        cpu, env_cpu = _cpu(family) - cpu0, _cpu(envoy) - env0
    finally:
        if gateway is not None:
            gateway[0].stop()
        server.stop()
    tokens = sum(t for t, _ in results)
    wall = max(w for _, w in results)
    row = {"path": path, "transport": transport, "api_server_count": count,
           "tok_s": tokens / wall,
           "server_cpu_us_per_token": 1e6 * cpu / max(1, tokens), "server_cores_busy": cpu / wall,
           "envoy_cpu_us_per_token": 1e6 * env_cpu / max(1, tokens),
           "envoy_cores_busy": env_cpu / wall}
    text = (f"{path:<8} {transport:<6} api-server-count {count}: {row['tok_s']:8.0f} tok/s, server "
            f"{row['server_cpu_us_per_token']:.1f} CPU us/token, "
            f"{row['server_cores_busy']:.2f} cores")
    if path == "rest":
        text += (f"; Envoy {row['envoy_cpu_us_per_token']:.1f} us/token, "
                 f"{row['envoy_cores_busy']:.2f} cores")
    print(text, flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--drivers", type=int, default=2)
    parser.add_argument("--connections", type=int, default=4,
                        help="gRPC connections per driver process")
    parser.add_argument("--counts", default="1,2", help="--api-server-count values, in order")
    parser.add_argument("--paths", default="chat", help="chat, generate, rest (comma-separated)")
    parser.add_argument("--transports", default="aio",
                        help="--grpc-transport values (aio, native), comma-separated")
    parser.add_argument("--envoy-threads", type=int, default=1,
                        help="Envoy worker threads for the rest path")
    parser.add_argument("--out", default=str(OUT / "frontend_scale.json"))
    ns = parser.parse_args(argv)
    logs = pathlib.Path(ns.out).parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    counts = [int(c) for c in ns.counts.split(",")]
    rows = []
    for path in ns.paths.split(","):
        for transport in ns.transports.split(","):
            mine = [measure(path, count, ns, logs, transport) for count in counts]
            for row in mine:
                row["scale"] = row["tok_s"] / mine[0]["tok_s"]
            print(f"{path} ({transport}): tokens/s against one serving process: "
                  + ", ".join(f"{r['api_server_count']}: {r['scale']:.2f}x" for r in mine),
                  flush=True)
            rows += mine
    meta = {"cores": psutil.cpu_count(), "drivers": ns.drivers, "concurrency": ns.concurrency,
            "seconds": ns.seconds, "max_tokens": ns.max_tokens, "envoy_threads": ns.envoy_threads}
    with open(ns.out, "w") as fh:
        json.dump({"rows": rows, **meta}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
