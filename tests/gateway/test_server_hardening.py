"""The server's hardening seen through the gateway (fake engine): the API key
(the openai SDK's `Authorization: Bearer` header), a TLS upstream, and
admission refusals with their retry hint."""

from __future__ import annotations

import grpc
import httpx
import openai
import pytest

from tests.cases import self_signed
from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import chat_body
from tests.servers import fake_serving
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import models_pb2, service_pb2_grpc


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    """A TLS server that wants an API key, and Envoy talking TLS to it."""
    cert, key, _ = self_signed(tmp_path_factory.mktemp("tls"))
    with fake_serving(
        served_model_name="fake-model", api_key="s3cret", tls_cert=cert, tls_key=key
    ) as server:
        envoy = start_gateway(
            server.address, upstream_tls_ca=cert, upstream_tls_server_name="localhost"
        )
        yield envoy
        stop_gateway(envoy)


def test_openai_sdk_api_key_over_a_tls_upstream(secured) -> None:
    client = openai.OpenAI(base_url=f"{secured.url}/v1", api_key="s3cret", max_retries=0)
    r = client.chat.completions.create(model="fake-model",
                                       messages=[{"role": "user", "content": "hi"}], max_tokens=2)
    assert r.choices[0].message.content == "He"
    chunks = list(client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=2,
        stream=True))
    assert len(chunks) == 3


def test_wrong_api_key_is_401(secured) -> None:
    client = openai.OpenAI(base_url=f"{secured.url}/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        client.chat.completions.create(
            model="fake-model", messages=[{"role": "user", "content": "hi"}]
        )
    assert info.value.status_code == 401
    body = info.value.body
    assert body["type"] == "authentication_error" and body["param"] == "authorization"


def test_grpc_with_key_through_envoy_to_tls(secured) -> None:
    with grpc.insecure_channel(secured.address) as channel:
        stats = service_pb2_grpc.TokenwireServiceStub(channel).GetStats(
            models_pb2.GetStatsRequest(), timeout=5, metadata=(("authorization", "Bearer s3cret"),))
    assert stats.model == "fake-model"


@pytest.fixture(scope="module")
def one_slot():
    """A server that admits one request at a time (slow tokens keep it busy)."""
    with fake_serving(FakeEngine(max_model_len=512, token_delay=0.05),
                      served_model_name="fake-model", max_concurrent_requests=1) as server:
        envoy = start_gateway(server.address)
        yield envoy
        stop_gateway(envoy)


def test_admission_refusal_is_429_with_retry_after(one_slot) -> None:
    busy = chat_body(max_tokens=200, ignore_eos=True, stream=True)
    with httpx.Client(base_url=one_slot.url, timeout=30) as http:
        with http.stream("POST", "/v1/chat/completions", json=busy) as holding:
            lines = holding.iter_lines()
            while '"content":"H"' not in next(lines):  # a token: the engine holds the slot
                pass
            refused = http.post("/v1/chat/completions", json=chat_body(max_tokens=2))
            assert refused.status_code == 429, refused.text
            assert refused.headers["retry-after-ms"] == "1000"
            assert refused.headers["retry-after"] == "1"
            error = refused.json()["error"]
            assert (error["type"], error["code"]) == ("rate_limit_error", "too_many_requests")
            client = openai.OpenAI(base_url=f"{one_slot.url}/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.RateLimitError):
                client.chat.completions.create(
                    model="fake-model", messages=[{"role": "user", "content": "hi"}])
            # A stream is refused before its first chunk: a plain 429 too.
            streamed = http.post("/v1/chat/completions", json=chat_body(max_tokens=2, stream=True))
            assert streamed.status_code == 429, streamed.text
            assert streamed.headers["retry-after"] == "1"
            assert streamed.json()["error"]["code"] == "too_many_requests"
