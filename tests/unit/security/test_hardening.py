"""Admission control, API key, TLS, metrics and engine death on the fake engine."""

from __future__ import annotations

import threading
import time
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.cases import self_signed
from tests.rpc import chat_request, error_info, retry_info
from tests.servers import ThreadServer, fake_serving, free_port
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import models_pb2, service_pb2_grpc

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


def _server(**kw) -> ThreadServer:
    settings = ServerSettings(engine="fake", port=0, max_model_len=512, **kw)
    return ThreadServer(
        settings, FakeEngine(max_model_len=512, token_delay=kw.pop("delay", 0.0))
    ).start()


def test_admission_limit_refuses_with_retry_hint(transport) -> None:
    engine = FakeEngine(max_model_len=512, token_delay=0.02)
    with fake_serving(engine, max_concurrent_requests=2, grpc_transport=transport) as server:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            calls = [
                stub.StreamChatCompletion(chat_request(ignore_eos=True, max_tokens=100), timeout=30)
                for _ in range(2)
            ]
            for c in calls:
                next(c)
            with pytest.raises(grpc.RpcError) as exc_info:
                stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
            err = exc_info.value
            assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert error_info(err).reason == "TOO_MANY_REQUESTS"
            assert retry_info(err).retry_delay.ToMilliseconds() == 1000
            # A refused stream fails before its first chunk (REST: a plain 429).
            got = []
            with pytest.raises(grpc.RpcError) as exc_info:
                for chunk in stub.StreamChatCompletion(chat_request(max_tokens=2), timeout=10):
                    got.append(chunk)
            assert exc_info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and got == []
            for c in calls:
                c.cancel()
            deadline = time.monotonic() + 5
            while engine.num_unfinished_requests() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10).choices


def test_admitted_tokens_limit() -> None:
    with fake_serving(
        FakeEngine(max_model_len=512, token_delay=0.02), max_admitted_tokens=300
    ) as server:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            first = stub.StreamChatCompletion(
                chat_request(ignore_eos=True, max_tokens=200), timeout=30
            )
            next(first)
            with pytest.raises(grpc.RpcError) as exc_info:
                stub.CreateChatCompletion(chat_request(max_tokens=200), timeout=10)
            assert error_info(exc_info.value).reason == "TOO_MANY_TOKENS"
            first.cancel()


def test_api_key(transport) -> None:
    server = _server(api_key="s3cret", grpc_transport=transport)
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            for meta in [(), (("authorization", "Bearer wrong"),), (("authorization", "s3cret"),)]:
                with pytest.raises(grpc.RpcError) as exc_info:
                    stub.CreateChatCompletion(chat_request(max_tokens=2), metadata=meta, timeout=10)
                assert exc_info.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert error_info(exc_info.value).metadata["param"] == "authorization"
            with pytest.raises(grpc.RpcError) as exc_info:
                list(stub.StreamChatCompletion(chat_request(max_tokens=2), timeout=10))
            assert exc_info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            ok = stub.CreateChatCompletion(
                chat_request(max_tokens=2),
                metadata=(("authorization", "Bearer s3cret"),),
                timeout=10,
            )
            assert ok.choices
            # probes stay open by default, and say nothing but the status ...
            health = stub.GetHealth(models_pb2.GetHealthRequest(), timeout=5)
            assert health.status == "SERVING" and list(health.ListFields()) == [
                (models_pb2.GetHealthResponse.DESCRIPTOR.fields_by_name["status"], "SERVING")]
            # ... while what identifies the process (worker_id, the engine's
            # config with the model path) needs the key.
            with pytest.raises(grpc.RpcError) as exc_info:
                stub.GetStats(models_pb2.GetStatsRequest(), timeout=5)
            assert exc_info.value.code() == grpc.StatusCode.UNAUTHENTICATED
            h = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert h.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        server.stop()


def test_api_key_closed_probes(transport) -> None:
    server = _server(api_key="k", open_probes=False, grpc_transport=transport)
    try:
        with grpc.insecure_channel(server.address) as ch:
            with pytest.raises(grpc.RpcError) as exc_info:
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert exc_info.value.code() == grpc.StatusCode.UNAUTHENTICATED
    finally:
        server.stop()


def test_tls(tmp_path, transport) -> None:
    cert, key, pem = self_signed(tmp_path)
    server = _server(tls_cert=cert, tls_key=key, grpc_transport=transport)
    try:
        assert server.transport == "aio"  # native serves no TLS: the server fell back
        creds = grpc.ssl_channel_credentials(root_certificates=pem)
        with grpc.secure_channel(server.address, creds,
                                 options=(("grpc.ssl_target_name_override", "localhost"),)) as ch:
            resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
                chat_request(max_tokens=2), timeout=10)
            assert resp.choices
        with grpc.insecure_channel(server.address) as ch, pytest.raises(grpc.RpcError):
            service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
                chat_request(max_tokens=2), timeout=5)
    finally:
        server.stop()


def test_metrics_endpoint(transport) -> None:
    port = free_port()
    server = _server(metrics_port=port, grpc_transport=transport)
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            resp = stub.CreateChatCompletion(chat_request(return_token_ids=True, session_id="s1"),
                                             timeout=10)
            with pytest.raises(grpc.RpcError):
                stub.CreateChatCompletion(chat_request(n=0), timeout=10)
        ok = 'tokenwire_requests_total{code="OK",method="CreateChatCompletion"} 1.0'
        refused = (
            'tokenwire_requests_total{code="INVALID_ARGUMENT",method="CreateChatCompletion"} 1.0'
        )
        # The interceptor counts a call when its handler has ended, which for
        # an aborted call can be just after the client saw the status.
        deadline = time.monotonic() + 10
        while True:
            text = (
                urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)
                .read()
                .decode()
            )
            if (ok in text and refused in text) or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert ok in text
        assert refused in text
        completion = len(resp.choices[0].token_ids)
        assert f"tokenwire_completion_tokens_total {completion}.0" in text  # warm-up not counted
        assert "tokenwire_time_to_first_token_seconds_count 1.0" in text
        assert "tokenwire_requests_in_flight 0.0" in text
        assert "tokenwire_session_requests_total 1.0" in text  # the request that named a session
    finally:
        server.stop()


def test_engine_death_turns_health_not_serving(transport) -> None:
    import asyncio

    from tokenwire.server.runtime.app import watch_engine

    engine = FakeEngine(max_model_len=512)
    with fake_serving(engine, grpc_transport=transport) as server:
        dead = threading.Event()

        async def watch() -> None:
            flag = asyncio.Event()
            await watch_engine(server._running, 0.05, flag)  # type: ignore[arg-type]
            if flag.is_set():
                dead.set()

        future = asyncio.run_coroutine_threadsafe(watch(), server._loop)  # type: ignore[arg-type]
        engine.healthy = False
        future.result(5)
        assert dead.is_set()
        with grpc.insecure_channel(server.address) as ch:
            h = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
            assert h.status == health_pb2.HealthCheckResponse.NOT_SERVING
            with pytest.raises(grpc.RpcError) as exc_info:
                service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
                    chat_request(max_tokens=2), timeout=5)
            assert exc_info.value.code() == grpc.StatusCode.UNAVAILABLE
