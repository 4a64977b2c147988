"""One trace per request through the gateway: `tokenwire up
--otlp-traces-endpoint` (vLLM's one flag; fake engine) traces in Envoy's
OpenTelemetry tracer and in the server, to an in-process OTLP collector. A
REST chat gets Envoy's SERVER span (a new trace, or under the caller's
`traceparent`) and the server's span under it, in the same trace;
streamed (SSE) and native gRPC calls too; X-Request-Id still names the
request; no key reaches a span; GET /metrics is not traced."""

from __future__ import annotations

import collections.abc
import os
import uuid

import grpc
import httpx
import pytest

from tests.gateway.envoy_fixture import tokenwire_up
from tests.otlp import FAST_EXPORT, Collector, Span
from tests.rpc import chat_request
from tokenwire.v1 import service_pb2_grpc

KEY = "sk-trace-secret-0042"
AUTH = {"authorization": f"Bearer {KEY}"}
GATEWAY, SERVER = "tokenwire-gateway", "tokenwire"


@pytest.fixture(scope="module")
def collector() -> collections.abc.Iterator[Collector]:
    with Collector() as running:
        yield running


@pytest.fixture(scope="module")
def up(collector: Collector) -> collections.abc.Iterator[str]:
    env = {**os.environ, **FAST_EXPORT, "TOKENWIRE_API_KEY": KEY}
    with tokenwire_up("--no-open-probes", "--otlp-traces-endpoint", collector.endpoint,
                      env=env, headers=AUTH) as running:
        yield running.url


def _trace(collector: Collector, found: collections.abc.Callable[[Span], bool]
           ) -> tuple[Span, Span]:
    """The server's span that `found` picks and the gateway's span above it
    (waiting until both arrived)."""
    def both(spans: list[Span]) -> bool:
        server = [s for s in spans if s.service == SERVER and found(s)]
        return bool(server) and any(s.service == GATEWAY and s.span_id == server[0].parent_span_id
                                    for s in spans)

    spans = collector.wait_for(both)
    server = next(s for s in spans if s.service == SERVER and found(s))
    gateway = next(s for s in spans if s.service == GATEWAY and s.span_id == server.parent_span_id)
    return server, gateway


def test_a_rest_chat_is_one_trace_from_envoy_to_the_server(
        up: str, collector: Collector) -> None:
    request_id = str(uuid.uuid4())
    r = httpx.post(f"{up}/v1/chat/completions", timeout=10,
                   headers={**AUTH, "x-request-id": request_id},
                   json={"model": "fake-model", "max_tokens": 2,
                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"] == f"chatcmpl-{request_id}"  # Envoy's tracing left the id alone
    server, gateway = _trace(collector, lambda s: s.attributes.get("gen_ai.request.id")
                             == body["id"])
    assert server.trace_id == gateway.trace_id
    assert gateway.parent_span_id == ""  # no caller trace: Envoy starts it
    assert gateway.kind == server.kind == 2  # SERVER, both
    assert server.attributes["gen_ai.usage.completion_tokens"] == 2
    assert server.attributes["gen_ai.request.model"] == "fake-model"
    assert gateway.attributes["guid:x-request-id"] == request_id
    assert gateway.attributes["http.method"] == "POST"
    assert gateway.attributes["grpc.path"] == "/tokenwire.v1.EventStreamService/" \
                                              "CreateChatCompletionJson"  # the transcoded call
    for span in collector.spans:  # the key is in no span, Envoy's or the server's
        assert not any(KEY in str(v) for v in span.attributes.values()), span


def test_a_streamed_rest_chat_continues_the_callers_trace(
        up: str, collector: Collector) -> None:
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    with httpx.stream("POST", f"{up}/v1/chat/completions", timeout=10,
                      headers={**AUTH, "traceparent": f"00-{trace_id}-{parent}-01"},
                      json={"model": "fake-model", "max_tokens": 3, "stream": True,
                            "messages": [{"role": "user", "content": "hi"}]}) as r:
        events = [line for line in r.iter_lines() if line.startswith("data: ")]
    assert r.status_code == 200 and events[-1] == "data: [DONE]"
    server, gateway = _trace(collector, lambda s: s.trace_id == trace_id)
    assert gateway.trace_id == trace_id and gateway.parent_span_id == parent
    assert server.attributes["rpc.service"] == "tokenwire.v1.EventStreamService"
    assert server.attributes["gen_ai.usage.completion_tokens"] == 3


def test_native_grpc_through_the_gateway_is_traced_too(up: str, collector: Collector) -> None:
    trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    with grpc.insecure_channel(up.removeprefix("http://")) as ch:
        resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
            chat_request(model="fake-model", max_tokens=2), timeout=10, metadata=(
                ("authorization", f"Bearer {KEY}"),
                ("traceparent", f"00-{trace_id}-{parent}-01")))
    server, gateway = _trace(collector, lambda s: s.trace_id == trace_id)
    assert gateway.parent_span_id == parent
    assert server.name == "tokenwire.v1.TokenwireService/CreateChatCompletion"
    assert server.attributes["gen_ai.request.id"] == resp.id


def test_metrics_scrapes_are_not_traced(up: str, collector: Collector) -> None:
    assert httpx.get(f"{up}/metrics", timeout=10).status_code == 200
    trace_id = uuid.uuid4().hex
    r = httpx.post(f"{up}/v1/chat/completions", timeout=10,
                   headers={**AUTH, "traceparent": f"00-{trace_id}-{'1' * 16}-01"},
                   json={"model": "fake-model", "max_tokens": 1,
                         "messages": [{"role": "user", "content": "hi"}]})
    assert r.status_code == 200
    _trace(collector, lambda s: s.trace_id == trace_id)  # Envoy exported what came after
    assert not [s for s in collector.spans if s.service == GATEWAY
                and "/metrics" in str(s.attributes.get("http.url"))]
