"""How long one RL weight-update cycle takes, and what in-flight streams see.

    python -m bench.control_cycle [--model DIR] [--streams 8] [--cycles 5]

Starts `tokenwire serve --enable-control` on the model (default: the demo
model), builds a second checkpoint of it (a perturbed copy, in a temporary
folder), keeps `--streams` StreamGenerate requests running, and runs
`--cycles` times: Pause(keep) -> UpdateWeightsFromPath(other checkpoint,
new version, prefix-cache reset) -> Resume. Reports per cycle the wall time
of the three calls, the server's own load and pause times, and the longest
gap between two chunks of any in-flight stream during the cycle (the stall
a rollout sees), against the median inter-chunk gap outside the cycles.
Also checks every stream got all its ids with contiguous version spans.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import shutil
import statistics
import tempfile
import threading
import time

import grpc

from bench.systems import ROOT, bench_env, free_port, grpc_serving, spawn, wait_until
from tokenwire.v1 import (
    common_pb2,
    control_pb2,
    control_pb2_grpc,
    generate_pb2,
    service_pb2_grpc,
)

DEMO = ROOT / ".models" / "SmolLM2-135M-Instruct"


def perturbed_copy(src: pathlib.Path, dst: pathlib.Path, scale: float = 0.05) -> pathlib.Path:
    import torch
    from safetensors.torch import load_file, save_file

    shutil.copytree(src, dst)
    weights = load_file(str(src / "model.safetensors"))
    gen = torch.Generator().manual_seed(0)
    for name, tensor in weights.items():
        if "mlp.down_proj" in name:
            weights[name] = tensor + scale * torch.randn(tensor.shape, generator=gen)
    save_file(weights, str(dst / "model.safetensors"), metadata={"format": "pt"})
    return dst


class Stream(threading.Thread):
    """One long StreamGenerate; records the arrival time of every chunk."""

    def __init__(self, stub: service_pb2_grpc.TokenwireServiceStub, tokens: int, seed: int):
        super().__init__(daemon=True)
        req = generate_pb2.GenerateRequest(
            token_ids=[1, 504 + seed, 3575, 282, 4649],
            sampling_params=common_pb2.SamplingParams(
                max_tokens=tokens, ignore_eos=True, temperature=0.8, seed=seed),
        )
        self.call = stub.StreamGenerate(req, timeout=3600)
        self.arrivals: list[float] = []
        self.ids = 0
        self.spans: list[tuple[str, int, int]] = []
        self.error: str | None = None
        self.start()

    def run(self) -> None:
        try:
            for msg in self.call:
                self.arrivals.append(time.monotonic())
                for c in msg.choices:
                    self.ids += len(c.token_ids)
                    if c.finish_reason:
                        self.spans = [(s.version, s.start, s.end) for s in c.weight_versions]
        except grpc.RpcError as exc:
            self.error = f"{exc.code().name}: {exc.details()}"


def max_gap(arrivals: list[float], start: float, end: float) -> float:
    """Longest silence between chunks that overlaps [start, end]."""
    gaps = [b - a for a, b in itertools.pairwise(arrivals) if b >= start and a <= end]
    return max(gaps, default=0.0)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--model", default=str(DEMO))
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--gap", type=float, default=2.0, help="seconds between cycles")
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ns = ap.parse_args()
    out = pathlib.Path(ns.out)
    out.mkdir(parents=True, exist_ok=True)
    model = pathlib.Path(ns.model)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="tw-ckpt-"))
    second = perturbed_copy(model, tmp / "second")
    port = free_port()
    address = f"127.0.0.1:{port}"
    server = spawn("tokenwire", [
        str(ROOT / ".venv" / "bin" / "tokenwire"), "serve", "--model", str(model), "--port",
        str(port), "--enable-control", "--weight-version", "c0", "--max-model-len", "4096",
    ], out, bench_env())
    try:
        wait_until(lambda: grpc_serving(address), [server], timeout=600)
        with grpc.insecure_channel(address) as ch:
            infer = service_pb2_grpc.TokenwireServiceStub(ch)
            control = control_pb2_grpc.ControlServiceStub(ch)
            tokens = int(ns.gap * (ns.cycles + 2) * 40)  # outlives the cycles at ~10-40 tok/s
            streams = [Stream(infer, tokens, seed=i) for i in range(ns.streams)]
            time.sleep(ns.gap)
            cycles = []
            for i in range(1, ns.cycles + 1):
                path = second if i % 2 else model
                t0 = time.monotonic()
                control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=600)
                t1 = time.monotonic()
                resp = control.UpdateWeightsFromPath(control_pb2.UpdateWeightsFromPathRequest(
                    path=str(path), weight_version=f"c{i}"), timeout=600)
                t2 = time.monotonic()
                control.Resume(control_pb2.ResumeRequest(), timeout=600)
                t3 = time.monotonic()
                cycles.append({"cycle": i, "t0": t0, "t3": t3, "pause_ms": (t1 - t0) * 1e3,
                               "update_ms": (t2 - t1) * 1e3, "resume_ms": (t3 - t2) * 1e3,
                               "total_ms": (t3 - t0) * 1e3, "server_load_ms": resp.load_ms})
                time.sleep(ns.gap)
            control.AbortRequests(control_pb2.AbortRequestsRequest(), timeout=60)
            for s in streams:
                s.join(60)
        normal = [b - a for s in streams for a, b in zip(s.arrivals, s.arrivals[1:], strict=False)
                  if not any(c["t0"] - 1 <= a <= c["t3"] + 1 for c in cycles)]
        for c in cycles:
            c["stall_ms"] = max(max_gap(s.arrivals, c["t0"], c["t3"]) for s in streams) * 1e3
        report = {
            "model": str(model), "streams": ns.streams, "cycles": cycles,
            "median_chunk_gap_ms": statistics.median(normal) * 1e3 if normal else None,
            "streams_ok": all(s.error is None for s in streams),
            "spans_contiguous": all(
                s.spans and s.spans[0][1] == 0 and s.spans[-1][2] == s.ids
                and all(a[2] == b[1] for a, b in zip(s.spans, s.spans[1:], strict=False))
                for s in streams),
            "versions_per_stream": [len(s.spans) for s in streams],
        }
    finally:
        server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    (out / "control_cycle.json").write_text(json.dumps(report, indent=2))
    print(
        "| cycle | pause ms | update ms (server load) | resume ms | total ms | longest stream "
        "stall ms |"
    )
    print("|---|---|---|---|---|---|")
    for c in report["cycles"]:
        print(
            f"| {c['cycle']} | {c['pause_ms']:.0f} | {c['update_ms']:.0f} ({c['server_load_ms']}) "
            f"| {c['resume_ms']:.0f} | {c['total_ms']:.0f} | {c['stall_ms']:.0f} |"
        )
    print(f"median chunk gap outside cycles: {report['median_chunk_gap_ms']:.1f} ms; "
          f"streams ok: {report['streams_ok']}; spans contiguous: {report['spans_contiguous']}; "
          f"spans per stream: {report['versions_per_stream']}")


if __name__ == "__main__":
    main()
