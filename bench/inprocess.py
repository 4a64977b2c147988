"""System A: vLLM AsyncLLM in-process, no server — the limit.

Run as a subprocess by bench.run. Reads JSON lines on stdin: first the job
(model, engine settings, prompts, max_tokens), then one line per level to
run ({"concurrency", "requests", "rep"}); answers each level with one
"BENCH {...}" line on stdout. An empty line or EOF ends it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from bench.clients import Prompt, Record, run_level


def main() -> None:
    job = json.loads(sys.stdin.readline())
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.inputs.engine import tokens_input
    from vllm.sampling_params import RequestOutputKind, SamplingParams
    from vllm.v1.engine.async_llm import AsyncLLM

    llm = AsyncLLM.from_engine_args(AsyncEngineArgs(**job["engine_args"]))
    counter = iter(range(1 << 62))

    async def driver(prompt: Prompt, max_tokens: int) -> Record:
        sp = SamplingParams(
            temperature=1.0, seed=0, max_tokens=max_tokens, ignore_eos=True,
            output_kind=RequestOutputKind.DELTA, detokenize=True,
        )
        rec = Record(time.perf_counter())
        async for out in llm.generate(tokens_input(prompt.ids), sp, f"a-{next(counter)}"):
            for c in out.outputs:
                rec.arrived(len(c.token_ids))
        return rec

    async def run() -> None:
        prompts = [Prompt(p["text"], p["ids"]) for p in job["prompts"]]
        print("READY", flush=True)
        loop = asyncio.get_running_loop()
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.strip():
                return
            level = json.loads(line)
            records, wall = await run_level(
                driver, prompts[: level["requests"]], level["concurrency"], job["max_tokens"]
            )
            print("BENCH " + json.dumps({
                "concurrency": level["concurrency"], "rep": level["rep"], "wall": wall,
                "records": [r.__dict__ for r in records],
            }), flush=True)

    asyncio.run(run())
    llm.shutdown()


if __name__ == "__main__":
    main()
