"""`python -m examples.rl` (`make rl-demo`): GRPO on the demo model through
tokenwire. Starts `tokenwire serve --enable-control` on the model unless
--target names a running server, trains, and writes bench/out/rl/<name>.json
and .png. See docs/rl.md."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import IO

from examples.rl import report
from examples.rl.loop import Config, Progress, run
from examples.rl.policy import Policy
from examples.rl.weights import PathPush, TransferPush
from tokenwire.client import AsyncClient

ROOT = Path(__file__).resolve().parents[2]


def server_command(model: Path, port: int, ckpt: Path, extra: list[str]) -> list[str]:
    """`tokenwire serve` with control on, starting at weight version s0;
    weight updates may only load from the trainer's checkpoint folder."""
    ckpt.mkdir(parents=True, exist_ok=True)
    return [sys.executable, "-m", "tokenwire.cli", "serve", "--model", str(model), "--port", str(port),
            "--enable-control", "--weight-version", "s0", "--weights-root", str(ckpt),
            "--max-model-len", "1024", "--kv-cache-bytes", str(256 << 20), *extra]


def start_server(args: argparse.Namespace, ckpt: Path) -> tuple[subprocess.Popen, int, IO[bytes]]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / f"{args.name}-server.log", "wb")  # closed by server()
    proc = subprocess.Popen(server_command(args.model, port, ckpt, args.server_arg),
                            stdout=log, stderr=subprocess.STDOUT)
    print(f"starting tokenwire serve on 127.0.0.1:{port} (log: {log.name})", file=sys.stderr)
    return proc, port, log


@contextlib.asynccontextmanager
async def server(args: argparse.Namespace, ckpt: Path) -> AsyncIterator[str]:
    if args.target:
        yield args.target
        return
    proc, port, log = start_server(args, ckpt)
    try:
        async with AsyncClient(f"127.0.0.1:{port}") as c:
            await c.wait_ready(timeout=900)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 60)
        log.close()


async def main(args: argparse.Namespace) -> dict:
    cfg = Config(model=args.model, steps=args.steps, prompts=args.prompts, group_size=args.group_size,
                 max_tokens=args.max_tokens, temperature=args.temperature, lr=args.lr,
                 train_layers=args.train_layers, turns=args.turns, mode=args.mode,
                 max_lag=args.max_lag, seed=args.seed)
    ckpt = (args.ckpt or ROOT / ".cache" / "rl" / args.name).resolve()
    policy = Policy(args.model, lr=cfg.lr, temperature=cfg.temperature, train_layers=cfg.train_layers,
                    seed=cfg.seed)
    async with server(args, ckpt) as target, AsyncClient(target) as client:
        if args.weights == "transfer":
            pusher: PathPush | TransferPush = TransferPush(
                target, policy, master=args.transfer_master, world_size=args.transfer_world_size)
        else:
            pusher = PathPush(client, ckpt)
        if args.target:  # a running server: make it serve our starting weights as s0
            await pusher.push(policy, "s0")
        progress = Progress(cfg.steps)
        try:
            log = await run(client, cfg, policy, pusher, on_step=progress)
        finally:
            progress.close()
    steps = log["steps"]
    head, tail = steps[: max(1, len(steps) // 5)], steps[-max(1, len(steps) // 5):]
    summary = {
        "reward_first_steps": round(sum(r["reward"]["mean"] for r in head) / len(head), 3),
        "reward_last_steps": round(sum(r["reward"]["mean"] for r in tail) / len(tail), 3),
        "wall_seconds": round(log["wall_seconds"], 1),
        "mismatch": report.overall_mismatch(log),
        "probes_matched": sum(r["probe"]["match"] for r in steps), "steps": len(steps),
        "lags": report.lag_histogram(log), "dropped": sum(r["dropped"] for r in steps),
    }
    log["summary"] = summary
    json_path, png = report.write(log, args.out, args.name)
    print(json.dumps({**summary, "json": str(json_path), "png": str(png)}, indent=1))
    return summary


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m examples.rl", description=__doc__)
    p.add_argument("--model", type=Path, default=ROOT / ".models" / "SmolLM2-135M-Instruct")
    p.add_argument("--target", default="", help="a running server with --enable-control (default: start one)")
    p.add_argument("--mode", choices=["sync", "async"], default="async")
    p.add_argument("--steps", type=int, default=15)
    p.add_argument("--prompts", type=int, default=4, help="problems per step")
    p.add_argument("--group-size", type=int, default=8, help="samples per problem (G)")
    p.add_argument("--max-tokens", type=int, default=12)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--lr", type=float, default=3e-5)
    p.add_argument("--train-layers", type=int, default=10,
                   help="train the last N transformer layers (0: all)")
    p.add_argument("--turns", type=int, default=1, help="2: the multi-turn variant")
    p.add_argument("--max-lag", type=int, default=None, help="drop tokens more versions behind")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weights", choices=["path", "transfer"], default="path",
                   help="path: safetensors + UpdateWeightsFromPath; transfer: vLLM's NCCL "
                        "weight-transfer engine (GPU only)")
    p.add_argument("--transfer-master", default="127.0.0.1:29600")
    p.add_argument("--transfer-world-size", type=int, default=2)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "out" / "rl")
    p.add_argument("--name", default="")
    p.add_argument("--ckpt", type=Path, default=None, help="checkpoint folder (default .cache/rl/NAME)")
    p.add_argument("--server-arg", action="append", default=[], help="extra `tokenwire serve` flag")
    args = p.parse_args(argv)
    args.name = args.name or f"{args.model.name}-{args.mode}"
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
