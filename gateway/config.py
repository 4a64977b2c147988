"""Render the Envoy configuration from ``envoy.yaml.tmpl`` and the settings."""

from __future__ import annotations

import json
import pathlib
import string

from tokenwire.gateway.settings import PACKAGE_DIR, GatewaySettings

TEMPLATE = PACKAGE_DIR / "envoy.yaml.tmpl"
LUA_DIR = PACKAGE_DIR / "lua"

# Envoy's own replies (not the server's) in the OpenAI error shape:
# HTTP status -> (type, code, message). "%LOCAL_REPLY_BODY%" is Envoy's text.
LOCAL_REPLIES: dict[int, tuple[str, str, str]] = {
    400: ("invalid_request_error", "invalid_request_body", "%LOCAL_REPLY_BODY%"),
    404: ("invalid_request_error", "unknown_url", "Invalid URL (%REQ(:METHOD)% %REQ(:PATH)%)"),
    413: ("invalid_request_error", "request_too_large", "the request body is larger than {limit} bytes"),
    429: ("rate_limit_error", "rate_limited", "%LOCAL_REPLY_BODY%"),
    502: ("server_error", "bad_gateway", "%LOCAL_REPLY_BODY%"),
    503: ("server_error", "upstream_unavailable", "%LOCAL_REPLY_BODY%"),
    504: ("server_error", "gateway_timeout", "%LOCAL_REPLY_BODY%"),
}
FALLBACK_REPLY = ("server_error", "gateway_error", "%LOCAL_REPLY_BODY%")

# A native gRPC call (content-type application/grpc, path not rewritten by
# the transcoder) keeps Envoy's plain gRPC status reply.
_NOT_NATIVE_GRPC = {
    "or_filter": {
        "filters": [
            {"header_filter": {"header": {
                "name": "content-type", "string_match": {"prefix": "application/grpc"},
                "invert_match": True, "treat_missing_header_as_empty": True,
            }}},
            {"header_filter": {"header": {"name": "x-envoy-original-path", "present_match": True}}},
        ]
    }
}


def _status_filter(op: str, status: int) -> dict:
    value = {"default_value": status, "runtime_key": f"tokenwire.local_reply.{op.lower()}{status}"}
    return {"status_code_filter": {"comparison": {"op": op, "value": value}}}


def _mapper(status_filter: dict, reply: tuple[str, str, str]) -> dict:
    kind, code, message = reply
    error = {"message": message, "type": kind, "param": None, "code": code}
    return {
        "filter": {"and_filter": {"filters": [status_filter, _NOT_NATIVE_GRPC]}},
        "body_format_override": {
            "json_format": {"error": error},
            "content_type": "application/json",
        },
    }


def local_reply_mappers(settings: GatewaySettings) -> list[dict]:
    mappers = []
    for status, (kind, code, message) in LOCAL_REPLIES.items():
        reply = (kind, code, message.format(limit=settings.max_request_bytes))
        mappers.append(_mapper(_status_filter("EQ", status), reply))
    mappers.append(_mapper(_status_filter("GE", 400), FALLBACK_REPLY))
    return mappers


def _admin_block(settings: GatewaySettings) -> str:
    if settings.admin_port < 0:
        return ""
    address = {"socket_address": {"address": settings.admin_host, "port_value": settings.admin_port}}
    return "admin:\n  address: " + json.dumps(address)


def _upstream_tls_block(settings: GatewaySettings) -> str:
    """The cluster's TLS transport socket (gRPC needs ALPN h2), or nothing."""
    if not settings.upstream_tls_ca:
        return ""
    tls: dict = {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
        "common_tls_context": {
            "alpn_protocols": ["h2"],
            "validation_context": {
                "trusted_ca": {"filename": str(pathlib.Path(settings.upstream_tls_ca).resolve())}
            },
        },
    }
    if settings.upstream_tls_server_name:
        tls["sni"] = settings.upstream_tls_server_name
    socket = {"name": "envoy.transport_sockets.tls", "typed_config": tls}
    return "    transport_socket: " + json.dumps(socket)


def _listen_tls_block(settings: GatewaySettings) -> str:
    """The listener's TLS transport socket (ALPN h2 for gRPC, http/1.1 for
    REST), or nothing."""
    if not settings.tls_cert:
        return ""
    tls = {
        "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext",
        "common_tls_context": {
            "alpn_protocols": ["h2", "http/1.1"],
            "tls_certificates": [{
                "certificate_chain": {"filename": str(pathlib.Path(settings.tls_cert).resolve())},
                "private_key": {"filename": str(pathlib.Path(settings.tls_key).resolve())},
            }],
        },
    }
    return "transport_socket: " + json.dumps({"name": "envoy.transport_sockets.tls", "typed_config": tls})


def services(settings: GatewaySettings) -> list[str]:
    """The gRPC services the transcoder exposes over REST: inference, and the
    ControlService only when the operator turned control on."""
    names = ["tokenwire.v1.TokenwireService"]
    if settings.control:
        names.append("tokenwire.v1.ControlService")
    return names


def render(settings: GatewaySettings) -> str:
    """The Envoy YAML for these settings."""
    mappers = "\n".join("            - " + json.dumps(m) for m in local_reply_mappers(settings))
    values = {
        "admin": _admin_block(settings),
        "listen_host": settings.listen_host,
        "listen_port": settings.listen_port,
        "upstream_host": settings.upstream_host,
        "upstream_port": settings.upstream_port,
        "upstream_tls": _upstream_tls_block(settings),
        "listen_tls": _listen_tls_block(settings),
        "descriptor": str(pathlib.Path(settings.descriptor).resolve()),
        "lua_dir": str(LUA_DIR),
        "max_request_bytes": settings.max_request_bytes,
        "stream_idle_timeout_s": settings.stream_idle_timeout_s,
        "max_requests": settings.max_requests,
        "max_connections": settings.max_connections,
        "local_reply_mappers": mappers,
        "services": ", ".join(services(settings)),
    }
    return string.Template(TEMPLATE.read_text()).substitute(values)


def write(settings: GatewaySettings, directory: pathlib.Path) -> pathlib.Path:
    """Render into ``directory/envoy.yaml`` and return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "envoy.yaml"
    path.write_text(render(settings))
    return path
