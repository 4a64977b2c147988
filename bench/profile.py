"""Where a serving process spends its CPU per token on the real engine:
tokenwire's chat (B) and Generate (G) calls and vLLM's gRPC server (E), each
loaded at one concurrency on the tiny model while py-spy samples the serving
process (never the engine core). Prints CPU microseconds per token and the
functions with the most samples; collapsed stacks go to `--out`.

    .venv/bin/python -m bench.profile [--systems BGE] [--concurrency 64] [--seconds 20]

`make profile` runs this and the fake-engine profile
(`python -m bench.frontend --profile DIR`). Needs the `bench` extra (py-spy,
smg-grpc-servicer for E).
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

from bench import clients, contestants, systems
from bench.contestants import OUT
from bench.frontend import measure
from bench.run import make_prompts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--systems", default="BGE")
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--model", default=str(systems.ROOT / ".models" / "tiny-random-llama"))
    parser.add_argument("--out", type=pathlib.Path, default=OUT / "profile" / "engine")
    parser.add_argument("--logprobs-mode", default="raw_logprobs",
                        help="vLLM's --logprobs-mode for every system (as bench.run)")
    parser.add_argument(
        "--native",
        action="store_true",
        help="also sample C/Cython frames (grpc core, upb): py-spy pauses the process",
    )
    ns = parser.parse_args(argv)
    cfg = systems.EngineConfig(model=ns.model, logprobs_mode=ns.logprobs_mode)
    logs = ns.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prompts = make_prompts(cfg.model, 256, 48)
    args = (prompts, ns.concurrency, ns.seconds, ns.max_tokens, ns.out)
    if "B" in ns.systems or "G" in ns.systems:
        proc, address = contestants.start_tokenwire(cfg, logs)
        try:
            systems.wait_until(lambda: systems.grpc_serving(address), [proc], timeout=600)
            time.sleep(2)
            groups = {"server": [proc.popen.pid]}
            if "B" in ns.systems:
                measure("B tokenwire chat", lambda: clients.tokenwire_grpc(address), groups, *args,
                        native=ns.native)
            if "G" in ns.systems:
                measure("G tokenwire Generate", lambda: clients.tokenwire_generate(address), groups,
                        *args, native=ns.native)
        finally:
            proc.stop()
    if "E" in ns.systems:
        proc, address = contestants.start_vllm_grpc(cfg, logs)
        try:
            systems.wait_until(lambda: systems.grpc_serving(address), [proc], timeout=600)
            time.sleep(2)
            measure("E vLLM gRPC", lambda: clients.vllm_grpc(address), {"server": [proc.popen.pid]},
                    *args, native=ns.native)
        finally:
            proc.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
