"""The systems of one bench run, all started up front so that their cells
can be interleaved: each `Contestant` runs one cell (a warm-up and a measured
window) on demand and reports what arrived in the window and the CPU seconds
of each group of its processes."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import psutil

from bench import clients, systems

OUT = systems.ROOT / "bench" / "out"


@dataclasses.dataclass
class Cell:
    """One measured cell: a concurrency, a repetition, the window's timing."""

    concurrency: int
    rep: int
    max_tokens: int
    warmup: float
    window: float


class Contestant:
    name: str
    groups: systems.ProcGroups  # serving, engine, proxy, driver
    others: list[str]  # descendants of the server counted in no group

    def run_cell(self, cell: Cell) -> dict[str, Any]:
        """Run one cell, then wait until the engine is idle again."""
        t0 = time.monotonic()
        result = self._window(cell)
        idle_s, timed_out = systems.wait_idle(self.groups.groups["engine"])
        return {"system": self.name, "concurrency": cell.concurrency, "rep": cell.rep, **result,
                "idle_wait_s": idle_s, "idle_timeout": timed_out, "cell_s": time.monotonic() - t0}

    def _window(self, cell: Cell) -> dict[str, Any]:
        raise NotImplementedError

    def sample(self) -> None:
        """Record the serving layer's RSS (called every 0.1 s while active)."""
        self.groups.sample()

    @property
    def peak_rss(self) -> int:
        return self.groups.peak_rss


class ServerContestant(Contestant):
    """A server driven over the network by one of the load drivers.

    serving: the frontend process (its engine cores are found under it);
    proxy: Envoy or the smg gateway (with their descendants)."""

    def __init__(self, name: str, make_driver: Callable[[], tuple[clients.Driver, clients.Closer]],
                 prompts: list[clients.Prompt], serving: int, proxy: list[int] | None = None):
        self.name = name
        self.make_driver = make_driver
        self.prompts = prompts
        engine, self.others = systems.engine_cores(serving)
        self.groups = systems.ProcGroups({
            "serving": [psutil.Process(serving)], "engine": engine,
            "proxy": [psutil.Process(p) for p in proxy or []], "driver": [psutil.Process()],
        })

    def _window(self, cell: Cell) -> dict[str, Any]:
        async def go() -> dict[str, Any]:
            driver, close = self.make_driver()
            try:
                return await clients.run_window(driver, self.prompts, cell.concurrency,
                                                cell.max_tokens,
                                                cell.warmup, cell.window, self.groups.cpu)
            finally:
                await close()

        return asyncio.run(go())


class InProcessContestant(Contestant):
    """System A: AsyncLLM inside a bench subprocess (bench.inprocess), which
    runs the window itself and measures its own CPU (serving: itself, load
    generator included; engine: its engine core)."""

    name = "A"

    def __init__(
        self, engine_args: dict[str, Any], prompts: list[clients.Prompt], logs: pathlib.Path
    ):
        self.log = logs / "A.log"
        self.proc = subprocess.Popen(
            [systems.PY, "-m", "bench.inprocess"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(self.log, "wb"), env=systems.bench_env(), cwd=systems.ROOT,
            text=True,
        )
        assert self.proc.stdin and self.proc.stdout
        job = {
            "engine_args": engine_args,
            "prompts": [{"text": p.text, "ids": p.ids} for p in prompts],
        }
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def wait_ready(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            if line.startswith("READY"):
                engine, self.others = systems.engine_cores(self.proc.pid)
                self.groups = systems.ProcGroups(
                    {"serving": [psutil.Process(self.proc.pid)], "engine": engine}
                )
                return
        raise RuntimeError(f"A failed to start: see {self.log}")

    def _window(self, cell: Cell) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(dataclasses.asdict(cell)) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("BENCH "):
                return dict(json.loads(line[6:]))
        raise RuntimeError(f"A died: see {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.close()
                self.proc.wait(60)
            except Exception:
                self.proc.kill()


def start_tokenwire(cfg: systems.EngineConfig, logs: pathlib.Path,
                    transport: str = "aio") -> tuple[systems.Proc, str]:
    """`tokenwire serve` on `--grpc-transport transport` (B, G, S, C on aio;
    their native variants b, g, c on native)."""
    port = systems.free_port()
    name = "B-tokenwire" if transport == "aio" else f"B-tokenwire-{transport}"
    proc = systems.spawn(name, [
        systems.PY, "-m", "tokenwire.cli", "serve", "--port", str(port), *cfg.vllm_flags(),
        "--grpc-transport", transport, "--log-level", "WARNING",
    ], logs, systems.bench_env())
    return proc, f"127.0.0.1:{port}"


FALLBACK = "serving on grpc.aio instead"  # runtime/transport.py's warning


def native_available() -> bool:
    """Whether pygrpc-native is installed here (the `native` extra)."""
    import importlib.util

    return importlib.util.find_spec("pygrpc_native") is not None


def check_transport(proc: systems.Proc, transport: str) -> None:
    """A native server that fell back to grpc.aio would be measured under the
    wrong name: its warning (logged at the bench's WARNING level) stops the run."""
    if transport == "native" and FALLBACK in proc.log.read_text(errors="replace"):
        raise RuntimeError(f"{proc.name} fell back to grpc.aio: see {proc.log}")


def start_gateway(backend: str, logs: pathlib.Path, extra: list[str] | None = None,
                  name: str = "C-envoy") -> tuple[systems.Proc, str] | None:
    """Start Envoy through tokenwire's own launcher (with `extra` flags);
    None if not available."""
    port = systems.free_port()
    host, _, upstream = backend.rpartition(":")
    proc = systems.spawn(name, [
        systems.PY, "-m", "tokenwire.cli", "gateway", "--upstream-host", host,
        "--upstream-port", upstream, "--listen-port", str(port), *(extra or []),
    ], logs, systems.bench_env())
    url = f"http://127.0.0.1:{port}"
    try:
        systems.wait_until(lambda: systems.http_ok(url + "/health"), [proc], timeout=60)
    except Exception as exc:
        proc.stop()
        print(f"\n{name} skipped: the gateway did not start ({exc})", file=sys.stderr)
        return None
    return proc, url


def start_vllm_openai(cfg: systems.EngineConfig, logs: pathlib.Path) -> tuple[systems.Proc, str]:
    port = systems.free_port()
    proc = systems.spawn("D-vllm-openai", [
        systems.PY, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
        "--port", str(port), *cfg.vllm_flags(), "--disable-uvicorn-access-log",
    ], logs, systems.bench_env())
    return proc, f"http://127.0.0.1:{port}"


def start_vllm_grpc(cfg: systems.EngineConfig, logs: pathlib.Path) -> tuple[systems.Proc, str]:
    port = systems.free_port()
    proc = systems.spawn("E-vllm-grpc", [
        systems.PY, "-m", "vllm.entrypoints.launchers.grpc_server", "--host", "127.0.0.1",
        "--port", str(port), *cfg.vllm_flags(),
    ], logs, systems.bench_env())
    return proc, f"127.0.0.1:{port}"


def start_smg(
    cfg: systems.EngineConfig, backend: str, logs: pathlib.Path, name: str = "F-smg"
) -> tuple[systems.Proc, str]:
    """smg's router in front of one gRPC worker (vLLM's servicer, or
    tokenwire: both serve vllm.grpc.engine.VllmEngine)."""
    port = systems.free_port()
    proc = systems.spawn(name, [
        str(systems.BIN / "smg"), "launch", "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", f"grpc://{backend}", "--model-path", cfg.model,
        "--tokenizer-path", cfg.model, "--prometheus-port", str(systems.free_port()),
    ], logs, systems.bench_env())
    return proc, f"http://127.0.0.1:{port}"


def smg_ready(url: str) -> bool:
    import httpx

    r = httpx.get(url + "/v1/models", timeout=2)
    return r.status_code == 200 and bool(r.json().get("data"))


def envoy_pids(proc: systems.Proc) -> list[int]:
    return systems.with_descendants(proc.popen.pid)
