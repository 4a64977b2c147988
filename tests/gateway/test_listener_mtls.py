"""mTLS on the gateway's listener with vLLM's flags (--ssl-ca-certs,
--ssl-cert-reqs), through the real Envoy: REST (httpx, the OpenAI SDK) and
native gRPC with a client certificate from the CA are served; without one
(CERT_REQUIRED), or with another CA's, the connection is refused; with
CERT_OPTIONAL a client without a certificate is served and a wrong one is
still refused."""

from __future__ import annotations

import os
import signal
import ssl
import subprocess
import sys

import grpc
import httpx
import openai
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.gateway.sse import chat_body
from tests.pki import CA, Issued
from tests.rpc import chat_request
from tests.servers import free_port
from tokenwire.v1 import service_pb2_grpc

_LOCALHOST = (("grpc.ssl_target_name_override", "localhost"),)


def _context(ca: CA, client: Issued | None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=ca.me.cert)
    if client is not None:
        ctx.load_cert_chain(client.cert, client.key)
    return ctx


def _rest(url: str, ca: CA, client: Issued | None) -> int:
    r = httpx.post(f"{url}/v1/chat/completions", json=chat_body(max_tokens=3),
                   verify=_context(ca, client), timeout=30)
    return r.status_code


def _grpc(address: str, ca: CA, client: Issued | None) -> str:
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca.pem, private_key=client.key_pem if client else None,
        certificate_chain=client.cert_pem if client else None)
    with grpc.secure_channel(address, creds, options=_LOCALHOST) as ch:
        return service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
            chat_request(model="fake-model", max_tokens=3), timeout=30).choices[0].finish_reason


@pytest.fixture
def pki(tmp_path):
    ca, other = CA(tmp_path, "ca"), CA(tmp_path, "other-ca")
    return ca, other, ca.issue("gateway", server=True)


def test_required_client_certificates(flaky_server, pki) -> None:
    ca, other, server = pki
    envoy = start_gateway(flaky_server.address, tls_cert=server.cert, tls_key=server.key,
                          ssl_ca_certs=ca.me.cert, ssl_cert_reqs=2)
    url = envoy.url.replace("127.0.0.1", "localhost")
    try:
        alice = ca.issue("alice")
        assert _rest(url, ca, alice) == 200
        assert _grpc(envoy.address, ca, alice) == "length"
        sdk = openai.OpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0,
                            http_client=httpx.Client(verify=_context(ca, alice)))
        r = sdk.chat.completions.create(model="fake-model", max_tokens=2,
                                        messages=[{"role": "user", "content": "hi"}])
        assert r.choices[0].finish_reason == "length"
        for client in (None, other.issue("mallory")):  # none; another CA's
            with pytest.raises(httpx.HTTPError):
                _rest(url, ca, client)
            with pytest.raises(grpc.RpcError) as exc_info:
                _grpc(envoy.address, ca, client)
            assert exc_info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert _rest(url, ca, alice) == 200  # still serving
    finally:
        stop_gateway(envoy)


def test_optional_client_certificates(flaky_server, pki) -> None:
    ca, other, server = pki
    envoy = start_gateway(flaky_server.address, tls_cert=server.cert, tls_key=server.key,
                          ssl_ca_certs=ca.me.cert, ssl_cert_reqs=1)
    url = envoy.url.replace("127.0.0.1", "localhost")
    try:
        assert _rest(url, ca, None) == 200  # asked for, not required
        assert _rest(url, ca, ca.issue("alice")) == 200
        with pytest.raises(httpx.HTTPError):  # sent, and not from the CA
            _rest(url, ca, other.issue("mallory"))
    finally:
        stop_gateway(envoy)


def test_up_takes_vllms_tls_flags_for_the_rest_listener(pki) -> None:
    """`tokenwire up --ssl-certfile --ssl-keyfile --ssl-ca-certs --ssl-cert-reqs 2`
    (vLLM's) put mTLS on the gateway's listener, the one a vLLM user calls;
    the servers' gRPC port stays plaintext (tokenwire's --tls-* are its)."""
    ca, _, server = pki
    grpc_port, rest_port = free_port(), free_port()
    cmd = [sys.executable, "-m", "tokenwire.cli", "up", "--engine", "fake",
           "--served-model-name", "fake-model", "--port", str(rest_port),
           "--grpc-port", str(grpc_port), "--ssl-certfile", server.cert,
           "--ssl-keyfile", server.key, "--ssl-ca-certs", ca.me.cert, "--ssl-cert-reqs", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=os.environ.copy())
    url = f"https://localhost:{rest_port}"
    alice = ca.issue("alice")
    try:
        import time

        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, proc.stdout.read().decode()[-4000:]
            try:
                if httpx.get(f"{url}/health", verify=_context(ca, alice), timeout=2).is_success:
                    break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.3)
        assert _rest(url, ca, alice) == 200
        with pytest.raises(httpx.HTTPError):
            _rest(url, ca, None)
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:  # the server's own port
            resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
                chat_request(model="fake-model", max_tokens=2), timeout=10)
            assert resp.choices[0].finish_reason == "length"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_gateway_takes_vllms_spellings_and_refuses_what_it_cannot_honour() -> None:
    import argparse

    from tokenwire.gateway import config
    from tokenwire.gateway.settings import GatewaySettings, add_arguments, from_namespace

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    s = from_namespace(parser.parse_args(["--ssl-certfile", "c.pem", "--ssl-keyfile", "k.pem",
                                          "--ssl-ca-certs", "ca.pem", "--ssl-cert-reqs", "2"]))
    assert (s.tls_cert, s.tls_key, s.ssl_ca_certs, s.ssl_cert_reqs) == (
        "c.pem", "k.pem", "ca.pem", 2)
    tls = config.build(s)["static_resources"]["listeners"][0]["filter_chains"][0][
        "transport_socket"]["typed_config"]
    assert tls["require_client_certificate"] is True
    assert tls["common_tls_context"]["validation_context"]["trusted_ca"]["filename"].endswith(
        "ca.pem")
    none = GatewaySettings(tls_cert="c.pem", tls_key="k.pem", ssl_ca_certs="ca.pem")
    tls = config.build(none)["static_resources"]["listeners"][0]["filter_chains"][0][
        "transport_socket"]["typed_config"]  # vLLM's 0: no certificate asked for
    assert "validation_context" not in tls["common_tls_context"]
    for bad, rule in ((GatewaySettings(tls_cert="c", tls_key="k", ssl_cert_reqs=2),
                       "needs --ssl-ca-certs"),
                      (GatewaySettings(ssl_ca_certs="ca.pem", ssl_cert_reqs=2), "over TLS"),
                      (GatewaySettings(tls_cert="c", tls_key="k", ssl_cert_reqs=5), "must be 0")):
        with pytest.raises(ValueError, match=rule):
            config.build(bad)
