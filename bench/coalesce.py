"""Joining an event stream's ready SSE events into one HttpBody (issue #46
item 4, api/coalesce.py), measured: tokenwire on its fake engine (one token
per event-loop turn), every stream lagging behind a saturated server
(`--concurrency` streams at once), with the join on and off
(`coalesce.JOIN`, set in the server's process by this bench only), on
grpc.aio and pygrpc-native. Per path: HttpBody messages per token (counted
by the client), the server's CPU microseconds per token, and Envoy's for
REST. Servers are started once; each rep measures every cell, the order
rotating by rep; ratios on/off are per rep, reported as median [min, max].

    .venv/bin/python -m bench.coalesce [--concurrency 64] [--seconds 5]
        [--reps 3] [--max-tokens 16] [--paths chat,responses,rest]
        [--transports aio,native]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import re
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psutil

from bench import systems
from bench.contestants import OUT, check_transport, envoy_pids, start_gateway

# The server, with the join set before anything is served (argv: 1|0, then serve's flags).
SERVE = ("import sys; from tokenwire.server.api import coalesce; "
         "coalesce.JOIN = sys.argv[1] == '1'; from tokenwire.cli import main; "
         "sys.exit(main(['serve', *sys.argv[2:]]))")
USAGE = re.compile(rb'"(?:completion_tokens|output_tokens)":(\d+)')
Stream = Callable[[int], Awaitable[tuple[int, int]]]  # i -> (tokens, messages)


def _text(i: int) -> str:
    vocab = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    return f"Request {i}: " + " ".join(vocab[(i + j) % len(vocab)] for j in range(24))


def _grpc_events(address: str, path: str, max_tokens: int
                 ) -> tuple[Stream, Callable[[], Awaitable[None]]]:
    import grpc
    from google.protobuf import json_format

    from tokenwire.v1 import chat_pb2, events_pb2_grpc, responses_pb2

    channel = grpc.aio.insecure_channel(address)
    stub = events_pb2_grpc.EventStreamServiceStub(channel)

    def request(i: int) -> Any:
        if path == "chat":
            return json_format.ParseDict({
                "model": "fake", "messages": [{"role": "user", "content": _text(i)}],
                "max_tokens": max_tokens, "ignore_eos": True,
                "stream_options": {"include_usage": True}}, chat_pb2.CreateChatCompletionRequest())
        return json_format.ParseDict({"model": "fake", "input": _text(i),
                                      "max_output_tokens": max_tokens},
                                     responses_pb2.CreateResponseRequest())

    method = stub.StreamChatCompletionEvents if path == "chat" else stub.StreamResponseEvents

    async def one(i: int) -> tuple[int, int]:
        messages, last = 0, b""
        async for body in method(request(i), timeout=120):
            messages += 1
            last = (last + body.data)[-2000:]
        found = USAGE.findall(last)
        if not found:
            raise RuntimeError(f"a stream ended without its usage: {last[-200:]!r}")
        return int(found[-1]), messages

    return one, channel.close


def _rest(url: str, max_tokens: int) -> tuple[Stream, Callable[[], Awaitable[None]]]:
    import httpx

    client = httpx.AsyncClient(base_url=url, timeout=httpx.Timeout(120.0),
                               limits=httpx.Limits(max_connections=1024))

    async def one(i: int) -> tuple[int, int]:
        body = {"model": "fake", "messages": [{"role": "user", "content": _text(i)}],
                "max_tokens": max_tokens, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        tail = b""
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            if resp.status_code != 200:
                raise RuntimeError(f"HTTP {resp.status_code}")
            async for raw in resp.aiter_raw():
                tail = (tail + raw)[-400:]
        found = USAGE.findall(tail)
        if not found:
            raise RuntimeError(f"a stream ended without its usage: {tail[-200:]!r}")
        return int(found[-1]), 0  # (Envoy's frames are not the client's reads)

    return one, client.aclose


async def _drive(one: Stream, conc: int, seconds: float) -> tuple[int, int, float]:
    t0 = time.perf_counter()
    totals = [0, 0]
    started = 0

    async def worker() -> None:
        nonlocal started
        while time.perf_counter() - t0 < seconds:
            started += 1
            tokens, messages = await one(started)
            totals[0] += tokens
            totals[1] += messages

    await asyncio.gather(*(worker() for _ in range(conc)))
    return totals[0], totals[1], time.perf_counter() - t0


def measure(make: Callable[[], tuple[Stream, Callable[[], Awaitable[None]]]],
            groups: dict[str, list[int]], conc: int, seconds: float) -> dict[str, float]:
    procs = {g: [psutil.Process(p) for p in pids] for g, pids in groups.items()}

    def cpu() -> dict[str, float]:
        return {g: sum(sum(p.cpu_times()[:2]) for p in ps) for g, ps in procs.items()}

    async def go() -> tuple[int, int, float, dict[str, float]]:
        one, close = make()
        await _drive(one, conc, 1.0)  # warm-up
        c0 = cpu()
        tokens, messages, wall = await _drive(one, conc, seconds)
        c1 = cpu()
        await close()
        return tokens, messages, wall, {g: c1[g] - c0[g] for g in c0}

    tokens, messages, wall, used = asyncio.run(go())
    row = {"tok_s": tokens / wall, "msgs_per_token": messages / max(1, tokens)}
    for g, seconds_used in used.items():
        row[f"{g}_cpu_us_per_token"] = 1e6 * seconds_used / max(1, tokens)
    return row


def _start(transport: str, join: bool, logs: Any) -> tuple[systems.Proc, str]:
    port = systems.free_port()
    server = systems.spawn(f"coalesce-{transport}-{'on' if join else 'off'}", [
        systems.PY, "-c", SERVE, "1" if join else "0", "--engine", "fake", "--port", str(port),
        "--max-model-len", "4096", "--served-model-name", "fake", "--log-level", "WARNING",
        "--grpc-transport", transport,
    ], logs, systems.bench_env())
    return server, f"127.0.0.1:{port}"


def _ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per transport and path, per rep: on / off of each figure."""
    out = []
    keys = sorted({(r["transport"], r["path"]) for r in rows})
    for transport, path in keys:
        cells = [r for r in rows if r["transport"] == transport and r["path"] == path]
        for figure in [k for k in cells[0] if k.endswith("_per_token") or k == "tok_s"]:
            per_rep = []
            for rep in sorted({r["rep"] for r in cells}):
                on = [r[figure] for r in cells if r["rep"] == rep and r["join"]]
                off = [r[figure] for r in cells if r["rep"] == rep and not r["join"]]
                if on and off and off[0]:
                    per_rep.append(on[0] / off[0])
            if per_rep:
                out.append({"transport": transport, "path": path, "figure": figure,
                            "median": statistics.median(per_rep), "min": min(per_rep),
                            "max": max(per_rep), "reps": per_rep})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--paths", default="chat,responses")
    parser.add_argument("--transports", default="aio,native")
    ns = parser.parse_args(argv)
    paths, transports = ns.paths.split(","), ns.transports.split(",")
    logs = OUT / "coalesce-logs"
    servers = {(t, j): _start(t, j, logs) for t in transports for j in (True, False)}
    gateways: dict[tuple[str, bool], tuple[systems.Proc, str]] = {}
    rows: list[dict[str, Any]] = []
    try:
        for key, (server, address) in servers.items():
            systems.wait_until(functools.partial(systems.grpc_serving, address), [server],
                              timeout=120)
            check_transport(server, key[0])
            if "rest" in paths:
                gw = start_gateway(address, logs, name=f"coalesce-envoy-{key[0]}-{key[1]}")
                if gw is None:
                    raise RuntimeError("the gateway did not start")
                gateways[key] = gw
        cells = [(t, j, p) for t in transports for p in paths for j in (True, False)]
        for rep in range(ns.reps):
            order = cells if rep % 2 == 0 else cells[::-1]
            for transport, join, path in order:
                server, address = servers[(transport, join)]
                groups = {"server": [server.popen.pid]}
                if path == "rest":
                    gproc, url = gateways[(transport, join)]
                    groups["envoy"] = envoy_pids(gproc)
                    row = measure(functools.partial(_rest, url, ns.max_tokens), groups,
                                  ns.concurrency, ns.seconds)
                else:
                    row = measure(functools.partial(_grpc_events, address, path, ns.max_tokens),
                                  groups, ns.concurrency, ns.seconds)
                row.update(rep=rep, transport=transport, join=join, path=path)
                rows.append(row)
                figures = "  ".join(f"{k} {v:.2f}" for k, v in row.items()
                                    if isinstance(v, float))
                print(f"rep {rep} {transport:<6} {path:<9} join={'on ' if join else 'off'} "
                      f"{figures}", flush=True)
    finally:
        for gproc, _ in gateways.values():
            gproc.stop()
        for server, _ in servers.values():
            server.stop()
    ratios = _ratios(rows)
    print("\non/off per rep: median [min, max]")
    for r in ratios:
        print(f"  {r['transport']:<6} {r['path']:<9} {r['figure']:<22} {r['median']:.3f} "
              f"[{r['min']:.3f}, {r['max']:.3f}]")
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / "coalesce.json"
    out.write_text(json.dumps({"args": vars(ns), "rows": rows, "ratios": ratios}, indent=1))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
