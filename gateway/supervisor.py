"""`tokenwire up`: the server (or several replicas) and the gateway
together, stopped together; a replica that exits is started again.

The servers start first (as `tokenwire serve` subprocesses, each in its own
process group); Envoy starts once every one reports SERVING. A replica
that exits while `up` runs (its engine died: `tokenwire serve` exits 1, as
vLLM's server does; or it was killed) is started again with the same flags,
on the same port, after a bounded exponential backoff (restarts.py); what
is left of its process group (serving processes, an engine core) is
stopped first. Meanwhile Envoy's health checks route around it (a fleet
serves on the others) and take it back once it is SERVING. The log says
why each one exited (exit status or signal), the restart and its wait.
SIGINT/SIGTERM/SIGHUP, Envoy exiting, or every replica given up stops
everything: Envoy first (no new REST calls), then the servers (graceful:
in-flight calls may finish within their grace period); no restart then.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tokenwire.gateway.process import EnvoyProcess
from tokenwire.gateway.restarts import Backoff, RestartPolicy, describe_exit
from tokenwire.gateway.settings import GatewaySettings


@dataclasses.dataclass(frozen=True)
class Probe:
    """How to reach the server's health service: TLS trust and API key."""

    tls_ca: str = ""  # PEM to trust; "" : plaintext
    tls_server_name: str = "localhost"  # the name the server certificate holds
    api_key: str = ""  # sent only when the probes are closed

    def channel(self, address: str) -> Any:
        import grpc

        if not self.tls_ca:
            return grpc.insecure_channel(address)
        with open(self.tls_ca, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        options = (("grpc.ssl_target_name_override", self.tls_server_name),)
        return grpc.secure_channel(address, creds, options=options)

    def metadata(self) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {self.api_key}"),) if self.api_key else ()


def wait_serving(address: str, proc: subprocess.Popen[bytes], stop: threading.Event,
                 timeout: float, probe: Probe) -> bool:
    """Poll grpc.health.v1 until SERVING; False if stopped or the server died."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    with probe.channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while not stop.is_set() and proc.poll() is None:
            try:
                resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2,
                                  metadata=probe.metadata())
                if resp.status == health_pb2.HealthCheckResponse.SERVING:
                    return True
            except grpc.RpcError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server on {address} was not SERVING after {timeout}s")
            stop.wait(0.5)
    return False


def stop_server(proc: subprocess.Popen[bytes], timeout: float) -> int:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            return proc.wait(timeout)
        except subprocess.TimeoutExpired:
            print("tokenwire up: the server did not stop in time; killing it", file=sys.stderr)
            proc.kill()
    return proc.wait()


def reap_group(pgid: int, timeout: float = 5.0) -> None:
    """Stop what is left of a replica's process group after its `tokenwire
    serve` exited (its serving processes, an engine core whose parent was
    killed: they would hold the port and the device): SIGTERM, then SIGKILL
    after `timeout` seconds."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)


@dataclasses.dataclass(frozen=True)
class Replica:
    """One `tokenwire serve` to run: its flags, address and added environment."""

    argv: Sequence[str]
    address: str
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


def log(message: str) -> None:
    print(f"tokenwire up: {message}", file=sys.stderr, flush=True)


class ReplicaProcess:
    """One replica's `tokenwire serve`, started again when it exits."""

    def __init__(self, index: int, replica: Replica, env: Mapping[str, str], stop: threading.Event,
                 probe: Probe, start_timeout: float, policy: RestartPolicy) -> None:
        self.index, self.replica, self.env = index, replica, env
        self.stop, self.probe, self.start_timeout = stop, probe, start_timeout
        self.backoff = Backoff(policy)
        self.name = f"replica {index} ({replica.address})"
        self.proc: subprocess.Popen[bytes] | None = None
        self.serving_since: float | None = None  # since its last start; None: not yet
        self.start_failed = ""  # why its last start did not come up in time
        self.restart_at: float | None = None  # waiting to start again
        self.given_up = False
        self._announced = True
        self._watcher: threading.Thread | None = None

    def start(self) -> None:
        self.serving_since, self.start_failed, self.restart_at = None, "", None
        self.proc = subprocess.Popen([sys.executable, "-m", "tokenwire.cli", "serve",
                                      *self.replica.argv], env=dict(self.env), process_group=0)
        self._watcher = threading.Thread(target=self._watch_start, args=(self.proc,),
                                         daemon=True, name=f"tokenwire-up-{self.index}")
        self._watcher.start()

    def _watch_start(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            serving = wait_serving(self.replica.address, proc, self.stop, self.start_timeout,
                                   self.probe)
        except TimeoutError as err:
            if proc is self.proc:
                self.start_failed = str(err)
            return
        if serving and proc is self.proc:  # (not a start that check() already replaced)
            self.serving_since = time.monotonic()

    def wait_started(self) -> bool:
        """Wait for the start in progress: SERVING (True), or not (False:
        it exited or up is stopping); TimeoutError when it took too long."""
        if self._watcher is not None:
            self._watcher.join()
        if self.start_failed:
            raise TimeoutError(self.start_failed)
        return self.serving_since is not None

    def check(self, now: float) -> None:
        """Notice an exit (and plan the restart), a start that did not come
        up in time (stopped: counts as an exit), a restart that is due."""
        if self.given_up or self.proc is None or self.stop.is_set():
            return
        if self.restart_at is not None:
            if now >= self.restart_at:
                log(f"starting {self.name} again (restart {self.backoff.restarts}, same port)")
                self._announced = False
                self.start()
            return
        if self.start_failed and self.proc.poll() is None:
            log(f"{self.name}: {self.start_failed}: stopping it")
            self.start_failed = ""
            self.proc.kill()
        code = self.proc.poll()
        if code is None:
            if self.serving_since is not None and not self._announced:
                self._announced = True
                log(f"{self.name} is SERVING again (restart {self.backoff.restarts})")
            return
        reap_group(self.proc.pid)
        served = None if self.serving_since is None else now - self.serving_since
        ran = "before it was SERVING" if served is None else f"after {served:.1f} s SERVING"
        wait = self.backoff.exited(served)
        if wait is None:
            self.given_up = True
            log(f"{self.name} exited ({describe_exit(code)}) {ran}: it did not come up "
                f"{self.backoff.failed_starts} times in a row; giving up on it")
            return
        self.restart_at = now + wait
        log(f"{self.name} exited ({describe_exit(code)}) {ran}; starting it again in {wait:g} s "
            f"(restart {self.backoff.restarts}; Envoy routes around it meanwhile)")

    def terminate(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def wait_stopped(self, timeout: float) -> None:
        if self.proc is not None:
            stop_server(self.proc, timeout)
            reap_group(self.proc.pid)


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run(replicas: Sequence[Replica], gateway: GatewaySettings, *, probe: Probe | None = None,
        server_env: Mapping[str, str] | None = None, start_timeout: float = 900,
        stop_timeout: float = 120, policy: RestartPolicy | None = None) -> int:
    """Run `tokenwire serve` for each replica (with `server_env` added to the
    environment) and Envoy in front of them until a signal, Envoy exiting or
    every replica given up (restarts.py), restarting each that exits.
    Returns an exit status."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    # (SIGHUP left ignored under nohup: the servers no longer share up's group)
    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS
                if s != signal.SIGHUP or signal.getsignal(s) is not signal.SIG_IGN}
    running = [ReplicaProcess(i, r, {**os.environ, **(server_env or {}), **r.env}, stop,
                              probe or Probe(), start_timeout, policy or RestartPolicy())
               for i, r in enumerate(replicas)]
    envoy = EnvoyProcess(gateway)
    addresses = ", ".join(r.address for r in replicas)
    status = 0
    try:
        for replica in running:
            replica.start()
        for replica in running:
            if not replica.wait_started():
                assert replica.proc is not None
                return 0 if stop.is_set() else (replica.proc.poll() or 1)
        envoy.start()
        print(
            f"tokenwire up: REST on {envoy.url}/v1 (OpenAI base_url), gRPC on {addresses} "
            f"and through {envoy.address}; Ctrl-C stops everything",
            flush=True,
        )
        while not stop.is_set():
            for replica in running:
                replica.check(time.monotonic())
            if all(replica.given_up for replica in running):
                log("no replica left: stopping")
                status = 1
                break
            if envoy.proc is not None and envoy.proc.poll() is not None:
                log(f"envoy exited ({envoy.proc.returncode})")
                status = envoy.proc.returncode or 1
                break
            stop.wait(0.2)
    finally:
        envoy.stop()
        for replica in running:
            replica.terminate()  # all drain at once
        for replica in running:
            replica.wait_stopped(stop_timeout)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status
