"""System A: vLLM AsyncLLM in-process, no server — the limit.

Run as a subprocess by bench.run. Reads JSON lines on stdin: first the job
(engine settings, prompts), then one line per cell to run (a
`bench.contestants.Cell`: concurrency, rep, max_tokens, warmup, window);
answers each with one "BENCH {...}" line on stdout: what arrived in the
window and the CPU seconds of this process ("serving", the load generator
included) and of its engine core ("engine"). An empty line or EOF ends it.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

from bench import systems
from bench.clients import Prompt, Record, Window, run_window


def main() -> None:
    job = json.loads(sys.stdin.readline())
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs.engine import tokens_input
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**job["engine_args"]))
    counter = iter(range(1 << 62))

    async def driver(prompt: Prompt, max_tokens: int, window: Window | None = None) -> Record:
        sp = SamplingParams(
            temperature=1.0, seed=0, max_tokens=max_tokens, ignore_eos=True,
            output_kind=RequestOutputKind.DELTA, detokenize=True,
        )
        rec = Record(time.perf_counter(), window=window)
        # Cancelling the task aborts the request (AsyncLLM.generate does).
        async for out in llm.generate(tokens_input(prompt.ids), sp, f"a-{next(counter)}"):
            for c in out.outputs:
                rec.arrived(len(c.token_ids))
        return rec

    async def run() -> None:
        prompts = [Prompt(p["text"], p["ids"]) for p in job["prompts"]]
        engine, _ = systems.engine_cores(os.getpid())
        groups = systems.ProcGroups.of(
            {"serving": [os.getpid()], "engine": [p.pid for p in engine]}
        )
        print("READY", flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.strip():
                return
            cell: dict[str, Any] = json.loads(line)
            result = await run_window(driver, prompts, cell["concurrency"], cell["max_tokens"],
                                      cell["warmup"], cell["window"], groups.cpu)
            print("BENCH " + json.dumps(result), flush=True)

    asyncio.run(run())
    llm.shutdown()


if __name__ == "__main__":
    main()
