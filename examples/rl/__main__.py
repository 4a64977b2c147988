"""`python -m examples.rl` (`make rl-demo`): GRPO on the demo model through
tokenwire. Starts `tokenwire serve --enable-control` on the model unless
--target names a running server, trains, and writes bench/out/rl/<name>.json
and .png. See docs/rl.md."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
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
from examples.rl.weights import FleetPush, PathPush, TransferPush
from tokenwire.client import AsyncClient

ROOT = Path(__file__).resolve().parents[2]


def free_ports(n: int) -> int:
    """A base port with n free ports from it (the fleet's replicas: port, port+1, ...)."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        try:
            for p in range(base, base + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue


def server_command(args: argparse.Namespace, port: int, ckpt: Path, gateway_port: int) -> list[str]:
    """`tokenwire serve` with control on, starting at weight version s0;
    weight updates may only load from the trainer's checkpoint folder. With
    --replicas N > 1: `tokenwire up --replicas N` (N servers behind Envoy; up's
    --port is the gateway's, its servers' gRPC port --grpc-port)."""
    ckpt.mkdir(parents=True, exist_ok=True)
    cmd = ["up", "--replicas", str(args.replicas), "--port", str(gateway_port), "--grpc-port",
           str(port)] if args.replicas > 1 else ["serve", "--port", str(port)]
    return [sys.executable, "-m", "tokenwire.cli", *cmd, "--model", str(args.model),
            "--enable-control", "--weight-version", "s0", "--weights-root", str(ckpt),
            "--max-model-len", "1024", "--kv-cache-bytes", str(256 << 20), *args.server_arg]


@dataclasses.dataclass
class Served:
    target: str  # where rollouts go (the gateway, in the fleet variant)
    replicas: list[str]  # each server's own address (control is per replica)


def start_server(
    args: argparse.Namespace, ckpt: Path
) -> tuple[subprocess.Popen, Served, IO[bytes]]:
    port = free_ports(args.replicas)
    gateway = free_ports(1) if args.replicas > 1 else port
    args.out.mkdir(parents=True, exist_ok=True)
    log = open(args.out / f"{args.name}-server.log", "wb")  # closed by server()
    cmd = server_command(args, port, ckpt, gateway)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    print(f"starting tokenwire {cmd[3]} on 127.0.0.1:{gateway} (log: {log.name})", file=sys.stderr)
    return proc, Served(f"127.0.0.1:{gateway}",
                        [f"127.0.0.1:{port + i}" for i in range(args.replicas)]), log


@contextlib.asynccontextmanager
async def server(args: argparse.Namespace, ckpt: Path) -> AsyncIterator[Served]:
    if args.target:
        yield Served(args.target, [args.target])
        return
    proc, served, log = start_server(args, ckpt)
    try:
        for address in {*served.replicas, served.target}:
            async with AsyncClient(address) as c:
                await c.wait_ready(timeout=900)
        yield served
    finally:
        proc.terminate()  # tokenwire up stops its replicas and Envoy
        await asyncio.to_thread(proc.wait, 120)
        log.close()


async def main(args: argparse.Namespace) -> dict:
    cfg = Config(model=args.model, steps=args.steps, prompts=args.prompts,
                 group_size=args.group_size,
                 max_tokens=args.max_tokens, temperature=args.temperature, lr=args.lr,
                 train_layers=args.train_layers, turns=args.turns, mode=args.mode,
                 max_lag=args.max_lag, seed=args.seed)
    ckpt = (args.ckpt or ROOT / ".cache" / "rl" / args.name).resolve()
    policy = Policy(args.model, lr=cfg.lr, temperature=cfg.temperature,
                    train_layers=cfg.train_layers, seed=cfg.seed)
    async with server(args, ckpt) as served, AsyncClient(served.target) as client:
        replicas = [AsyncClient(r) for r in served.replicas] if args.replicas > 1 else []
        if args.weights == "transfer":
            pusher: PathPush | TransferPush | FleetPush = TransferPush(
                served.target, policy, master=args.transfer_master,
                world_size=args.transfer_world_size)
        elif replicas:
            pusher = FleetPush(served.replicas, ckpt)
        else:
            pusher = PathPush(client, ckpt)
        if args.target:  # a running server: make it serve our starting weights as s0
            await pusher.push(policy, "s0")
        progress = Progress(cfg.steps)
        try:
            log = await run(client, cfg, policy, pusher, on_step=progress, replicas=replicas)
        finally:
            progress.close()
            for r in replicas:
                await r.close()
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
    p.add_argument(
        "--target", default="", help="a running server with --enable-control (default: start one)"
    )
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
    p.add_argument(
        "--ckpt", type=Path, default=None, help="checkpoint folder (default .cache/rl/NAME)"
    )
    p.add_argument("--replicas", type=int, default=1,
                   help="N > 1: the fleet variant (`tokenwire up --replicas N`, update_fleet)")
    p.add_argument("--server-arg", action="append", default=[], help="extra `tokenwire serve` flag")
    args = p.parse_args(argv)
    args.name = args.name or f"{args.model.name}-{args.mode}" + (
        f"-fleet{args.replicas}" if args.replicas > 1 else "")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse()))
