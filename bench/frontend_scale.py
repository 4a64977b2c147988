"""Does the frontend scale past one core? tokenwire on its fake engine with
--api-server-count 1 and 2 (several serving processes sharing the port),
the same streaming chat load from several driver processes (each with its
own connections, so the kernel can spread them), tokens/s of each.

    .venv/bin/python -m bench.frontend_scale [--seconds 15] [--concurrency 64] [--drivers 2]

The drivers run on the same machine: on a 2-core host they take CPU from
the servers, so the ratio measured here is a floor of what a host with
spare cores gives (docs/bench.md).
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
from bench.contestants import OUT


def _drive(address: str, concurrency: int, seconds: float, max_tokens: int, channels: int,
           result: Any) -> None:
    """One driver process: `concurrency` streams over `channels` connections."""
    import grpc

    from tokenwire.v1 import chat_pb2, service_pb2_grpc

    async def main() -> tuple[int, float]:
        opened = [
            grpc.aio.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
            for _ in range(channels)
        ]
        stubs = [service_pb2_grpc.TokenwireServiceStub(ch) for ch in opened]
        tokens = 0

        async def worker(i: int, until: float, count: bool) -> None:
            nonlocal tokens
            stub = stubs[i % len(stubs)]
            while time.perf_counter() < until:
                req = chat_pb2.CreateChatCompletionRequest(max_tokens=max_tokens, ignore_eos=True,
                                                           return_token_ids=True)
                req.messages.add(role="user").content.string_value = f"load {i}"
                async for chunk in stub.StreamChatCompletion(req):
                    if count:
                        tokens += sum(len(c.token_ids) for c in chunk.choices)

        warm = time.perf_counter() + 2.0
        await asyncio.gather(*(worker(i, warm, False) for i in range(concurrency)))
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(i, t0 + seconds, True) for i in range(concurrency)))
        wall = time.perf_counter() - t0
        for ch in opened:
            await ch.close()
        return tokens, wall

    result.put(asyncio.run(main()))


def measure(count: int, ns: argparse.Namespace, logs: pathlib.Path) -> dict[str, Any]:
    port = systems.free_port()
    server = systems.spawn(f"scale-{count}", [
        systems.PY, "-m", "tokenwire.cli", "serve", "--engine", "fake", "--port", str(port),
        "--api-server-count", str(count), "--max-model-len", "4096", "--log-level", "WARNING",
    ], logs, systems.bench_env())
    address = f"127.0.0.1:{port}"
    try:
        systems.wait_until(lambda: systems.grpc_serving(address), [server], timeout=60)
        time.sleep(1.0)  # every serving process is up
        family = [
            psutil.Process(server.popen.pid),
            *psutil.Process(server.popen.pid).children(True),
        ]
        cpu0 = sum(sum(p.cpu_times()[:2]) for p in family)
        ctx = multiprocessing.get_context("spawn")
        queue = ctx.Queue()
        drivers = [ctx.Process(target=_drive, args=(address, ns.concurrency // ns.drivers,
                                                    ns.seconds, ns.max_tokens, 4, queue))
                   for _ in range(ns.drivers)]
        for d in drivers:
            d.start()
        results = [queue.get(timeout=ns.seconds + 120) for _ in drivers]
        for d in drivers:
            d.join(30)
        cpu = sum(sum(p.cpu_times()[:2]) for p in family) - cpu0
    finally:
        server.stop()
    tokens = sum(t for t, _ in results)
    wall = max(w for _, w in results)
    row = {"api_server_count": count, "tok_s": tokens / wall,
           "server_cpu_us_per_token": 1e6 * cpu / max(1, tokens), "server_cores_busy": cpu / wall}
    print(
        f"api-server-count {count}: {row['tok_s']:8.0f} tok/s, server "
        f"{row['server_cpu_us_per_token']:.1f} CPU us/token, {row['server_cores_busy']:.2f} cores",
        flush=True,
    )
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--drivers", type=int, default=2)
    parser.add_argument("--out", default=str(OUT / "frontend_scale.json"))
    ns = parser.parse_args(argv)
    logs = pathlib.Path(ns.out).parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    rows = [measure(count, ns, logs) for count in (1, 2)]
    ratio = rows[1]["tok_s"] / rows[0]["tok_s"]
    print(f"2 serving processes / 1: {ratio:.2f}x tokens/s (cores: {psutil.cpu_count()})")
    with open(ns.out, "w") as fh:
        json.dump({"rows": rows, "ratio": ratio, "cores": psutil.cpu_count()}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
