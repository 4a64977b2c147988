"""vLLM's observability flags on the real engine (the session's
router_server, tests/conftest.py: the tiny random model with
`--metrics-port` and tracing on, read only here): `--otlp-traces-endpoint` (an in-process OTLP gRPC
collector, tests/otlp.py) no longer kills the engine: chat requests answer
with their ids, the server keeps serving, and vLLM's `llm_request` spans
reach the collector; a call with a `traceparent` is one trace: the
server's span under the caller's, vLLM's `llm_request` under the server's;
with log stats on (vLLM's default), `--metrics-port`'s /metrics shows
vLLM's `vllm:*` metrics beside tokenwire's `tokenwire_*`. (With
`--api-server-count 2` both serving processes trace: test_frontends_engine.py,
on its shared two-process server.)"""

from __future__ import annotations

import urllib.request
import uuid

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.conftest import RouterServer
from tests.otlp import Collector
from tests.rpc import chat_request
from tokenwire.v1 import service_pb2_grpc

CHAT = "tokenwire.v1.TokenwireService/CreateChatCompletion"


def _completion_tokens(collector: Collector, ids: list[str]) -> set[int]:
    """Completion tokens of the engine spans of these requests (the
    collector is the session's: other modules' calls reach it too)."""
    return {s.attributes["gen_ai.usage.completion_tokens"]
            for s in collector.named("llm_request")
            if any(i in s.attributes["gen_ai.request.id"] for i in ids)}


def test_tracing_flag_keeps_the_engine_serving_and_metrics_show_both(
        router_server: RouterServer) -> None:
    server, collector = router_server.server, router_server.collector
    metrics_port = router_server.metrics_port
    ids: list[str] = []
    # the session's server: its clean exit is checked at the session's end
    with grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        for max_tokens in (5, 7):
            resp = stub.CreateChatCompletion(chat_request(
                temperature=0, max_tokens=max_tokens, ignore_eos=True,
                return_token_ids=True), timeout=120)
            assert len(resp.choices[0].token_ids) == max_tokens
            ids.append(resp.id)
            assert len(resp.prompt_token_ids) > 0
        streamed = list(stub.StreamChatCompletion(chat_request(
            max_tokens=4, ignore_eos=True, return_token_ids=True), timeout=120))
        assert sum(len(choice.token_ids) for c in streamed for choice in c.choices) == 4
        trace_id, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
        traced = stub.CreateChatCompletion(chat_request(
            temperature=0, max_tokens=3, ignore_eos=True), timeout=120,
            metadata=(("traceparent", f"00-{trace_id}-{parent}-01"),))
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                       timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    assert server.proc is not None and server.proc.poll() is None, server.log_tail()
    collector.wait_for(lambda spans: {5, 7} <= _completion_tokens(collector, ids))
    # One trace: the caller's span > the server's > vLLM's llm_request.
    collector.wait_for(lambda spans: {CHAT, "llm_request"} <= {
        s.name for s in spans if s.trace_id == trace_id})
    (server_span,) = collector.named(CHAT, trace_id)
    (engine_span,) = collector.named("llm_request", trace_id)
    assert server_span.parent_span_id == parent and server_span.service == "tokenwire"
    assert engine_span.parent_span_id == server_span.span_id
    assert server_span.attributes["gen_ai.request.id"] == traced.id
    assert traced.id in engine_span.attributes["gen_ai.request.id"]
    assert (server_span.attributes["gen_ai.usage.completion_tokens"]
            == engine_span.attributes["gen_ai.usage.completion_tokens"] == 3)
    assert (server_span.attributes["gen_ai.usage.prompt_tokens"]
            == engine_span.attributes["gen_ai.usage.prompt_tokens"]
            == traced.usage.prompt_tokens)
    page = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics",
                                  timeout=10).read().decode()
    samples = {line.split(" ")[0].split("{")[0]: line for line in page.splitlines()
               if line and not line.startswith("#")}
    assert "vllm:num_requests_running" in samples
    assert "vllm:generation_tokens_total" in samples
    generated = [float(line.rsplit(" ", 1)[1]) for line in page.splitlines()
                 if line.startswith("vllm:generation_tokens_total")]
    assert sum(generated) >= 5 + 7 + 4
    assert "tokenwire_completion_tokens_total" in samples
    assert "tokenwire_requests_total" in samples
