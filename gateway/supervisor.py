"""`tokenwire up`: the server (or several replicas) and the gateway
together, stopped together.

The servers start first (as `tokenwire serve` subprocesses); Envoy starts
once every one reports SERVING. SIGINT/SIGTERM, Envoy exiting, or the last
server exiting stops everything: Envoy first (no new REST calls), then the
servers (graceful: in-flight calls may finish within their grace period).
With several replicas, one exiting is reported and the fleet goes on
without it (Envoy's health checks take it out).
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


@dataclasses.dataclass(frozen=True)
class Replica:
    """One `tokenwire serve` to run: its flags, address and added environment."""

    argv: Sequence[str]
    address: str
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


def run(replicas: Sequence[Replica], gateway: GatewaySettings, *, probe: Probe | None = None,
        server_env: Mapping[str, str] | None = None, start_timeout: float = 900,
        stop_timeout: float = 120) -> int:
    """Run `tokenwire serve` for each replica (with `server_env` added to the
    environment) and Envoy in front of them until a signal, Envoy exiting or
    the last server exiting. Returns an exit status."""
    stop = threading.Event()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    servers = [
        subprocess.Popen([sys.executable, "-m", "tokenwire.cli", "serve", *r.argv],
                         env={**os.environ, **(server_env or {}), **r.env})
        for r in replicas
    ]
    envoy = EnvoyProcess(gateway)
    addresses = ", ".join(r.address for r in replicas)
    status = 0
    try:
        for replica, server in zip(replicas, servers, strict=True):
            if not wait_serving(replica.address, server, stop, start_timeout, probe or Probe()):
                return 0 if stop.is_set() else (server.returncode or 1)
        envoy.start()
        print(
            f"tokenwire up: REST on {envoy.url}/v1 (OpenAI base_url), gRPC on {addresses} "
            f"and through {envoy.address}; Ctrl-C stops everything",
            flush=True,
        )
        reported: set[int] = set()
        while not stop.is_set():
            for i, server in enumerate(servers):
                if server.poll() is not None and i not in reported:
                    reported.add(i)
                    print(f"tokenwire up: the server on {replicas[i].address} exited "
                          f"({server.returncode})", file=sys.stderr, flush=True)
            if len(reported) == len(servers):
                status = servers[-1].returncode or 1
                break
            if envoy.proc is not None and envoy.proc.poll() is not None:
                print(f"tokenwire up: envoy exited ({envoy.proc.returncode})", file=sys.stderr)
                status = envoy.proc.returncode or 1
                break
            stop.wait(0.2)
    finally:
        envoy.stop()
        for server in servers:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)  # all drain at once
        for server in servers:
            stop_server(server, stop_timeout)
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status
