"""Start a real Envoy (tokenwire gateway) in front of a test server."""

from __future__ import annotations

import dataclasses
import subprocess
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
