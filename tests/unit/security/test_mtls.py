"""mTLS on the gRPC listener with vLLM's flags (--ssl-ca-certs, --ssl-cert-reqs 2;
fake engine): a client with a certificate from the CA is served; one with
no certificate, or with one from another CA, is not."""

from __future__ import annotations

import grpc
import pytest

from tests.pki import CA
from tests.rpc import chat_request
from tests.servers import ThreadServer
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.runtime.transport import server_credentials
from tokenwire.v1 import service_pb2_grpc

_LOCALHOST = (("grpc.ssl_target_name_override", "localhost"),)


def _call(address: str, ca_pem: bytes, client=None) -> str:
    creds = grpc.ssl_channel_credentials(
        root_certificates=ca_pem,
        private_key=client.key_pem if client else None,
        certificate_chain=client.cert_pem if client else None)
    with grpc.secure_channel(address, creds, options=_LOCALHOST) as ch:
        resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
            chat_request(max_tokens=2), timeout=10)
    return resp.choices[0].finish_reason


def test_grpc_mtls_needs_a_client_certificate_from_the_ca(tmp_path) -> None:
    ca, other = CA(tmp_path, "ca"), CA(tmp_path, "other-ca")
    server_cert = ca.issue("server", server=True)
    settings = ServerSettings(engine="fake", port=0, max_model_len=512,
                              tls_cert=server_cert.cert, tls_key=server_cert.key,
                              ssl_ca_certs=ca.me.cert, ssl_cert_reqs=2)
    server = ThreadServer(settings, FakeEngine(max_model_len=512)).start()
    try:
        assert _call(server.address, ca.pem, ca.issue("alice")) == "length"
        for client in (None, other.issue("mallory")):  # no certificate; another CA's
            with pytest.raises(grpc.RpcError) as exc_info:
                _call(server.address, ca.pem, client)
            assert exc_info.value.code() == grpc.StatusCode.UNAVAILABLE
        assert _call(server.address, ca.pem, ca.issue("bob")) == "length"  # still serving
    finally:
        server.stop()


def test_cert_reqs_zero_asks_for_no_certificate(tmp_path) -> None:
    """vLLM's default (0, CERT_NONE) with a CA given: clients need none."""
    ca = CA(tmp_path, "ca")
    server_cert = ca.issue("server", server=True)
    settings = ServerSettings(engine="fake", port=0, max_model_len=512,
                              tls_cert=server_cert.cert, tls_key=server_cert.key,
                              ssl_ca_certs=ca.me.cert)
    server = ThreadServer(settings, FakeEngine(max_model_len=512)).start()
    try:
        assert _call(server.address, ca.pem) == "length"
    finally:
        server.stop()


def test_optional_client_certificates_are_refused_on_grpc(tmp_path) -> None:
    ca = CA(tmp_path, "ca")
    server_cert = ca.issue("server", server=True)
    settings = ServerSettings(tls_cert=server_cert.cert, tls_key=server_cert.key,
                              ssl_ca_certs=ca.me.cert, ssl_cert_reqs=1)
    with pytest.raises(ValueError, match=r"CERT_OPTIONAL.*gateway"):
        server_credentials(settings)
