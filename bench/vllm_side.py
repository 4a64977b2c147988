"""vLLM's own OpenAI server and tokenwire (serve + Envoy) side by side on the
same model and engine flags, for the benches that compare their answers
(bench.render_vs_vllm, bench.pooling_vs_vllm, bench.scores_vs_vllm): both
started, the same body posted to each, the statuses printed and a
refusal's text shown."""

from __future__ import annotations

import collections.abc
import contextlib
import dataclasses
import os
import subprocess
import sys
from typing import Any

import httpx

from bench import systems
from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import ProcessServer


@dataclasses.dataclass
class Pair:
    vllm: str  # vLLM's base URL
    tokenwire: str  # the gateway's base URL

    def post(self, name: str, path: str, body: dict[str, Any]
             ) -> tuple[httpx.Response, httpx.Response] | None:
        """`body` posted to both; their answers when both are 200, else None
        (what each said is printed)."""
        a = httpx.post(f"{self.vllm}{path}", json=body, timeout=120)
        b = httpx.post(f"{self.tokenwire}{path}", json=body, timeout=120)
        print(f"== {name} ({path}): vLLM {a.status_code}, tokenwire {b.status_code}")
        if a.status_code != 200 or b.status_code != 200:
            print(f"  vLLM: {a.text[:300]}\n  tokenwire: {b.text[:300]}")
            return None
        return a, b


@contextlib.contextmanager
def side_by_side(model: str, engine: list[str], *, kv_bytes: int, log_name: str,
                 vllm_only: tuple[str, ...] = ()) -> collections.abc.Iterator[Pair]:
    """Both servers on `model` with `engine` flags (float32, eager on vLLM
    as tokenwire's CPU defaults; `vllm_only`: flags only vLLM takes)."""
    port = systems.free_port()
    log = systems.ROOT / ".cache" / log_name
    log.parent.mkdir(parents=True, exist_ok=True)
    vllm = subprocess.Popen(
        [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--host", "127.0.0.1",
         "--port", str(port), "--model", model, *engine, "--kv-cache-memory-bytes",
         str(kv_bytes), "--dtype", "float32", "--enforce-eager", *vllm_only],
        stdout=open(log, "w"), stderr=subprocess.STDOUT,
        env=dict(os.environ, VLLM_LOGGING_LEVEL="WARNING"))
    tw = ProcessServer(["--model", model, *engine, "--kv-cache-bytes", str(kv_bytes)]).start()
    gw = start_gateway(tw.address)
    try:
        systems.wait_until(lambda: systems.http_ok(f"http://127.0.0.1:{port}/health"),
                           [systems.Proc("vllm", vllm, log)], timeout=600)
        yield Pair(f"http://127.0.0.1:{port}", gw.url)
    finally:
        vllm.terminate()
        vllm.wait(60)
        stop_gateway(gw)
        tw.stop()


def compare_bodies(model: str, engine: list[str], bodies: dict[str, tuple[str, dict[str, Any]]],
                   compare: collections.abc.Callable[[dict[str, Any], dict[str, Any]], None],
                   *, log_name: str, kv_bytes: int = 64 << 20) -> None:
    """Both servers on `model` (served as "m"): each body of `bodies` (name
    -> (path, body)) posted to both, `compare(vllm_json, tokenwire_json)`
    where both answered 200."""
    with side_by_side(model, ["--served-model-name", "m", *engine], kv_bytes=kv_bytes,
                      log_name=log_name) as pair:
        for name, (path, body) in bodies.items():
            answers = pair.post(name, path, {"model": "m", **body})
            if answers is not None:
                compare(answers[0].json(), answers[1].json())
