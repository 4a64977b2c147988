"""The gateway's ControlService routes (config.py puts them before the
others).

Without --control the ControlService is refused here. With
--inject-admin-key the gateway adds the admin key to a control call only
where a browser cannot have sent it: a web page on the trainer's host can
send a simple (no-CORS) request to the gateway's loopback port, and with
DNS rebinding read the answer. A browser's request carries an ``Origin``
(every POST) or ``Sec-Fetch-*`` headers (every request of a current
browser), a ``Mozilla/`` User-Agent it cannot change without a CORS
preflight (which the gateway never grants), the page's own Host name after
DNS rebinding, and, as a simple request, no JSON content type. So the key
goes only on native gRPC calls and on REST calls whose body is JSON
(``application/json``) or empty (``Content-Length: 0``, or a GET without
one: Envoy drops ``Transfer-Encoding`` before any filter, so a POST without
a length may be chunked), with none of those browser marks and a
Host that names this listener (localhost, 127.0.0.1, [::1] with its port);
any other control call gets 403, in OpenAI's error shape over REST
(local_replies.py), PERMISSION_DENIED over gRPC, and reaches no server.

The transcoder turns a REST call into ``POST /tokenwire.v1.ControlService/
<Method>`` with ``content-type: application/grpc`` before the route is
chosen, so the caller's content type is recorded first, by Envoy's
header-to-metadata filter (REQUEST_FACTS); the routes read it there, and
``x-envoy-original-path`` (set by the transcoder; a caller's own copy is
dropped on arrival) tells a transcoded call from a native one.
"""

from __future__ import annotations

import collections.abc
import re
from typing import Any

from tokenwire import wire
from tokenwire.gateway.settings import GatewaySettings

CONTROL_PREFIX = "/tokenwire.v1.ControlService/"
REQUEST_FACTS = "tokenwire.request"  # dynamic metadata: the caller's content type, length, method
MISSING = "none"  # the recorded value of a header the caller did not send
_TYPE = "@type"
GRPC = {"name": "content-type", "string_match": {"prefix": "application/grpc"}}
_TRANSCODED = {"name": "x-envoy-original-path", "present_match": True}
_NATIVE = {**_TRANSCODED, "invert_match": True}

# A header a browser adds to what a page sends, and what its presence says.
BROWSER_HEADERS = (
    ("origin", "carries an Origin header"),
    ("sec-fetch-site", "carries Sec-Fetch-* headers"),
    ("sec-fetch-mode", "carries Sec-Fetch-* headers"),
    ("sec-fetch-dest", "carries Sec-Fetch-* headers"),
)
BROWSER_AGENT = "Mozilla/"  # every browser's User-Agent starts so


def request_facts_filter() -> dict[str, Any]:
    """Envoy's header-to-metadata filter, first in the chain: the caller's
    content-type, content-length (MISSING when absent) and method as dynamic
    metadata REQUEST_FACTS, before the transcoder replaces them."""

    def rule(header: str, key: str) -> dict[str, Any]:
        where = {"metadata_namespace": REQUEST_FACTS, "key": key, "type": "STRING"}
        return {"header": header, "on_header_present": where,
                "on_header_missing": {**where, "value": MISSING}}

    return {"name": "tokenwire.request_facts", "typed_config": {
        _TYPE: "type.googleapis.com/envoy.extensions.filters.http.header_to_metadata.v3.Config",
        "request_rules": [rule("content-type", "content_type"),
                          rule("content-length", "content_length"),
                          rule(":method", "method")],
    }}


def own_hosts(settings: GatewaySettings) -> list[str]:
    """The Host values that name this listener: localhost, 127.0.0.1, [::1]
    and the listen address, with the listen port (also bare on a default port)."""
    host = settings.listen_host
    names = ["localhost", "127.0.0.1", "[::1]", f"[{host}]" if ":" in host else host]
    default_port = 443 if settings.tls_cert else 80
    ports = [f":{settings.listen_port}"] + ([""] if settings.listen_port == default_port else [])
    return list(dict.fromkeys(name + port for name in names for port in ports))


def _refuse(why: str, settings: GatewaySettings, *headers: dict[str, Any],
            case_sensitive: bool = False) -> dict[str, Any]:
    message = (
        f"this gateway adds the admin key only to control calls a browser cannot have sent, and "
        f"this call {why}. Send control as native gRPC, or as JSON (Content-Type: "
        f"application/json, or no body) without browser headers, to "
        f"http://127.0.0.1:{settings.listen_port}; or send the admin key yourself to a gateway "
        f"without --inject-admin-key")
    return {"match": {"prefix": CONTROL_PREFIX, "case_sensitive": case_sensitive,
                      "headers": [GRPC, *headers]},
            "direct_response": {"status": 403, "body": {"inline_string": message}}}


def _facts(**values: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"filter": REQUEST_FACTS, "path": [{"key": key}], "value": value}
            for key, value in values.items()]


def injecting_routes(settings: GatewaySettings, admin_key: str,
                     route: collections.abc.Callable[[], dict[str, Any]]) -> list[dict[str, Any]]:
    """--inject-admin-key: control calls of a browser's shape refused (403),
    the others with the admin key (over whatever the caller sent). ``route``
    makes a route to the server (config.py's, with its retry policy)."""
    hosts = "|".join(re.escape(h) for h in own_hosts(settings))
    refusals = [_refuse(why, settings, {"name": name, "present_match": True})
                for name, why in BROWSER_HEADERS]
    refusals.append(_refuse("comes with a browser's User-Agent", settings,
                            {"name": "user-agent", "string_match": {"prefix": BROWSER_AGENT}}))
    refusals.append(_refuse(
        f"names a Host that is not this gateway's own ({', '.join(own_hosts(settings))})",
        settings, {"name": ":authority", "string_match": {"safe_regex": {
            "regex": f"(?i)^({hosts})$"}}, "invert_match": True,
            "treat_missing_header_as_empty": True}))
    credential = {"header": {"key": wire.AUTHORIZATION_HEADER, "value": f"Bearer {admin_key}"},
                  "append_action": "OVERWRITE_IF_EXISTS_OR_ADD"}
    json_body = _facts(content_type={"string_match": {"prefix": "application/json",
                                                      "ignore_case": True}})
    # No body, whatever its type says (aiohttp's is application/octet-stream):
    # Content-Length 0, or none on a GET. Envoy drops Transfer-Encoding before
    # any filter sees it, so a chunked POST (HTTP/1.1) or a POST's DATA frames
    # (HTTP/2) without a Content-Length cannot be told from no body: a body.
    no_body = _facts(content_length={"string_match": {"exact": "0"}})
    get_no_body = _facts(content_length={"string_match": {"exact": MISSING}},
                         method={"string_match": {"exact": "GET"}})
    allowed = []
    for match in ({"headers": [GRPC, _NATIVE]},  # native gRPC
                  {"headers": [GRPC, _TRANSCODED], "dynamic_metadata": json_body},
                  {"headers": [GRPC, _TRANSCODED], "dynamic_metadata": no_body},
                  {"headers": [GRPC, _TRANSCODED], "dynamic_metadata": get_no_body}):
        item = route()
        item["match"] = {"prefix": CONTROL_PREFIX, **match}
        item["request_headers_to_add"] = [credential]
        allowed.append(item)
    return [*refusals, *allowed, _refuse(
        "has a body that is not JSON (Content-Type must be application/json; no body is "
        "Content-Length: 0, or a GET)", settings)]


def refused_routes() -> list[dict[str, Any]]:
    """Without --control the ControlService is not the gateway's to pass:
    native gRPC gets PERMISSION_DENIED (Envoy's local reply to a gRPC call
    maps 403 so); its REST routes are not transcoded (404)."""
    return [{
        "match": {"prefix": CONTROL_PREFIX, "case_sensitive": False, "headers": [GRPC]},
        "direct_response": {"status": 403, "body": {"inline_string": (
            "this gateway does not pass the ControlService (start it with --control; the "
            "server then needs its admin key)")}},
    }]
