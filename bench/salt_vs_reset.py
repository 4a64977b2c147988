"""The cost of a weight update with the cache salted by version vs with a
prefix-cache reset (issue #26, --salt-cache-by-version).

    python -m bench.salt_vs_reset [--model DIR] [--cycles 3] [--requests 64]

For each mode a server of its own: "reset" (UpdateWeightsFromPath with
clear_cache: running requests are preempted and recompute their KV) and
"salt" (--salt-cache-by-version, clear_cache false: nothing is reset, new
requests miss old blocks by their salt). Each cycle keeps `--streams`
StreamGenerate requests running, warms the cache with `--requests` prompts
sharing one long prefix, updates the weights (keep mode), and then sends
those `--requests` prompts again at once. Reports per mode the server's
pause time (UpdateResult.paused_ms), the wall time of the update call, and
the TTFT (max_tokens 1) of the next `--requests` requests: median, p90 and
their cached tokens. Writes bench/out/salt_vs_reset.json.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import pathlib
import shutil
import statistics
import tempfile
import time
from typing import Any

import grpc

from bench.control_cycle import DEMO, Stream, perturbed_copy
from bench.systems import ROOT, bench_env, free_port, grpc_serving, spawn, wait_until
from tokenwire.v1 import common_pb2, control_pb2, control_pb2_grpc, generate_pb2, service_pb2_grpc


def _prompts(n: int, prefix_len: int) -> list[list[int]]:
    prefix = [100 + (i * 7) % 400 for i in range(prefix_len)]
    return [[*prefix, 600 + i, 601 + i] for i in range(n)]


def _ttfts(infer: Any, prompts: list[list[int]]) -> tuple[list[float], list[int]]:
    """Send every prompt at once (max_tokens 1): each call's latency and cached tokens."""
    def one(ids: list[int]) -> tuple[float, int]:
        t0 = time.monotonic()
        resp = infer.Generate(generate_pb2.GenerateRequest(
            token_ids=ids, sampling_params=common_pb2.SamplingParams(max_tokens=1)), timeout=600)
        return time.monotonic() - t0, int(resp.usage.prompt_tokens_details.cached_tokens)

    with concurrent.futures.ThreadPoolExecutor(max_workers=len(prompts)) as pool:
        got = list(pool.map(one, prompts))
    return [t for t, _ in got], [c for _, c in got]


def _mode(name: str, model: pathlib.Path, second: pathlib.Path, ns: argparse.Namespace,
          out: pathlib.Path) -> dict[str, Any]:
    port = free_port()
    address = f"127.0.0.1:{port}"
    flags = ["--salt-cache-by-version"] if name == "salt" else []
    server = spawn(f"tokenwire-{name}", [
        str(ROOT / ".venv" / "bin" / "tokenwire"), "serve", "--model", str(model), "--port",
        str(port), "--enable-control", "--weight-version", "c0", "--max-model-len", "2048", *flags,
    ], out, bench_env())
    prompts = _prompts(ns.requests, ns.prefix)
    cycles = []
    try:
        wait_until(lambda: grpc_serving(address), [server], timeout=600)
        with grpc.insecure_channel(address) as ch:
            infer = service_pb2_grpc.TokenwireServiceStub(ch)
            control = control_pb2_grpc.ControlServiceStub(ch)
            for i in range(1, ns.cycles + 1):
                _ttfts(infer, prompts)  # warm: the prefix is cached on this version
                streams = [Stream(infer, ns.stream_tokens, seed=s) for s in range(ns.streams)]
                time.sleep(0.5)
                t0 = time.monotonic()
                resp = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                    path=str(second if i % 2 else model), weight_version=f"c{i}", pause_mode="keep",
                    clear_cache=(name == "reset")), timeout=600)
                update_ms = (time.monotonic() - t0) * 1e3
                times, cached = _ttfts(infer, prompts)
                control.AbortRequests(control_pb2.AbortRequestsRequest(), timeout=60)
                for s in streams:
                    s.join(60)
                times.sort()
                cycles.append({
                    "cycle": i, "server_paused_ms": resp.paused_ms, "update_call_ms": update_ms,
                    "ttft_median_ms": statistics.median(times) * 1e3,
                    "ttft_p90_ms": times[int(0.9 * (len(times) - 1))] * 1e3,
                    "cached_tokens_median": statistics.median(cached),
                    "streams_ok": all(s.error is None for s in streams),
                })
    finally:
        server.stop()
    return {"mode": name, "cycles": cycles}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default=str(DEMO))
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--prefix", type=int, default=256, help="shared prompt prefix, tokens")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--stream-tokens", type=int, default=1500)
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ns = ap.parse_args()
    out = pathlib.Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    model = pathlib.Path(ns.model)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tw-ckpt-"))
    try:
        second = perturbed_copy(model, tmp / "second")
        report = {"model": str(model), "requests": ns.requests, "prefix": ns.prefix,
                  "streams": ns.streams,
                  "modes": [_mode(m, model, second, ns, out) for m in ("reset", "salt")]}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    (out / "salt_vs_reset.json").write_text(json.dumps(report, indent=2))
    print(
        "| mode | cycle | server paused ms | update call ms | next-64 TTFT median ms | p90 ms | "
        "cached median |"
    )
    print("|---|---|---|---|---|---|---|")
    for m in report["modes"]:
        for c in m["cycles"]:
            print(
                f"| {m['mode']} | {c['cycle']} | {c['server_paused_ms']} | "
                f"{c['update_call_ms']:.0f} | {c['ttft_median_ms']:.0f} | {c['ttft_p90_ms']:.0f} | "
                f"{c['cached_tokens_median']:.0f} |"
            )


if __name__ == "__main__":
    main()
