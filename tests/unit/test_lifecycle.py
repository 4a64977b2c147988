"""Process-level behaviour: graceful SIGTERM, and a client without vLLM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import grpc
import pytest

from tests.rpc import chat_request, stream_ids
from tests.servers import ProcessServer
from tokenwire.v1 import service_pb2_grpc


def test_sigterm_lets_inflight_stream_finish_then_exits_zero() -> None:
    server = ProcessServer(["--engine", "fake", "--fake-token-delay", "0.01", "--grace-seconds", "10"])
    server.start(timeout=60)
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            call = stub.StreamChatCompletion(
                chat_request(ignore_eos=True, max_tokens=150, return_token_ids=True), timeout=30
            )
            chunks = [next(call), next(call)]
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            # New work is refused while the in-flight stream drains.
            with pytest.raises(grpc.RpcError) as exc_info:
                stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=5)
            assert exc_info.value.code() == grpc.StatusCode.UNAVAILABLE
            chunks += list(call)
            assert len(stream_ids(chunks)[0]) == 150
            assert chunks[-1].choices[0].finish_reason == "length"
        assert server.proc.wait(30) == 0
    finally:
        server.stop()


def test_client_imports_without_vllm() -> None:
    code = (
        "import sys; sys.modules['vllm'] = None; sys.modules['torch'] = None\n"
        "import tokenwire.v1.service_pb2_grpc, tokenwire.client, tokenwire.cli\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"
