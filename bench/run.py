"""`make bench`: the serving layer's cost, side by side, in one run.

A  vLLM AsyncLLM in-process, no server (the limit)
B  tokenwire, native gRPC streaming (chat: messages in, text + ids out)
G  tokenwire, native gRPC StreamGenerate (ids in, ids out: E's call)
S  B with stream_options.stream_interval=16 (a chunk per 16 tokens: the
   same tokens in fewer messages; outside the targets)
C  tokenwire through the Envoy gateway, REST + SSE
b, g, c  B, G and C on a second tokenwire server with --grpc-transport
   native (pygrpc-native; the same engine settings; issue #46)
D  vLLM's OpenAI-compatible server, SSE with return_token_ids
E  vLLM's gRPC mode (smg-grpc-servicer), native gRPC
F  the smg Rust gateway in front of E, REST + SSE
R  the smg Rust gateway in front of tokenwire (its VllmEngine service, the
   same calls smg makes to E), REST + SSE (only when asked: --systems FR)

Same tiny random model, same engine settings, same workload (fixed prompt
and output lengths, ignore_eos). Each cell (system, concurrency, rep) keeps
`concurrency` requests in flight for a warm-up and then a fixed measured
window, counting only token ids received inside the window; docs/bench.md
("Benchmark method") describes it.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import pathlib
import random
import subprocess
import sys
import threading
import time
from typing import Any, cast

from tqdm import tqdm

from bench import clients, systems
from bench import contestants as cs
from bench.contestants import OUT, Cell, Contestant, InProcessContestant, ServerContestant
from bench.report import ORDER, summarize, write_outputs

PROMPTS = 512  # distinct prompts, cycled through by every cell


@dataclasses.dataclass
class Workload:
    prompt_words: int = 48
    max_tokens: int = 128
    concurrencies: tuple[int, ...] = (64, 256)
    reps: int = 3
    warmup: float = 5.0
    window: float = 30.0
    mode: str = "full"


def make_prompts(model: str, count: int, words: int) -> list[clients.Prompt]:
    """Distinct user messages of equal length, with their rendered ids."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model)
    rng = random.Random(0)
    vocab = ["alpha", "beta", "gamma", "delta", "omega", "sigma", "kappa", "theta"]
    prompts = []
    for i in range(count):
        text = f"Request {i}: " + " ".join(rng.choice(vocab) for _ in range(words))
        ids = tok.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True,
            return_dict=False,
        )
        # tokenize=True, return_dict=False: a list of ids (the stubs allow more).
        prompts.append(clients.Prompt(text, list(cast("list[int]", ids))))
    return prompts


class Progress:
    """Progress on stderr through tqdm: a live bar on a terminal; when stderr
    is not a terminal (a log file) tqdm is off and each stage is one line."""

    def __init__(self, total: int, unit: str = "requests"):
        self.total = total
        self.unit = unit
        self.done = 0
        self._label = ""
        self.bar = tqdm(total=total, unit=unit, file=sys.stderr, disable=None, dynamic_ncols=True)

    @property
    def label(self) -> str:
        return self._label

    @label.setter
    def label(self, value: str) -> None:
        self._label = value
        if self.bar.disable:
            sys.stderr.write(f"{value} ({self.done}/{self.total} {self.unit})\n")
            sys.stderr.flush()
        else:
            self.bar.set_description(value)

    def note(self, text: str) -> None:
        self.bar.write(text, file=sys.stderr)

    def step(self, n: int = 1) -> None:
        self.done += n
        self.bar.update(n)

    def close(self) -> None:
        self.bar.close()


def start_all(cfg: systems.EngineConfig, wanted: str, prompts: list[clients.Prompt],
              logs: pathlib.Path, procs: list[systems.Proc]) -> dict[str, Contestant]:
    """Start every wanted system (engines load side by side), then wait for
    each; returns them by letter. Started processes are added to `procs`."""
    out: dict[str, Contestant] = {}
    a = InProcessContestant(cfg.engine_args(), prompts, logs) if "A" in wanted else None
    tw = twn = D = E = None
    if any(x in wanted for x in "BGSCR"):
        tw = cs.start_tokenwire(cfg, logs)
        procs.append(tw[0])
    if any(x in wanted for x in "bgc"):
        if cs.native_available():
            twn = cs.start_tokenwire(cfg, logs, transport="native")
            procs.append(twn[0])
        else:
            sys.stderr.write("b, g, c skipped: pygrpc-native is not installed "
                             "(pip install 'tokenwire[native]')\n")
    if "D" in wanted:
        D = cs.start_vllm_openai(cfg, logs)
        procs.append(D[0])
    if "E" in wanted or "F" in wanted:
        E = cs.start_vllm_grpc(cfg, logs)
        procs.append(E[0])
    if a is not None:
        a.wait_ready()
        out["A"] = a
    if tw is not None:
        proc, address = tw
        systems.wait_until(lambda: systems.grpc_serving(address), [proc])
        out.update(_tokenwire_contestants(cfg, wanted, AIO, proc, address, prompts, logs, procs))
    if twn is not None:
        proc, address = twn
        systems.wait_until(lambda: systems.grpc_serving(address), [proc])
        cs.check_transport(proc, "native")
        out.update(
            _tokenwire_contestants(cfg, wanted, NATIVE, proc, address, prompts, logs, procs)
        )
    if D is not None:
        dproc, durl = D
        systems.wait_until(lambda: systems.http_ok(durl + "/health"), [dproc])
        out["D"] = ServerContestant(
            "D", lambda: clients.openai_sse(durl, cfg.model, ids_field="token_ids"), prompts,
            dproc.popen.pid
        )
    if E is not None:
        eproc, eaddr = E
        systems.wait_until(lambda: systems.grpc_serving(eaddr), [eproc])
        if "E" in wanted:
            out["E"] = ServerContestant(
                "E", lambda: clients.vllm_grpc(eaddr), prompts, eproc.popen.pid
            )
        if "F" in wanted:
            fproc, furl = cs.start_smg(cfg, eaddr, logs)
            procs.append(fproc)
            systems.wait_until(lambda: cs.smg_ready(furl), [eproc, fproc], timeout=120)
            out["F"] = ServerContestant(
                "F", lambda: clients.openai_sse(furl, cfg.model, ids_field=None), prompts,
                eproc.popen.pid, systems.with_descendants(fproc.popen.pid),
            )
    return out


# The letters of one tokenwire server's contestants: chat (B), Generate (G),
# chat with 16 tokens a chunk (S), REST through Envoy (C), smg in front (R).
AIO = {"chat": "B", "generate": "G", "interval": "S", "rest": "C", "smg": "R"}
NATIVE = {"chat": "b", "generate": "g", "rest": "c"}  # --grpc-transport native


def _tokenwire_contestants(
    cfg: systems.EngineConfig, wanted: str, letters: dict[str, str], proc: systems.Proc,
    address: str, prompts: list[clients.Prompt], logs: pathlib.Path, procs: list[systems.Proc],
) -> dict[str, Contestant]:
    """The wanted contestants driving one started tokenwire server."""
    out: dict[str, Contestant] = {}
    pid = proc.popen.pid

    def want(kind: str) -> str | None:
        letter = letters.get(kind)
        return letter if letter is not None and letter in wanted else None

    if x := want("chat"):
        out[x] = ServerContestant(x, lambda: clients.tokenwire_grpc(address), prompts, pid)
    if x := want("generate"):
        out[x] = ServerContestant(x, lambda: clients.tokenwire_generate(address), prompts, pid)
    if x := want("interval"):
        out[x] = ServerContestant(
            x, lambda: clients.tokenwire_grpc(address, stream_interval=16), prompts, pid
        )
    if (x := want("rest")) and (gw := cs.start_gateway(address, logs, name=f"{x}-envoy")):
        procs.append(gw[0])
        url, model = gw[1], pathlib.Path(cfg.model).name
        out[x] = ServerContestant(
            x, lambda: clients.openai_sse(url, model, ids_field="token_ids"), prompts, pid,
            cs.envoy_pids(gw[0]),
        )
    if x := want("smg"):
        rproc, rurl = cs.start_smg(cfg, address, logs, name=f"{x}-smg")
        procs.append(rproc)
        systems.wait_until(lambda: cs.smg_ready(rurl), [proc, rproc], timeout=120)
        out[x] = ServerContestant(
            x, lambda: clients.openai_sse(rurl, cfg.model, ids_field=None), prompts, pid,
            systems.with_descendants(rproc.popen.pid),
        )
    return out


def interleave(
    contestants: dict[str, Contestant], work: Workload, progress: Progress
) -> list[dict[str, Any]]:
    """Every (repetition, concurrency) runs each system once, back to back,
    in an order rotated from one level to the next: drift of the shared
    machine spreads over all systems instead of biasing the ratios."""
    order = [s for s in ORDER if s in contestants]
    active: list[Contestant | None] = [None]
    stop = threading.Event()

    def sampler() -> None:
        while not stop.is_set():
            c = active[0]
            if c is not None:
                try:
                    c.sample()
                except Exception:
                    pass
            time.sleep(0.1)

    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    runs: list[dict[str, Any]] = []
    try:
        for name in order:  # warm-up, not measured
            progress.label = f"{name} warm-up"
            contestants[name].run_cell(Cell(8, -1, 16, warmup=2.0, window=1.0))
        k = 0
        for rep in range(work.reps):
            for conc in work.concurrencies:
                shift = k % len(order)
                k += 1
                for name in order[shift:] + order[:shift]:
                    progress.label = f"{name} c={conc} rep {rep + 1}"
                    active[0] = contestants[name]
                    r = contestants[name].run_cell(
                        Cell(conc, rep, work.max_tokens, work.warmup, work.window)
                    )
                    runs.append(r)
                    progress.note(
                        f"  {name} c={conc} rep {rep + 1}: {r['tokens'] / r['seconds']:.0f} tok/s, "
                        f"{r['errors']} errors, engine idle after {r['idle_wait_s']:.1f} s, cell "
                        f"{r['cell_s']:.1f} s"
                        + (" (timed out)" if r["idle_timeout"] else "")
                    )
                    progress.step()
                    active[0] = None
    finally:
        stop.set()
        thread.join(2)
    for r in runs:
        r["peak_rss"] = contestants[r["system"]].peak_rss
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default=str(systems.ROOT / ".models" / "tiny-random-llama"))
    parser.add_argument("--concurrency", default="64,256", help="comma-separated levels")
    parser.add_argument(
        "--reps", type=int, default=None, help="repetitions (default 3; 1 with --quick)"
    )
    parser.add_argument(
        "--window", type=float, default=None, help="measured seconds per cell (default 30)"
    )
    parser.add_argument(
        "--warmup", type=float, default=None, help="discarded seconds per cell (default 5)"
    )
    parser.add_argument("--quick", action="store_true",
                        help="for development: warm-up 2 s, window 8 s, 1 rep (unless given)")
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--systems", default="ABbGgCcDEF",
                        help="letters; S and R only when asked")
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    parser.add_argument("--logprobs-mode", default="raw_logprobs",
                        help="vLLM's --logprobs-mode for every system (tokenwire's own default, "
                             "processed_logprobs, costs the engine a log-softmax per step)")
    ns = parser.parse_args(argv)
    quick = ns.quick
    work = Workload(
        max_tokens=ns.max_tokens, concurrencies=tuple(int(c) for c in ns.concurrency.split(",")),
        reps=ns.reps if ns.reps is not None else (1 if quick else 3),
        warmup=ns.warmup if ns.warmup is not None else (2.0 if quick else 5.0),
        window=ns.window if ns.window is not None else (8.0 if quick else 30.0),
        mode="quick" if quick else "full",
    )
    if (ns.window, ns.warmup) != (None, None) and not quick:
        work.mode = "custom"
    cfg = systems.EngineConfig(model=ns.model, logprobs_mode=ns.logprobs_mode)
    logs = ns.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    prompts = make_prompts(cfg.model, PROMPTS, work.prompt_words)
    meta: dict[str, Any] = {
        "started": time.time(), "model": cfg.model, "engine": dataclasses.asdict(cfg),
        "workload": dataclasses.asdict(work), "mode": work.mode, "window": work.window,
        "warmup": work.warmup, "reps": work.reps, "max_tokens": work.max_tokens,
        "commit": _commit(), "machine": _machine(),
        "loadavg_before": [round(x, 2) for x in os.getloadavg()],
        "method": "fixed windows, interleaved, rotated order per level",
    }
    procs: list[systems.Proc] = []
    contestants: dict[str, Contestant] = {}
    try:
        sys.stderr.write("starting the systems...\n")
        contestants = start_all(cfg, ns.systems, prompts, logs, procs)
        meta["processes"] = {
            n: {**c.groups.describe(), "uncounted": c.others} for n, c in contestants.items()
        }
        for n, c in contestants.items():
            sys.stderr.write(f"{n}: {c.groups.describe()}; uncounted {c.others}\n")
        progress = Progress(work.reps * len(work.concurrencies) * len(contestants), unit="cells")
        try:
            runs = interleave(contestants, work, progress)
        finally:
            progress.close()
    finally:
        a = contestants.get("A")
        if isinstance(a, InProcessContestant):
            a.stop()
        for p in reversed(procs):
            p.stop()

    sys.stderr.write("\n")
    meta["finished"] = time.time()
    summary = summarize(runs, meta)
    print(write_outputs(summary, ns.out))
    return 0


def _commit() -> str:
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=systems.ROOT,
                             capture_output=True, text=True, timeout=10)
        return out.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _machine() -> dict[str, Any]:
    import platform

    import psutil

    return {
        "cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "processor": platform.processor() or platform.machine(),
        "python": platform.python_version(),
    }


if __name__ == "__main__":
    sys.exit(main())
