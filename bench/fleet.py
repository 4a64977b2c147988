"""The fleet benchmark (issue #15): 2 local replicas (real vLLM engines, tiny
model) behind one `tokenwire gateway`, multi-turn token-in conversations.

    python -m bench.fleet                       # make bench-fleet
    python -m bench.fleet --conversations 64 --turns 4 --out bench/out/fleet.json

1. Affinity vs round robin: the share of cacheable turn-2+ prompt tokens
   (the whole KV blocks the previous turn computed: its prompt and all but
   the last of its completion ids) served from the prefix cache, each
   conversation keyed by X-Session-ID; the same workload through a gateway
   with --no-affinity.
2. A fleet update with one replica made to fail (its checkpoint folder is
   missing): every replica ends resumed on the old version.
3. Kill one replica (SIGKILL, engine included) mid-run: which calls fail and
   how, whether every conversation finishes (a failed turn is sent again,
   with the same ids), and completion tokens/s before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import pathlib
import random
import shutil
import signal
import time
from typing import Any

import psutil

from bench import systems

BLOCK = 32


class Fleet:
    def __init__(self, model: str, logs: pathlib.Path, env: dict[str, str]):
        self.model, self.logs, self.env = model, logs, env
        self.ports = [systems.free_port(), systems.free_port()]
        self.servers: list[systems.Proc | None] = [None, None]
        self.gateway: systems.Proc | None = None
        self.gateway_port = systems.free_port()

    @property
    def addresses(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]

    def workdir(self, i: int) -> pathlib.Path:
        return self.logs / f"replica-{i}"

    def start_server(self, i: int) -> None:
        cwd = self.workdir(i)
        cwd.mkdir(parents=True, exist_ok=True)
        cmd = [systems.PY, "-m", "tokenwire.cli", "serve", "--model", self.model,
               "--port", str(self.ports[i]), "--worker-id", f"replica-{i}",
               "--enable-control", "--weight-version", "v1", "--no-warmup",
               "--block-size", str(BLOCK), "--max-model-len", "2048",
               "--kv-cache-memory-bytes", str(256 << 20), "--enforce-eager",
               "--no-enable-chunked-prefill"]
        log = open(self.logs / f"replica-{i}.log", "ab")
        import subprocess

        # One core per replica (2 replicas on this 2-core machine): the engines
        # do not fight over the same cores.
        env = {**self.env, "VLLM_CPU_OMP_THREADS_BIND": str(i % (os.cpu_count() or 1))}
        popen = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=cwd,
                                 start_new_session=True)  # its own group: kill takes the engine too
        self.servers[i] = systems.Proc(f"replica-{i}", popen, self.logs / f"replica-{i}.log")

    def wait_servers(self) -> None:
        procs = [p for p in self.servers if p is not None]
        for address in self.addresses:
            def serving(a: str = address) -> bool:
                return systems.grpc_serving(a)

            systems.wait_until(serving, procs, timeout=600)

    def start_gateway(self, affinity: bool) -> None:
        self.stop_gateway()
        self.gateway = systems.spawn("fleet-gateway", [
            systems.PY, "-m", "tokenwire.cli", "gateway", "--listen-port", str(self.gateway_port),
            "--upstreams", *self.addresses, "--health-check-interval-s", "0.5",
            "--affinity" if affinity else "--no-affinity"], self.logs, self.env)
        systems.wait_until(lambda: systems.http_ok(f"http://127.0.0.1:{self.gateway_port}/health"),
                           [self.gateway], timeout=60)
        time.sleep(1.5)  # every replica passes a health check

    def stop_gateway(self) -> None:
        if self.gateway is not None:
            self.gateway.stop()
            self.gateway = None

    def kill(self, i: int) -> None:
        proc = self.servers[i]
        assert proc is not None
        os.killpg(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait(30)

    def stop(self) -> None:
        self.stop_gateway()
        for proc in self.servers:
            if proc is not None and proc.popen.poll() is None:
                try:
                    os.killpg(proc.popen.pid, signal.SIGTERM)
                    proc.popen.wait(60)
                except (ProcessLookupError, psutil.TimeoutExpired, Exception):
                    os.killpg(proc.popen.pid, signal.SIGKILL)


async def run_conversations(address: str, n: int, turns: int, seed: int, *,
                            on_turn: Any = None, max_tokens: int = 16) -> dict[str, Any]:
    """n conversations x turns through the gateway (Generate, token ids in,
    X-Session-ID per conversation), 16 at a time. A turn that fails with
    UNAVAILABLE is sent again (same ids: nothing of it was delivered)."""
    from tokenwire.client import AsyncClient, RetryPolicy
    from tokenwire.client.errors import TokenwireError

    rng = random.Random(seed)
    limit = asyncio.Semaphore(16)
    stats: dict[str, Any] = {"cacheable": 0, "cached": 0, "failures": collections.Counter(),
                             "finished": 0, "timeline": []}
    t0 = time.monotonic()

    async def conversation(client: Any, c: int) -> None:
        ids = [rng.randrange(100, 40000) for _ in range(96)]
        previous_len = 0
        for turn in range(turns):
            while True:
                async with limit:
                    try:
                        resp = await client.generate(
                            token_ids=ids, sampling_params={"max_tokens": max_tokens,
                                                            "ignore_eos": True, "temperature": 1.0},
                            metadata=(("x-session-id", f"conv-{seed}-{c}"),), timeout=120)
                        break
                    except TokenwireError as exc:
                        stats["failures"][f"{exc.code.name}/{exc.reason or '-'}"] += 1
                        if exc.code.name != "UNAVAILABLE":
                            raise
            out = list(resp.choices[0].token_ids)
            stats["timeline"].append((time.monotonic() - t0, len(out)))
            if turn > 0:  # the previous turn computed KV for all but its last sampled token
                stats["cacheable"] += (previous_len - 1) // BLOCK * BLOCK
                stats["cached"] += resp.usage.prompt_tokens_details.cached_tokens
            previous_len = len(ids) + len(out)
            ids = ids + out + [rng.randrange(100, 40000) for _ in range(24)]
            if on_turn is not None:
                on_turn()
        stats["finished"] += 1

    # The client library's own retries are off: every failure is counted here.
    async with AsyncClient(address, timeout=120, retry=RetryPolicy(max_attempts=1)) as client:
        await asyncio.gather(*(conversation(client, c) for c in range(n)))
    stats["seconds"] = time.monotonic() - t0
    stats["cache_share"] = stats["cached"] / max(1, stats["cacheable"])
    return stats


def rate(timeline: list[tuple[float, int]], start: float, end: float) -> float:
    tokens = sum(n for t, n in timeline if start <= t < end)
    return tokens / max(1e-9, end - start)


def phase_affinity(fleet: Fleet, n: int, turns: int) -> dict[str, Any]:
    out = {}
    for seed, affinity in ((1, True), (2, False)):
        fleet.start_gateway(affinity)
        stats = asyncio.run(run_conversations(f"127.0.0.1:{fleet.gateway_port}", n, turns, seed))
        out["affinity" if affinity else "round_robin"] = {
            "cache_share": round(stats["cache_share"], 4), "cacheable_tokens": stats["cacheable"],
            "cached_tokens": stats["cached"], "seconds": round(stats["seconds"], 1)}
        print(f"fleet: {'affinity' if affinity else 'round robin'}: "
              f"{stats['cache_share']:.1%} of cacheable turn-2+ tokens from cache", flush=True)
    return out


def phase_update(fleet: Fleet) -> dict[str, Any]:
    from tokenwire.client.fleet import update_fleet

    # Replica 0 has the new checkpoint (a copy of the model) under its working
    # directory; replica 1 does not: its update fails, and the fleet rolls back.
    ckpt = fleet.workdir(0) / "ckpt"
    if not ckpt.exists():
        shutil.copytree(fleet.model, ckpt)
    report = update_fleet(fleet.addresses, "ckpt", version="v2", rollback_path=fleet.model)
    served = [serving_version(a) for a in fleet.addresses]
    print(f"fleet: after the update, generating replicas report versions {served}", flush=True)
    print(f"fleet: update with one failing replica: ok={report.ok}, versions "
          f"{[r.version for r in report.replicas]}, resumed {[r.resumed for r in report.replicas]}",
          flush=True)
    return {**report.as_dict(), "versions_generating_after": served}


def serving_version(address: str) -> str:
    """The weight version a real generate call on `address` reports (so the
    replica runs again, on those weights)."""
    import grpc

    from tokenwire.v1 import generate_pb2, service_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        resp = service_pb2_grpc.TokenwireServiceStub(channel).Generate(
            generate_pb2.GenerateRequest(token_ids=[5, 6, 7], sampling_params={"max_tokens": 2}),
            timeout=60)
    return resp.choices[0].weight_versions[0].version


def engine_requests(address: str) -> int:
    import grpc

    from tokenwire.v1 import models_pb2, service_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.TokenwireServiceStub(channel)
        return stub.GetStats(models_pb2.GetStatsRequest(), timeout=5).engine_requests


def phase_kill(fleet: Fleet, n: int, turns: int) -> dict[str, Any]:
    """Kill replica 1 (SIGKILL, its engine too) once 40 % of the turns are
    done, from a timer thread while calls are in flight on it."""
    import threading

    fleet.start_gateway(True)
    done = [0]
    killed: dict[str, Any] = {}
    t0 = time.monotonic()

    def killer() -> None:
        while done[0] < (n * turns) * 2 // 5:
            time.sleep(0.01)
        killed["in_flight_on_killed"] = engine_requests(fleet.addresses[1])
        killed["at"] = time.monotonic() - t0
        fleet.kill(1)

    def on_turn() -> None:
        done[0] += 1

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    stats = asyncio.run(run_conversations(f"127.0.0.1:{fleet.gateway_port}", n, turns, 3,
                                          on_turn=on_turn, max_tokens=64))
    thread.join(30)
    kill = killed.get("at", 0.0)
    end = stats["seconds"]
    result = {"killed_at_s": round(kill, 1),
              "engine_requests_on_killed_replica": killed.get("in_flight_on_killed"),
              "failures": dict(stats["failures"]),
              "conversations_finished": stats["finished"], "conversations": n,
              "tokens_per_s_before": round(rate(stats["timeline"], max(0.0, kill - 4), kill), 1),
              "tokens_per_s_after": round(rate(stats["timeline"], min(end, kill + 2), end), 1),
              "seconds": round(end, 1)}
    print(f"fleet: kill one replica: {result}", flush=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(systems.ROOT / ".models" / "tiny-random-llama"))
    parser.add_argument("--conversations", type=int, default=64)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument(
        "--out", type=pathlib.Path, default=systems.ROOT / "bench" / "out" / "fleet.json"
    )
    ns = parser.parse_args(argv)
    logs = ns.out.parent / "fleet-logs"
    logs.mkdir(parents=True, exist_ok=True)
    fleet = Fleet(ns.model, logs, systems.bench_env())
    results: dict[str, Any] = {"conversations": ns.conversations, "turns": ns.turns,
                               "replicas": 2, "model": pathlib.Path(ns.model).name}
    try:
        for i in range(2):
            fleet.start_server(i)
        fleet.wait_servers()
        results["cache"] = phase_affinity(fleet, ns.conversations, ns.turns)
        results["update"] = phase_update(fleet)
        results["kill"] = phase_kill(fleet, ns.conversations, ns.turns)
    finally:
        fleet.stop()
    ns.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"fleet: results in {ns.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
