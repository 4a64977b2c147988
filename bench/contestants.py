"""The systems of one bench run, all started up front so that their levels
can be interleaved: each `Contestant` runs one level on demand and reports
its records, wall time and the serving processes' CPU seconds."""

from __future__ import annotations

import asyncio
import json
import pathlib
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import psutil

from bench import clients, systems

OUT = systems.ROOT / "bench" / "out"


class Contestant:
    name: str

    def run_level(self, prompts: list[clients.Prompt], conc: int, max_tokens: int, rep: int,
                  progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        raise NotImplementedError

    def sample(self) -> None:
        """Record the serving processes' RSS (called every 0.1 s while active)."""

    @property
    def peak_rss(self) -> int:
        return 0


class ServerContestant(Contestant):
    """A server driven over the network by one of the load drivers."""

    def __init__(self, name: str, make_driver: Callable[[], tuple[clients.Driver, Any]], pids: list[int]):
        self.name = name
        self.make_driver = make_driver
        self.meter = systems.ResourceMeter(pids)

    def run_level(self, prompts: list[clients.Prompt], conc: int, max_tokens: int, rep: int,
                  progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        async def go() -> tuple[list[clients.Record], float]:
            driver, close = self.make_driver()
            try:
                return await clients.run_level(driver, prompts, conc, max_tokens, progress)
            finally:
                await close()

        self.meter.reset()
        records, wall = asyncio.run(go())
        return {
            "system": self.name, "concurrency": conc, "rep": rep, "wall": wall,
            "cpu_seconds": self.meter.cpu_seconds(), "records": [r.__dict__ for r in records],
        }

    def sample(self) -> None:
        self.meter.sample()

    @property
    def peak_rss(self) -> int:
        return self.meter.peak_rss


class InProcessContestant(Contestant):
    """System A: AsyncLLM inside a bench subprocess (bench.inprocess); its
    CPU counts the load generator too (it shares the process)."""

    name = "A"

    def __init__(self, engine_args: dict[str, Any], prompts: list[clients.Prompt], max_tokens: int,
                 logs: pathlib.Path):
        self.log = logs / "A.log"
        self.proc = subprocess.Popen(
            [systems.PY, "-m", "bench.inprocess"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=open(self.log, "wb"), env=systems.bench_env(), cwd=systems.ROOT,
            text=True,
        )
        assert self.proc.stdin and self.proc.stdout
        job = {"engine_args": engine_args, "max_tokens": max_tokens,
               "prompts": [{"text": p.text, "ids": p.ids} for p in prompts]}
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        self.ps = psutil.Process(self.proc.pid)
        self._peak = 0

    def wait_ready(self) -> None:
        assert self.proc.stdout
        for line in self.proc.stdout:
            if line.startswith("READY"):
                return
        raise RuntimeError(f"A failed to start: see {self.log}")

    def run_level(self, prompts: list[clients.Prompt], conc: int, max_tokens: int, rep: int,
                  progress: Callable[[int], None] | None = None) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        cpu0 = sum(self.ps.cpu_times()[:2])
        self.proc.stdin.write(json.dumps({"concurrency": conc, "requests": len(prompts), "rep": rep}) + "\n")
        self.proc.stdin.flush()
        for line in self.proc.stdout:
            if line.startswith("BENCH "):
                data = json.loads(line[6:])
                break
        else:
            raise RuntimeError(f"A died: see {self.log}")
        if progress:
            progress(len(data["records"]))
        return {"system": "A", **data, "cpu_seconds": sum(self.ps.cpu_times()[:2]) - cpu0}

    def sample(self) -> None:
        self._peak = max(self._peak, self.ps.memory_info().rss)

    @property
    def peak_rss(self) -> int:
        return self._peak

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin
            try:
                self.proc.stdin.write("\n")
                self.proc.stdin.close()
                self.proc.wait(60)
            except Exception:
                self.proc.kill()


def start_tokenwire(cfg: systems.EngineConfig, logs: pathlib.Path) -> tuple[systems.Proc, str]:
    port = systems.free_port()
    proc = systems.spawn("B-tokenwire", [
        systems.PY, "-m", "tokenwire.cli", "serve", "--model", cfg.model, "--port", str(port),
        "--dtype", cfg.dtype, "--max-model-len", str(cfg.max_model_len),
        "--kv-cache-bytes", str(cfg.kv_cache_bytes), "--block-size", str(cfg.block_size),
        "--max-num-seqs", str(cfg.max_num_seqs), "--scheduling-policy", "fcfs",
        "--log-level", "WARNING",
    ], logs, systems.bench_env())
    return proc, f"127.0.0.1:{port}"


def start_gateway(backend: str, logs: pathlib.Path) -> tuple[systems.Proc, str] | None:
    """Start Envoy through tokenwire's own launcher; None if not available."""
    port = systems.free_port()
    host, _, upstream = backend.rpartition(":")
    proc = systems.spawn("C-envoy", [
        systems.PY, "-m", "tokenwire.cli", "gateway", "--upstream-host", host,
        "--upstream-port", upstream, "--listen-port", str(port),
    ], logs, systems.bench_env())
    url = f"http://127.0.0.1:{port}"
    try:
        systems.wait_until(lambda: systems.http_ok(url + "/health"), [proc], timeout=60)
    except Exception as exc:
        proc.stop()
        print(f"\nC skipped: the gateway did not start ({exc})", file=sys.stderr)
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


def start_smg(cfg: systems.EngineConfig, backend: str, logs: pathlib.Path) -> tuple[systems.Proc, str]:
    port = systems.free_port()
    proc = systems.spawn("F-smg", [
        str(systems.BIN / "smg"), "launch", "--host", "127.0.0.1", "--port", str(port),
        "--worker-urls", f"grpc://{backend}", "--model-path", cfg.model,
        "--tokenizer-path", cfg.model,
    ], logs, systems.bench_env())
    return proc, f"http://127.0.0.1:{port}"


def smg_ready(url: str) -> bool:
    import httpx

    r = httpx.get(url + "/v1/models", timeout=2)
    return r.status_code == 200 and bool(r.json().get("data"))


def envoy_pids(proc: systems.Proc) -> list[int]:
    return [proc.popen.pid] + [c.pid for c in psutil.Process(proc.popen.pid).children(recursive=True)]
