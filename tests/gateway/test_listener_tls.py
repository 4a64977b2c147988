"""The gateway listener over TLS (self-signed certificate made in the test):
REST and native gRPC both work over it; plaintext does not."""

from __future__ import annotations

import grpc
import httpx
import pytest

from tests.cases import self_signed
from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import chat_body
from tests.rpc import chat_request
from tokenwire.v1 import service_pb2_grpc


def test_rest_and_grpc_over_tls(flaky_server, tmp_path) -> None:
    cert, key, pem = self_signed(tmp_path)
    envoy = start_gateway(flaky_server.address, tls_cert=cert, tls_key=key)
    try:
        assert envoy.url.startswith("https://")
        url = envoy.url.replace("127.0.0.1", "localhost")
        r = httpx.post(f"{url}/v1/chat/completions", json=chat_body(max_tokens=3),
                       verify=str(tmp_path / "cert.pem"), timeout=30)
        assert r.status_code == 200 and r.json()["choices"][0]["finish_reason"] == "length"
        with pytest.raises(httpx.HTTPError):
            httpx.post(envoy.url.replace("https", "http") + "/v1/chat/completions",
                       json=chat_body(max_tokens=3), timeout=10)
        creds = grpc.ssl_channel_credentials(root_certificates=pem)
        with grpc.secure_channel(envoy.address, creds,
                                 options=(("grpc.ssl_target_name_override", "localhost"),)) as ch:
            resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
                chat_request(model="fake-model", max_tokens=3), timeout=30)
            assert resp.choices[0].finish_reason == "length"
    finally:
        stop_gateway(envoy)
