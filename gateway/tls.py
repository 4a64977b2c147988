"""TLS in the gateway's Envoy config: the listener's (its certificate, and
client certificates as vLLM's --ssl-ca-certs / --ssl-cert-reqs ask) and the
upstream cluster's (trusting a TLS server's CA)."""

from __future__ import annotations

import pathlib
from typing import Any

from tokenwire.gateway.settings import GatewaySettings

_TYPE = "@type"


def upstream(settings: GatewaySettings) -> dict[str, Any] | None:
    """The cluster's TLS transport socket (gRPC needs ALPN h2), or None."""
    if not settings.upstream_tls_ca:
        return None
    tls: dict[str, Any] = {
        _TYPE: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "common_tls_context": {
            "alpn_protocols": ["h2"],
            "validation_context": {
                "trusted_ca": {"filename": str(pathlib.Path(settings.upstream_tls_ca).resolve())}
            },
        },
    }
    if settings.upstream_tls_server_name:
        tls["sni"] = settings.upstream_tls_server_name
    return {"name": "envoy.transport_sockets.tls", "typed_config": tls}


def listener(settings: GatewaySettings) -> dict[str, Any] | None:
    """The listener's TLS transport socket (ALPN h2 for gRPC, http/1.1 for
    REST), or None. With --ssl-cert-reqs 1 or 2 (vLLM's mTLS flags) Envoy
    asks for a client certificate and checks it against --ssl-ca-certs; 2
    also refuses a connection without one (0, vLLM's default: none asked
    for, even with a CA)."""
    if not settings.tls_cert:
        return None
    tls: dict[str, Any] = {
        _TYPE: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
        "common_tls_context": {
            "alpn_protocols": ["h2", "http/1.1"],
            "tls_certificates": [{
                "certificate_chain": {"filename": str(pathlib.Path(settings.tls_cert).resolve())},
                "private_key": {"filename": str(pathlib.Path(settings.tls_key).resolve())},
            }],
        },
    }
    if settings.ssl_cert_reqs:
        tls["common_tls_context"]["validation_context"] = {
            "trusted_ca": {"filename": str(pathlib.Path(settings.ssl_ca_certs).resolve())}}
        tls["require_client_certificate"] = settings.ssl_cert_reqs == 2
    return {"name": "envoy.transport_sockets.tls", "typed_config": tls}
