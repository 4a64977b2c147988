"""Envoy's own replies (no route, body too large, malformed JSON or wrong
types rejected by the transcoder, upstream down) in OpenAI's error shape:
the connection manager's ``local_reply_config`` mappers. Native gRPC calls
keep Envoy's plain gRPC status reply. The error ``type`` of a status is
:func:`tokenwire.wire.error_type`, as for the server's own errors. On the
Anthropic Messages routes (/v1/messages*) the replies take Anthropic's
shape (``{"type": "error", "error": {"type", "message"}}``)."""

from __future__ import annotations

from tokenwire import wire
from tokenwire.gateway.lua_bundle import (
    INVALID_BODY_CODE,
    INVALID_TYPE_CODE,
    REST_METADATA,
    STRICT_PARAM,
)
from tokenwire.gateway.settings import GatewaySettings

# HTTP status -> (code, message). "%LOCAL_REPLY_BODY%" is Envoy's text.
LOCAL_REPLIES: dict[int, tuple[str, str]] = {
    400: (INVALID_BODY_CODE, "%LOCAL_REPLY_BODY%"),
    404: ("unknown_url", "Invalid URL (%REQ(:METHOD)% %REQ(:PATH)%)"),
    # Only the ControlService's refusals (control_routes.py) are Envoy's own 403.
    403: ("control_refused", "%LOCAL_REPLY_BODY%"),
    413: ("request_too_large", "the request body is larger than {limit} bytes"),
    429: ("rate_limited", "%LOCAL_REPLY_BODY%"),
    502: ("bad_gateway", "%LOCAL_REPLY_BODY%"),
    503: ("upstream_unavailable", "%LOCAL_REPLY_BODY%"),
    504: ("gateway_timeout", "%LOCAL_REPLY_BODY%"),
}
# Any other status >= 400 (one mapper for them all: one type).
FALLBACK_REPLY = (wire.DEFAULT_ERROR_TYPE, "gateway_error", "%LOCAL_REPLY_BODY%")

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


def _strict_type_mapper() -> dict:
    """openai_rest.lua's refusal of a value of the wrong JSON kind: the field
    it recorded (dynamic metadata REST_METADATA/STRICT_PARAM) is `param`."""
    recorded = {"metadata_filter": {"matcher": {
        "filter": REST_METADATA, "path": [{"key": STRICT_PARAM}],
        "value": {"present_match": True}}, "match_if_key_not_found": False}}
    error = {"message": "%LOCAL_REPLY_BODY%", "type": wire.error_type(400),
             "param": f"%DYNAMIC_METADATA({REST_METADATA}:{STRICT_PARAM})%",
             "code": INVALID_TYPE_CODE}
    return {
        "filter": {"and_filter": {"filters": [_status_filter("EQ", 400), recorded]}},
        "body_format_override": {
            "json_format": {"error": error},
            "content_type": "application/json",
        },
    }


# A request of the Anthropic Messages API (its path, or its path before the
# transcoder rewrote it): Envoy's own replies take Anthropic's error shape.
_ANTHROPIC_PATH = {
    "or_filter": {
        "filters": [
            {"header_filter": {"header": {
                "name": name, "string_match": {"prefix": wire.ANTHROPIC_PATH_PREFIX}}}}
            for name in (":path", "x-envoy-original-path")
        ]
    }
}


def _anthropic_mapper(status_filter: dict, http: int | None, message: str) -> dict:
    """Envoy's own reply on a Messages route: {"type": "error", "error":
    {"type", "message"}} (the status's Anthropic type; `http` None: the default)."""
    kind = wire.anthropic_error_type(http) if http else wire.ANTHROPIC_DEFAULT_ERROR_TYPE
    return {
        "filter": {"and_filter": {"filters": [status_filter, _ANTHROPIC_PATH]}},
        "body_format_override": {
            "json_format": {"type": "error", "error": {"type": kind, "message": message}},
            "content_type": "application/json",
        },
    }


def local_reply_mappers(settings: GatewaySettings) -> list[dict]:
    mappers = []
    for status, (_, message) in LOCAL_REPLIES.items():
        text = message.format(limit=settings.max_request_bytes)
        mappers.append(_anthropic_mapper(_status_filter("EQ", status), status, text))
    mappers.append(_anthropic_mapper(_status_filter("GE", 400), None, FALLBACK_REPLY[2]))
    mappers.append(_strict_type_mapper())
    for status, (code, message) in LOCAL_REPLIES.items():
        reply = (wire.error_type(status), code, message.format(limit=settings.max_request_bytes))
        mappers.append(_mapper(_status_filter("EQ", status), reply))
    mappers.append(_mapper(_status_filter("GE", 400), FALLBACK_REPLY))
    return mappers
