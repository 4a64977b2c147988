"""Killing the engine-core process: in-flight calls fail with UNAVAILABLE,
health goes NOT_SERVING, and the server exits non-zero instead of hanging.
Uses its own short-lived server on the tiny random model (fast to start)."""

from __future__ import annotations

import time

import grpc
import psutil
import pytest

from tests.rpc import chat_request
from tests.servers import ROOT, ProcessServer
from tokenwire.v1 import service_pb2_grpc

TINY = ROOT / ".models" / "tiny-random-llama"


@pytest.mark.skipif(not (TINY / "config.json").exists(), reason="make tiny-model")
def test_engine_death_fails_fast_and_exits_nonzero() -> None:
    server = ProcessServer(["--model", str(TINY), "--kv-cache-bytes", str(64 << 20),
                            "--health-check-seconds", "0.5"]).start(timeout=300)
    try:
        assert server.proc is not None
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            call = stub.StreamChatCompletion(
                chat_request(ignore_eos=True, max_tokens=1500, return_token_ids=True), timeout=120
            )
            next(call)
            cores = [p for p in psutil.Process(server.proc.pid).children(recursive=True)
                     if "EngineCore" in " ".join(p.cmdline()) or "EngineCore" in p.name()]
            if not cores:
                cores = psutil.Process(server.proc.pid).children(recursive=False)
            for p in cores:
                p.kill()
            with pytest.raises(grpc.RpcError) as exc_info:
                for _ in call:
                    pass
            assert exc_info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
        started = time.monotonic()
        code = server.proc.wait(60)
        assert code != 0, "an engine death must not look like a clean exit"
        assert time.monotonic() - started < 60
        assert "engine is dead" in server.log_tail(20000) or "died" in server.log_tail(20000)
    finally:
        server.stop()


