"""The serving layer's own cost, with no engine: tokenwire on its fake engine
(one token per event-loop turn, as fast as the server can take them), driven
by the same load drivers as `make bench`. Reports tokens/s and the CPU
microseconds per token of the server (and of Envoy for REST).

This isolates what `make bench` cannot on 2 shared cores: how much CPU the
serving path spends per token, independent of the engine's speed.

    .venv/bin/python -m bench.frontend [--concurrency 64] [--seconds 15]
        [--transports aio,native] [--reps 3]

With several transports each rep measures every path on each (order
alternating by rep) and prints native/aio ratios per rep with their spread.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import pathlib
import re
import sys
import time
from typing import Any

import psutil

from bench import clients, pyspy, systems
from bench.contestants import OUT, check_transport, envoy_pids, start_gateway


def _prompts(count: int, words: int) -> list[clients.Prompt]:
    vocab = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    out = []
    for i in range(count):
        text = f"Request {i}: " + " ".join(vocab[(i + j) % len(vocab)] for j in range(words))
        # The fake engine's tokenizer is bytes + 3.
        out.append(clients.Prompt(text, [b + 3 for b in text.encode()]))
    return out


async def _drive(driver: clients.Driver, prompts: list[clients.Prompt], conc: int,
                 seconds: float, max_tokens: int) -> tuple[int, float]:
    t0 = time.perf_counter()
    tokens = 0
    n = 0

    async def worker(i: int) -> None:
        nonlocal tokens, n
        while time.perf_counter() - t0 < seconds:
            rec = await driver(prompts[(i + n) % len(prompts)], max_tokens)
            if rec.error:
                raise RuntimeError(rec.error)
            tokens += rec.tokens
            n += 1

    await asyncio.gather(*(worker(i) for i in range(conc)))
    return tokens, time.perf_counter() - t0


def measure(name: str, make: Any, groups: dict[str, list[int]], prompts: list[clients.Prompt],
            conc: int, seconds: float, max_tokens: int,
            profile_dir: pathlib.Path | None = None, native: bool = False) -> dict[str, Any]:
    """Drive one path; CPU per token for each group of processes. With
    `profile_dir`, py-spy samples the server's process while it is measured
    (collapsed stacks in a file named for the path)."""
    profile = None
    if profile_dir is not None:
        profile = profile_dir / (re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") + ".collapsed")
    procs = {g: [psutil.Process(p) for p in pids] for g, pids in groups.items()}

    def cpu() -> dict[str, float]:
        return {g: sum(sum(p.cpu_times()[:2]) for p in ps) for g, ps in procs.items()}

    async def go() -> tuple[int, float, dict[str, float]]:
        driver, close = make()
        await _drive(driver, prompts, conc, 2.0, max_tokens)  # warm-up
        c0 = cpu()
        spy = (
            pyspy.record(groups["server"][0], seconds, profile, native=native) if profile else None
        )
        tokens, wall = await _drive(driver, prompts, conc, seconds, max_tokens)
        c1 = cpu()
        if spy is not None:
            await asyncio.to_thread(spy.wait)
        await close()
        return tokens, wall, {g: c1[g] - c0[g] for g in c0}

    tokens, wall, used = asyncio.run(go())
    row: dict[str, Any] = {"path": name, "concurrency": conc, "tok_s": tokens / wall}
    text = f"{name:<26} c={conc:<4} {row['tok_s']:7.0f} tok/s"
    for g, seconds_used in used.items():
        row[f"{g}_cpu_us_per_token"] = 1e6 * seconds_used / max(1, tokens)
        row[f"{g}_cpu_share"] = seconds_used / wall
        text += (f"  {g}: {row[f'{g}_cpu_us_per_token']:5.1f} CPU us/token "
                 f"({100 * seconds_used / wall:.0f}% of a core)")
    print(text, flush=True)
    if profile is not None and profile.exists():
        print(pyspy.summarize(profile), flush=True)
    return row


def _floor(logs: Any, prompts: list[clients.Prompt], ns: argparse.Namespace,
           small: bool = False) -> dict[str, Any]:
    """The same load on a bare grpc.aio server that only streams chunks
    (`small`: chunks of the choice alone, about 10 bytes)."""
    port = systems.free_port()
    floor = systems.spawn("frontend-floor",
                          [systems.PY, "-m", "bench.floor_server", "--port", str(port),
                           *(["--small"] if small else [])],
                          logs, systems.bench_env())
    address = f"127.0.0.1:{port}"
    name = "floor: 10-byte chunks" if small else "floor: bare grpc.aio stream"
    try:
        systems.wait_until(lambda: _reachable(address), [floor], timeout=60)
        return measure(name, lambda: clients.tokenwire_grpc(address),
                       {"server": [floor.popen.pid]}, prompts, ns.concurrency, ns.seconds,
                       ns.max_tokens, ns.profile, ns.native)
    finally:
        floor.stop()


def _reachable(address: str) -> bool:
    import grpc

    with grpc.insecure_channel(address) as ch:
        grpc.channel_ready_future(ch).result(timeout=2)
    return True


def _start(transport: str, logs: pathlib.Path) -> tuple[systems.Proc, str]:
    port = systems.free_port()
    server = systems.spawn(f"frontend-tokenwire-{transport}", [
        systems.PY, "-m", "tokenwire.cli", "serve", "--engine", "fake", "--port", str(port),
        "--max-model-len", "4096", "--served-model-name", "fake", "--log-level", "WARNING",
        "--grpc-transport", transport,
    ], logs, systems.bench_env())
    return server, f"127.0.0.1:{port}"


def _measure_paths(transport: str, server: systems.Proc, address: str, paths: list[str],
                   prompts: list[clients.Prompt], ns: argparse.Namespace,
                   logs: pathlib.Path) -> list[dict[str, Any]]:
    """Each asked path once against one started server."""
    rows = []
    pid = server.popen.pid
    tag = "" if transport == "aio" else f" [{transport}]"
    args = (prompts, ns.concurrency, ns.seconds, ns.max_tokens, ns.profile, ns.native)
    if "chat" in paths:
        rows.append(measure("gRPC StreamChatCompletion" + tag,
                            lambda: clients.tokenwire_grpc(address), {"server": [pid]}, *args))
    if "chat16" in paths:
        rows.append(measure(
            "gRPC chat, 16 tokens/chunk" + tag,
            lambda: clients.tokenwire_grpc(address, stream_interval=16),
            {"server": [pid]}, *args,
        ))
    if "generate" in paths:
        rows.append(measure("gRPC StreamGenerate" + tag,
                            lambda: clients.tokenwire_generate(address), {"server": [pid]}, *args))
    if "rest" in paths:
        gw = start_gateway(address, logs, name=f"frontend-envoy-{transport}")
        if gw is None:
            raise RuntimeError("the gateway did not start")
        gproc, url = gw
        try:
            rows.append(measure(
                "REST SSE via Envoy" + tag,
                lambda: clients.openai_sse(url, "fake", ids_field="token_ids"),
                {"server": [pid], "envoy": envoy_pids(gproc)}, *args,
            ))
        finally:
            gproc.stop()
    for row in rows:
        row["transport"] = transport
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--paths", default="floor,chat,chat16,generate,rest")
    parser.add_argument("--transports", default="aio",
                        help="--grpc-transport values (aio, native), comma-separated: each rep "
                             "runs every path on each, interleaved")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--out", default=str(OUT / "frontend.json"))
    parser.add_argument("--profile", type=pathlib.Path, default=None, metavar="DIR",
                        help="sample the server with py-spy while each path is measured; "
                             "collapsed stacks and a summary per path in DIR")
    parser.add_argument("--native", action="store_true",
                        help="with --profile: C/Cython frames too (py-spy pauses the process "
                             "per sample: read shares, not rates)")
    ns = parser.parse_args(argv)
    logs = pathlib.Path(ns.out).parent / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    paths = ns.paths.split(",")
    transports = ns.transports.split(",")
    servers = {t: _start(t, logs) for t in transports}
    rows = []
    prompts = _prompts(256, 48)
    try:
        for t, (server, address) in servers.items():
            systems.wait_until(functools.partial(systems.grpc_serving, address), [server],
                               timeout=60)
            check_transport(server, t)
        for rep in range(ns.reps):
            mine: list[dict[str, Any]] = []
            if "floor" in paths:
                mine.append(_floor(logs, prompts, ns))
            if "floor10" in paths:  # not by default
                mine.append(_floor(logs, prompts, ns, small=True))
            order = transports if rep % 2 == 0 else transports[::-1]
            for t in order:
                server, address = servers[t]
                mine += _measure_paths(t, server, address, paths, prompts, ns, logs)
            for row in mine:
                row["rep"] = rep
            rows += mine
    finally:
        for server, _ in servers.values():
            server.stop()
    ratios = _transport_ratios(rows) if len(transports) > 1 else {}
    for key, r in ratios.items():
        print(f"{key}: median {r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f}) over "
              f"{len(r['per_rep'])} reps", flush=True)
    with open(ns.out, "w") as fh:
        json.dump({"rows": rows, "max_tokens": ns.max_tokens, "ratios": ratios}, fh, indent=1)
    return 0


def _transport_ratios(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """native / aio per path and rep, for tok/s and each CPU group."""
    import statistics

    by = {(r["path"].removesuffix(" [native]"), r["transport"], r["rep"]): r for r in rows
          if "transport" in r}
    out: dict[str, dict[str, Any]] = {}
    for (path, t, rep), row in sorted(by.items()):
        base = by.get((path, "aio", rep))
        if t == "aio" or base is None:
            continue
        for key in row:
            if key == "tok_s" or key.endswith("_cpu_us_per_token"):
                if base.get(key):
                    out.setdefault(f"{path}: {key} {t}/aio", {"per_rep": []})["per_rep"].append(
                        row[key] / base[key])
    for r in out.values():
        v = r["per_rep"]
        r.update(min=min(v), median=statistics.median(v), max=max(v))
    return out


if __name__ == "__main__":
    sys.exit(main())
