"""vLLM's observability flags on the real engine (the tiny random model, its
own short-lived server): `--otlp-traces-endpoint` (an in-process OTLP gRPC
collector) no longer kills the engine: chat requests answer with their ids,
the server keeps serving, and vLLM's `llm_request` spans reach the
collector; with log stats on (vLLM's default), `--metrics-port`'s /metrics
shows vLLM's `vllm:*` metrics beside tokenwire's `tokenwire_*`."""

from __future__ import annotations

import threading
import time
import urllib.request
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.rpc import chat_request
from tests.servers import ROOT, ProcessServer, free_port
from tokenwire.v1 import service_pb2_grpc

TINY = ROOT / ".models" / "tiny-random-llama"
trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
trace_grpc = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc")


class Collector(trace_grpc.TraceServiceServicer):  # type: ignore[name-defined,misc]
    """An OTLP trace collector: keeps every exported span."""

    def __init__(self) -> None:
        self.spans: list[object] = []
        self.lock = threading.Lock()

    def Export(self, request, context):  # the OTLP service's method name
        with self.lock:
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    self.spans.extend(scope.spans)
        return trace_service.ExportTraceServiceResponse()

    def completion_tokens(self) -> list[int]:
        with self.lock:
            return [a.value.int_value for s in self.spans if s.name == "llm_request"
                    for a in s.attributes if a.key == "gen_ai.usage.completion_tokens"]


@pytest.mark.skipif(not (TINY / "config.json").exists(), reason="make tiny-model")
def test_tracing_flag_keeps_the_engine_serving_and_metrics_show_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    collector = Collector()
    otlp = grpc.server(futures.ThreadPoolExecutor(2))
    trace_grpc.add_TraceServiceServicer_to_server(collector, otlp)
    otlp_port = otlp.add_insecure_port("127.0.0.1:0")
    otlp.start()
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "200")  # export spans within 0.2 s
    metrics_port = free_port()
    server = ProcessServer(["--model", str(TINY), "--kv-cache-bytes", str(64 << 20),
                            "--otlp-traces-endpoint", f"http://127.0.0.1:{otlp_port}",
                            "--metrics-port", str(metrics_port)]).start(timeout=300)
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            for max_tokens in (5, 7):
                resp = stub.CreateChatCompletion(chat_request(
                    temperature=0, max_tokens=max_tokens, ignore_eos=True,
                    return_token_ids=True), timeout=120)
                assert len(resp.choices[0].token_ids) == max_tokens
                assert len(resp.prompt_token_ids) > 0
            streamed = list(stub.StreamChatCompletion(chat_request(
                max_tokens=4, ignore_eos=True, return_token_ids=True), timeout=120))
            assert sum(len(choice.token_ids) for c in streamed for choice in c.choices) == 4
            health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(),
                                                           timeout=10)
            assert health.status == health_pb2.HealthCheckResponse.SERVING
        assert server.proc is not None and server.proc.poll() is None, server.log_tail()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not {5, 7} <= set(collector.completion_tokens()):
            time.sleep(0.5)
        assert {5, 7} <= set(collector.completion_tokens()), collector.completion_tokens()
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
    finally:
        code = server.stop(120)
        otlp.stop(0)
    assert code == 0, server.log_tail()
