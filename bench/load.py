"""Load and soak runs (loopback only, bounded in count and time).

    python -m bench.load            # 256 concurrent streams, gRPC + REST mix
    python -m bench.load --soak 600 # a 10-minute soak: RSS growth after warm-up
    python -m bench.load --grpc-transport native   # the same on pygrpc-native

Starts `tokenwire serve` (tiny random model, metrics on) and `tokenwire
gateway`, then runs a mix of normal streams (ids checked against
engine_data), mid-stream cancels and malformed requests, half over native
gRPC and half over REST+SSE through Envoy. Reports requests and errors by
kind, engine requests left running, and server RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import time
import urllib.request
from typing import Any

import grpc
import httpx
import psutil

from bench import systems
from bench.contestants import check_transport
from tokenwire.v1 import chat_pb2, models_pb2, service_pb2_grpc

MAX_TOKENS = 48
EXTRA = ["engine_data", "completion_token_ids"]
BAD_BODIES: list[dict[str, Any]] = [
    {"temperature": -1},
    {"nvext": {"token_data": [5, 10**7]}},
    {"nvext": {"extra_fields": ["nope"]}},
    {"max_tokens": 0},
    {"top_p": 7},
    {"n": 0},
]


def body(i: int, kind: str) -> dict[str, Any]:
    b: dict[str, Any] = {
        "messages": [{"role": "user", "content": f"load {i}: tell me something"}],
        "max_tokens": MAX_TOKENS, "ignore_eos": True, "temperature": 1.0, "seed": i,
        "return_token_ids": True, "nvext": {"extra_fields": EXTRA},
    }
    if kind == "bad":
        b.update(BAD_BODIES[i % len(BAD_BODIES)])
    return b


def kind_of(i: int) -> str:
    r = i % 20
    return "bad" if r < 3 else "cancel" if r < 6 else "ok"


async def grpc_one(stub: Any, i: int, kind: str, tally: collections.Counter) -> None:
    from google.protobuf import json_format

    req = json_format.ParseDict(body(i, kind), chat_pb2.CreateChatCompletionRequest())
    call = stub.StreamChatCompletion(req, timeout=300)
    ids: list[int] = []
    final: list[int] | None = None
    try:
        async for chunk in call:
            for ch in chunk.choices:
                ids.extend(ch.token_ids)
                if ch.HasField("nvext"):
                    final = list(ch.nvext.engine_data.completion_token_ids)
            if kind == "cancel" and len(ids) >= 4:
                call.cancel()
                tally["grpc cancel: done"] += 1
                return
    except grpc.aio.AioRpcError as exc:
        if kind == "bad" and exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
            tally["grpc bad: INVALID_ARGUMENT"] += 1
        elif kind == "cancel" and exc.code() == grpc.StatusCode.CANCELLED:
            tally["grpc cancel: done"] += 1
        else:
            tally[f"grpc {kind}: UNEXPECTED {exc.code().name}"] += 1
        return
    except asyncio.CancelledError:
        if kind == "cancel":
            tally["grpc cancel: done"] += 1
            return
        raise
    _check(tally, "grpc", kind, ids, final)


async def rest_one(
    client: httpx.AsyncClient, i: int, kind: str, tally: collections.Counter
) -> None:
    b = body(i, kind)
    b["stream"] = True
    ids: list[int] = []
    final: list[int] | None = None
    async with client.stream("POST", "/v1/chat/completions", json=b) as resp:
        if resp.status_code != 200:
            await resp.aread()
            ok = kind == "bad" and resp.status_code == 400 and "error" in resp.json()
            tally[
                f"rest {kind}: " + ("HTTP 400" if ok else f"UNEXPECTED HTTP {resp.status_code}")
            ] += 1
            return
        async for line in resp.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                tally[f"rest {kind}: UNEXPECTED error event"] += 1
                return
            for ch in chunk.get("choices") or []:
                ids.extend(ch.get("token_ids") or [])
                nv = ch.get("nvext")
                if nv:
                    final = nv.get("engine_data", {}).get("completion_token_ids")
            if kind == "cancel" and len(ids) >= 4:
                tally["rest cancel: done"] += 1
                return  # leaving the block closes the connection mid-stream
    _check(tally, "rest", kind, ids, final)


def _check(
    tally: collections.Counter, via: str, kind: str, ids: list[int], final: list[int] | None
) -> None:
    if kind == "bad":
        tally[f"{via} bad: UNEXPECTED success"] += 1
    elif final == ids and len(ids) == MAX_TOKENS:
        tally[f"{via} {kind}: ids consistent"] += 1
    else:
        tally[f"{via} {kind}: UNEXPECTED ids mismatch"] += 1


async def run_mix(
    grpc_addr: str, rest_url: str, count: int, concurrency: int, offset: int = 0
) -> collections.Counter:
    tally: collections.Counter = collections.Counter()
    channel = grpc.aio.insecure_channel(grpc_addr)
    stub = service_pb2_grpc.TokenwireServiceStub(channel)
    client = httpx.AsyncClient(
        base_url=rest_url, timeout=300, limits=httpx.Limits(max_connections=1024)
    )
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            kind = kind_of(i)
            try:
                if i % 2:
                    await rest_one(client, i, kind, tally)
                else:
                    await grpc_one(stub, i, kind, tally)
            except Exception as exc:
                tally[f"{'rest' if i % 2 else 'grpc'} {kind}: UNEXPECTED {type(exc).__name__}"] += 1

    await asyncio.gather(*(one(offset + i) for i in range(count)))
    await client.aclose()
    await channel.close()
    return tally


def engine_requests(address: str, timeout: float = 30) -> int:
    """Wait for the engine to drain; return what it still holds."""
    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        while True:
            n = stub.GetStats(models_pb2.GetStatsRequest(), timeout=10).engine_requests
            if n == 0 or time.monotonic() > deadline:
                return n
            time.sleep(0.2)


def metrics(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("tokenwire_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(systems.ROOT / ".models" / "tiny-random-llama"))
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--soak", type=float, default=0.0, help="soak seconds (0: one load run)")
    parser.add_argument("--warmup", type=float, default=60.0, help="soak warm-up seconds")
    parser.add_argument("--grpc-transport", default="aio", choices=("aio", "native"),
                        help="the server's gRPC transport (issue #46)")
    ns = parser.parse_args(argv)
    logs = systems.ROOT / "bench" / "out" / "logs"
    port, mport, gport = systems.free_port(), systems.free_port(), systems.free_port()
    env = systems.bench_env()
    server = systems.spawn("load-server", [
        systems.PY, "-m", "tokenwire.cli", "serve", "--model", ns.model, "--port", str(port),
        "--metrics-port", str(mport), "--kv-cache-bytes", str(512 << 20), "--max-num-seqs", "256",
        "--log-level", "WARNING", "--disable-log-stats",  # as measured before issue #35
        "--grpc-transport", ns.grpc_transport,
    ], logs, env)
    address = f"127.0.0.1:{port}"
    gateway = None
    try:
        systems.wait_until(lambda: systems.grpc_serving(address), [server])
        check_transport(server, ns.grpc_transport)
        gateway = systems.spawn("load-gateway", [
            systems.PY, "-m", "tokenwire.cli", "gateway", "--upstream-port", str(port),
            "--listen-port", str(gport),
        ], logs, env)
        url = f"http://127.0.0.1:{gport}"
        systems.wait_until(lambda: systems.http_ok(url + "/health"), [server, gateway], timeout=60)
        proc = psutil.Process(server.popen.pid)
        tally: collections.Counter = collections.Counter()
        started = time.monotonic()
        rss_after_warmup = None
        done = 0
        if ns.soak:
            while time.monotonic() - started < ns.soak:
                tally += asyncio.run(run_mix(address, url, 64, 32, offset=done))
                done += 64
                if rss_after_warmup is None and time.monotonic() - started >= ns.warmup:
                    rss_after_warmup = proc.memory_info().rss
                print(f"\r{time.monotonic() - started:6.0f}s {done} requests "
                      f"rss {proc.memory_info().rss / 2**20:.0f} MiB", end="", file=sys.stderr)
            print(file=sys.stderr)
        else:
            rss_after_warmup = proc.memory_info().rss
            tally = asyncio.run(run_mix(address, url, ns.requests, ns.concurrency))
            done = ns.requests
        left = engine_requests(address)
        rss_end = proc.memory_info().rss
        m = metrics(mport)
        unexpected = sum(v for k, v in tally.items() if "UNEXPECTED" in k)
        report = {
            "grpc_transport": ns.grpc_transport,
            "requests": done,
            "seconds": round(time.monotonic() - started, 1),
            "by_kind": dict(sorted(tally.items())),
            "unexpected": unexpected,
            "engine_requests_left": left,
            "rss_mib_after_warmup": round((rss_after_warmup or 0) / 2**20, 1),
            "rss_mib_end": round(rss_end / 2**20, 1),
            "rss_growth_pct": round(
                100 * (rss_end - (rss_after_warmup or rss_end)) / (rss_after_warmup or rss_end), 2
            ),
            "metrics_in_flight": m.get("tokenwire_requests_in_flight"),
            "metrics_completion_tokens": m.get("tokenwire_completion_tokens_total"),
        }
        print(json.dumps(report, indent=2))
        ok = unexpected == 0 and left == 0 and (not ns.soak or report["rss_growth_pct"] < 5)
        return 0 if ok else 1
    finally:
        if gateway is not None:
            gateway.stop()
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
