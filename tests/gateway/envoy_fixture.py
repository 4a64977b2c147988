"""Start a real Envoy (tokenwire gateway) in front of a test server, or a
whole `tokenwire up`."""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import signal
import subprocess
import sys
import time

import httpx

from tests.servers import ROOT, free_port
from tokenwire.gateway.process import EnvoyProcess
from tokenwire.gateway.settings import GatewaySettings


def start_gateway(upstream: str, **overrides: object) -> EnvoyProcess:
    host, port = upstream.rsplit(":", 1)
    settings = GatewaySettings(
        listen_port=free_port(), upstream_host=host, upstream_port=int(port), log_level="info",
    )
    settings = dataclasses.replace(settings, **overrides)  # type: ignore[arg-type]
    log_path = ROOT / ".cache" / f"test-envoy-{settings.listen_port}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "wb")
    envoy = EnvoyProcess(settings, log=log)
    envoy.log_path = log_path  # type: ignore[attr-defined]
    try:
        return envoy.start()
    except Exception:
        log.close()
        raise RuntimeError(f"envoy failed; log:\n{log_path.read_text()[-4000:]}") from None


def stop_gateway(envoy: EnvoyProcess) -> None:
    """Stop Envoy and fail if a Lua filter raised an error while it ran (Envoy
    only logs those, and answers on as if the filter were absent)."""
    envoy.stop()
    log_path = envoy.log_path  # type: ignore[attr-defined]
    errors = [line for line in log_path.read_text(errors="replace").splitlines()
              if "[error][lua]" in line]
    assert not errors, "Lua errors in " + str(log_path) + ":\n" + "\n".join(errors[:10])


def wait_rest(url: str, proc: subprocess.Popen, timeout: float = 60, headers=None) -> None:
    """Wait until `tokenwire up` (proc) answers GET {url}/health with 200."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            out = proc.stdout.read().decode(errors="replace")[-4000:] if proc.stdout else ""
            raise AssertionError(f"tokenwire up exited with {proc.returncode}:\n{out}")
        try:
            if httpx.get(f"{url}/health", timeout=2, headers=headers).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url}/health not 200 after {timeout}s")


@dataclasses.dataclass
class UpProcess:
    """A running `tokenwire up`: its process, REST URL and ports; `output`
    (what it printed) once it stopped."""

    proc: subprocess.Popen
    url: str
    grpc_port: int
    rest_port: int
    output: str = ""


@contextlib.contextmanager
def tokenwire_up(*flags: str, env: dict[str, str] | None = None,
                 headers: dict[str, str] | None = None, stop: int = signal.SIGTERM,
                 grpc_port: int | None = None, fake: bool = True,
                 timeout: float = 60) -> collections.abc.Iterator[UpProcess]:
    """`tokenwire up` on free ports (the fake engine named fake-model unless
    `fake` is false) with `flags`, yielded once its REST /health answers
    (with `headers`). A body that ends normally stops it with `stop` and
    asserts it exited 0; it is killed if still running."""
    grpc_port = grpc_port or free_port()
    rest_port = free_port()
    base = ["--engine", "fake", "--served-model-name", "fake-model"] if fake else []
    cmd = [sys.executable, "-m", "tokenwire.cli", "up", *base, "--port", str(rest_port),
           "--grpc-port", str(grpc_port), *flags]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    up = UpProcess(proc, f"http://127.0.0.1:{rest_port}", grpc_port, rest_port)
    try:
        wait_rest(up.url, proc, timeout=timeout, headers=headers)
        yield up
        proc.send_signal(stop)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        up.output = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
