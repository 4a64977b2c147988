"""Names on the wire, defined once for the client, the server and the gateway.

Header (gRPC metadata) and trailer names, and how a failed call's gRPC
status reads over HTTP (status code, OpenAI error ``type``). Plain data, no
imports: the gateway's config builder writes every UPPER_CASE name of this
module into the Lua module ``wire`` its filters ``require``
(tokenwire.gateway.lua_bundle), so the Lua filters hold no copies; a test
(tests/pure/test_lua.py) holds the two equal and the Lua files free of
literal copies.
"""

from __future__ import annotations

# Request metadata a caller may send -----------------------------------------
SESSION_HEADER = "x-session-id"  # vLLM's and vllm-router's X-Session-ID
MIN_VERSION_HEADER = "x-min-weight-version"  # the oldest weight version a call accepts
# Weight bounds (server: core/weight_bounds.py); a body field of the same name wins.
EXACT_VERSION_HEADER = "x-exact-weight-version"  # the only weight version a call runs on
MAX_LAG_HEADER = "x-max-weight-lag"  # the most updates a call's oldest token may fall behind
DP_RANK_HEADERS = ("x-data-parallel-rank", "x-dynamo-dp-rank")  # vLLM's, Dynamo's
# Routers' session keys that trainers send (slime: SGLang Model Gateway's
# consistent hashing); without X-Session-ID they are the fleet's affinity key.
ROUTING_KEY_HEADERS = ("x-smg-routing-key",)
# The tenant, believed only from a trusted hop (the gateway strips it from callers).
TENANT_HEADER = "x-tenant-id"
AUTHORIZATION_HEADER = "authorization"  # "Bearer <key>"

# Set by the gateway only ------------------------------------------------------
# The affinity key derived from a REST body (affinity_key.lua); a caller's
# own copy is dropped on arrival.
AFFINITY_HEADER = "x-tokenwire-affinity"
# What marks a call as having come through a proxy (server: auth.py).
PROXY_HEADERS = ("x-forwarded-for", "forwarded")
PROXY_HEADER_PREFIX = "x-envoy-"  # ... and every header with this prefix

# Trailers beside grpc-status on a failed call: plain text a proxy reads
# without decoding protobuf (the rich google.rpc.Status carries the same).
REASON_TRAILER = "tokenwire-reason"  # the ErrorInfo reason (UPPER_SNAKE)
PARAM_TRAILER = "tokenwire-param"  # the request field at fault
RETRY_TRAILER = "retry-after-ms"  # when a retry may succeed (also OpenAI's HTTP header)
RETRY_AFTER_HEADER = "retry-after"  # HTTP's, in whole seconds
# "1": refused before any engine work, so a gateway may retry elsewhere.
RETRY_SAFE_TRAILER = "tokenwire-retry-safe"

# Between one server's serving processes (--api-server-count; control/relay.py).
RELAY_TOKEN_HEADER = "x-tokenwire-relay-token"  # the launch's shared relay token
LOCAL_ABORT_HEADER = "x-tokenwire-local-abort"  # an AbortRequests for that process only
# A GetControlState from process 0 asking a process to read its state now (weight bounds).
RELAY_REFRESH_HEADER = "x-tokenwire-relay-refresh"

# A failed call over HTTP ------------------------------------------------------
# gRPC status code (number) -> HTTP status (Envoy's and grpc-gateway's mapping).
HTTP_STATUS = {
    0: 200, 1: 499, 2: 500, 3: 400, 4: 504, 5: 404, 6: 409, 7: 403, 8: 429, 9: 400, 10: 409,
    11: 400, 12: 501, 13: 500, 14: 503, 15: 500, 16: 401,
}
UNKNOWN_HTTP_STATUS = 500  # a code not in HTTP_STATUS
# gRPC status code (number) -> its name as OpenAI's error `code` (lower case).
GRPC_CODE_NAMES = {
    0: "ok", 1: "cancelled", 2: "unknown", 3: "invalid_argument", 4: "deadline_exceeded",
    5: "not_found", 6: "already_exists", 7: "permission_denied", 8: "resource_exhausted",
    9: "failed_precondition", 10: "aborted", 11: "out_of_range", 12: "unimplemented",
    13: "internal", 14: "unavailable", 15: "data_loss", 16: "unauthenticated",
}
# HTTP status -> OpenAI's error `type`; any other status: DEFAULT_ERROR_TYPE.
ERROR_TYPES = {
    400: "invalid_request_error", 404: "invalid_request_error", 409: "invalid_request_error",
    413: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
    429: "rate_limit_error",
}
DEFAULT_ERROR_TYPE = "server_error"
# HTTP status -> Anthropic's error `type` (the Messages API's routes, /v1/messages*);
# any other status: ANTHROPIC_DEFAULT_ERROR_TYPE.
ANTHROPIC_ERROR_TYPES = {
    400: "invalid_request_error", 409: "invalid_request_error", 422: "invalid_request_error",
    401: "authentication_error", 403: "permission_error", 404: "not_found_error",
    413: "request_too_large", 429: "rate_limit_error", 503: "overloaded_error",
    529: "overloaded_error",
}
ANTHROPIC_DEFAULT_ERROR_TYPE = "api_error"
ANTHROPIC_PATH_PREFIX = "/v1/messages"  # the routes whose errors take Anthropic's shape


def http_status(grpc_code: int) -> int:
    """The HTTP status of a failed call with this gRPC status code (number)."""
    return HTTP_STATUS.get(grpc_code, UNKNOWN_HTTP_STATUS)


def error_type(http: int) -> str:
    """OpenAI's error ``type`` for an HTTP status."""
    return ERROR_TYPES.get(http, DEFAULT_ERROR_TYPE)


def anthropic_error_type(http: int) -> str:
    """Anthropic's error ``type`` for an HTTP status."""
    return ANTHROPIC_ERROR_TYPES.get(http, ANTHROPIC_DEFAULT_ERROR_TYPE)
