"""Helpers that start tokenwire servers for tests: a fake-engine server in a
background thread (fast), and the real `tokenwire serve` as a subprocess."""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import os
import pathlib
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tokenwire.server.core.settings import ServerSettings

ROOT = pathlib.Path(__file__).resolve().parent.parent


# Ports handed to servers are drawn below the kernel's ephemeral range
# (/proc/sys/net/ipv4/ip_local_port_range, 32768-60999 here): a port the
# kernel gave out with bind(0) and released can be taken again by any outgoing
# connection (Envoy's upstreams, a client) before the server binds it. Below
# the range only a listener that asks for the number can take it.
_LOW, _HIGH = 20000, 32700
_handed: set[int] = set()
_draw = random.Random(os.getpid() ^ time.time_ns())


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> int:
    """The first of `count` consecutive free ports, none handed out before in
    this process (`tokenwire up` numbers its replicas' ports from one)."""
    for _ in range(10_000):
        base = _draw.randrange(_LOW, _HIGH - count)
        block = range(base, base + count)
        if not _handed.intersection(block) and all(_bindable(p) for p in block):
            _handed.update(block)
            return base
    raise RuntimeError("no free port block below the ephemeral range")


def free_port() -> int:
    return free_ports(1)


def wait_serving(address: str, timeout: float, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        try:
            with grpc.insecure_channel(address) as ch:
                resp = health_pb2_grpc.HealthStub(ch).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=2
                )
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return
        except grpc.RpcError as exc:
            last = exc
        time.sleep(0.5)
    raise TimeoutError(f"{address} not SERVING after {timeout}s: {last}")


def wait_workers(address: str, count: int, timeout: float,
                 proc: subprocess.Popen | None = None) -> None:
    """Until `count` serving processes answer on `address` (--api-server-count):
    each probe on a new connection, which the kernel hands to one of the
    processes' sockets; process 1 may listen seconds after process 0 serves."""
    from tokenwire.v1 import models_pb2, service_pb2_grpc

    deadline = time.monotonic() + timeout
    workers: set[str] = set()
    while len(workers) < count:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"server exited early with {proc.returncode}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(workers)} of {count} processes serve {address}")
        try:
            options = [("grpc.use_local_subchannel_pool", 1)]
            with grpc.insecure_channel(address, options=options) as ch:
                workers.add(service_pb2_grpc.TokenwireServiceStub(ch).GetStats(
                    models_pb2.GetStatsRequest(), timeout=5).worker_id)
        except grpc.RpcError:
            time.sleep(0.2)


@dataclass
class ThreadServer:
    """A tokenwire server on a FakeEngine, in its own thread and loop."""

    settings: ServerSettings
    engine: object
    address: str = ""
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _running: object = None
    _ready: threading.Event = field(default_factory=threading.Event)

    def start(self) -> ThreadServer:
        from tokenwire.server.runtime.app import start

        def run() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            self._running = loop.run_until_complete(start(self.settings, self.engine))
            self.address = f"127.0.0.1:{self._running.port}"  # type: ignore[attr-defined]
            self._ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        if not self._ready.wait(30):
            raise RuntimeError("fake server did not start")
        return self

    @property
    def transport(self) -> str:
        """The gRPC transport serving (--grpc-transport, after any fallback)."""
        from tokenwire.server.runtime.transport import is_native

        return "native" if is_native(self._running.server) else "aio"  # type: ignore[attr-defined]

    def call(self, coro):  # run a coroutine on the server loop
        return self.submit(coro).result(30)

    def submit(self, coro):  # start a coroutine on the server loop; a concurrent Future
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def stop(self) -> None:
        if self._loop is None:
            return
        if self._running.state.serving:  # type: ignore[attr-defined]
            self.call(self._running.stop(0))  # type: ignore[attr-defined]
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(10)


@contextlib.contextmanager
def fake_serving(
    engine: object = None, **settings: object
) -> collections.abc.Iterator[ThreadServer]:
    """The hand-made test server, shared: a ThreadServer on ``engine`` (a
    FakeEngine of the same max_model_len unless given), with ServerSettings
    defaulting to engine="fake", port=0, max_model_len=512 and ``settings``
    over them (grpc_transport="native": pygrpc-native's transport; the
    `transport` fixture of tests/conftest.py); stopped on exit. Usable in a
    fixture of any scope."""
    from tokenwire.server.engine.fake.engine import FakeEngine

    options: dict[str, object] = {"engine": "fake", "port": 0, "max_model_len": 512, **settings}
    if engine is None:
        engine = FakeEngine(max_model_len=options["max_model_len"])
    server = ThreadServer(ServerSettings(**options), engine).start()  # type: ignore[arg-type]
    try:
        yield server
    finally:
        server.stop()


@dataclass
class ProcessServer:
    """`tokenwire serve` in a subprocess (the real vLLM engine)."""

    args: list[str]
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    log_path: pathlib.Path | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self, timeout: float = 600) -> ProcessServer:
        env = dict(os.environ)
        env.setdefault("TORCHINDUCTOR_CACHE_DIR", str(ROOT / ".cache" / "inductor"))
        self.log_path = ROOT / ".cache" / f"test-server-{self.port}.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "wb")
        cmd = [sys.executable, "-m", "tokenwire.cli", "serve", "--port", str(self.port), *self.args]
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        try:
            wait_serving(self.address, timeout, self.proc)
            if "--api-server-count" in self.args:
                count = int(self.args[self.args.index("--api-server-count") + 1])
                wait_workers(self.address, count, timeout, self.proc)
        except Exception:
            self.stop()
            raise RuntimeError(f"server failed; log tail:\n{self.log_tail()}") from None
        return self

    def log_tail(self, n: int = 4000) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return self.log_path.read_bytes()[-n:].decode(errors="replace")

    def stop(self, timeout: float = 60) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait(10)
