"""smg's router (PyPI `smg`, the Rust gateway) launched for tests, in front
of tokenwire replicas' VllmEngine service (docs/routers.md)."""

from __future__ import annotations

import contextlib
import pathlib
import shutil
import subprocess
import time

import httpx

from tests.servers import ROOT, free_port

SMG = shutil.which("smg") or str(pathlib.Path(ROOT) / ".venv" / "bin" / "smg")


class Router:
    """`smg launch --backend vllm` over `workers` (host:port), cache-aware,
    health-checked every second; its log in `log`."""

    def __init__(self, workers: list[str], tokenizer: pathlib.Path, log: pathlib.Path, *,
                 model: str, log_level: str = "warn", extra: tuple[str, ...] = ()):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.model = model
        self.log = log
        self.proc = subprocess.Popen([
            SMG, "launch", "--host", "127.0.0.1", "--port", str(self.port), "--backend", "vllm",
            "--worker-urls", *(f"grpc://{w}" for w in workers),
            "--model-path", str(tokenizer), "--tokenizer-path", str(tokenizer),
            "--policy", "cache_aware",
            "--health-check-interval-secs", "1", "--health-failure-threshold", "1",
            "--health-success-threshold", "1", "--prometheus-port", str(free_port()),
            "--log-level", log_level, *extra,
        ], stdout=log.open("wb"), stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float = 60) -> None:
        """Until a chat is answered (the workers registered, the tokenizer loaded)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                r = httpx.post(self.url + "/v1/chat/completions", timeout=30, json={
                    "model": self.model, "messages": [{"role": "user", "content": "ready?"}],
                    "max_tokens": 1})
                if r.status_code == 200:
                    return
            time.sleep(0.3)
        raise AssertionError(f"smg did not become ready:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
