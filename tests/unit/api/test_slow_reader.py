"""A client that stops reading does not make the server buffer without
bound: HTTP/2 flow control blocks the stream's writes, which stops pulling
from the engine (vLLM then merges pending deltas into one output)."""

from __future__ import annotations

import time

import grpc
import pytest

from tests.rpc import chat_request
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import service_pb2_grpc

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


def test_generation_stalls_while_the_client_does_not_read(transport) -> None:
    engine = FakeEngine(max_model_len=400_000)
    with fake_serving(engine, max_model_len=400_000, grpc_transport=transport) as server:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            req = chat_request(ignore_eos=True, max_tokens=300_000, return_token_ids=True,
                               logprobs=True, top_logprobs=5, request_id="slow-reader")
            call = stub.StreamChatCompletion(req, timeout=120)
            next(call)
            # The flow-control windows fill (gRPC grows them with its BDP
            # estimate), then the stream's writes block and generation stops.
            samples = [engine.progress["slow-reader"]]
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                time.sleep(1.0)
                samples.append(engine.progress["slow-reader"])
                if samples[-1] == samples[-2] == samples[-3]:
                    break
            second = samples[-1]
            assert samples[-1] == samples[-2], f"the engine kept producing: {samples}"
            assert second < 100_000, f"{second} tokens buffered for a stalled reader"
            # reading again resumes generation
            for _ in range(second + 5000):
                next(call)
                if engine.progress["slow-reader"] > second:
                    break
            assert engine.progress["slow-reader"] > second
            call.cancel()
