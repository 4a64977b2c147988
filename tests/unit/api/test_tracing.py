"""OpenTelemetry traces of the server (--otlp-traces-endpoint, api/tracing.py)
on the fake engine, exported to an in-process OTLP collector: a call with
the caller's `traceparent` gets a SERVER span in that trace under the
caller's span, with the request's id, model, tenant and tokens, and the
engine is handed the span's own context (what vLLM's llm_request span
continues); a call without one starts a trace; refusals carry their
status; the access log still sees every request; without the flag there
is no tracer and the engine gets no context; --api-server-count N traces
in every process."""

from __future__ import annotations

import collections.abc
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import grpc
import pytest

from tests.otlp import FAST_EXPORT, Collector, Span
from tests.rpc import chat_request
from tests.servers import ThreadServer, fake_serving, free_port
from tokenwire.server.api import tracing as api_tracing
from tokenwire.server.core import tracing
from tokenwire.server.core.domain import EngineOutput, EngineRequest
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.runtime.cli import parse_settings
from tokenwire.v1 import models_pb2, service_pb2_grpc

KEYS = """
[[keys]]
key = "sk-beta-0002"
tenant = "beta"
"""
AUTH = (("authorization", "Bearer sk-beta-0002"),)
CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
TRACEPARENT = f"00-{CALLER_TRACE}-{CALLER_SPAN}-01"
CHAT = "tokenwire.v1.TokenwireService/CreateChatCompletion"
STREAM = "tokenwire.v1.TokenwireService/StreamChatCompletion"


class SeeingEngine(FakeEngine):
    """The fake engine, keeping the trace context each request was handed."""

    def __init__(self) -> None:
        super().__init__(max_model_len=512)
        self.seen: dict[str, collections.abc.Mapping[str, str] | None] = {}

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        self.seen[request.request_id] = tracing.trace_headers.get()
        async for out in super().generate(request):
            yield out


pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture(scope="module")
def collector(transport: str) -> collections.abc.Iterator[Collector]:
    # One per transport: a test finds its spans by ids both runs share.
    with Collector() as running:
        yield running


@pytest.fixture(scope="module")
def traced(collector: Collector, tmp_path_factory: pytest.TempPathFactory, transport: str
           ) -> collections.abc.Iterator[tuple[ThreadServer, SeeingEngine]]:
    keys = tmp_path_factory.mktemp("keys") / "keys.toml"
    keys.write_text(KEYS)
    engine = SeeingEngine()
    with pytest.MonkeyPatch.context() as env:
        for name, value in FAST_EXPORT.items():
            env.setenv(name, value)
        with fake_serving(engine, otlp_traces_endpoint=collector.endpoint,
                          served_model_name="fake-model", api_keys_file=str(keys),
                          grpc_transport=transport) as server:
            yield server, engine


def _one(collector: Collector, name: str, request_id: str) -> Span:
    spans = collector.wait_for(lambda spans: any(
        s.name == name and s.attributes.get("gen_ai.request.id") == request_id for s in spans))
    return next(s for s in spans
                if s.name == name and s.attributes.get("gen_ai.request.id") == request_id)


def test_a_callers_traceparent_is_continued_and_handed_to_the_engine(
        traced: tuple[ThreadServer, SeeingEngine], collector: Collector) -> None:
    server, engine = traced
    with grpc.insecure_channel(server.address) as ch:
        resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
            chat_request(model="fake-model", max_tokens=3, ignore_eos=True),
            metadata=(*AUTH, ("traceparent", TRACEPARENT), ("tracestate", "vendor=x")),
            timeout=10)
    span = _one(collector, CHAT, resp.id)
    assert (span.trace_id, span.parent_span_id) == (CALLER_TRACE, CALLER_SPAN)
    assert span.kind == 2 and span.service == "tokenwire"  # SERVER
    assert span.attributes["rpc.system"] == "grpc"
    assert span.attributes["rpc.method"] == "CreateChatCompletion"
    assert span.attributes["rpc.grpc.status_code"] == 0
    assert span.attributes["gen_ai.request.model"] == "fake-model"
    assert span.attributes["gen_ai.usage.prompt_tokens"] == resp.usage.prompt_tokens
    assert span.attributes["gen_ai.usage.completion_tokens"] == resp.usage.completion_tokens == 3
    assert span.attributes["tokenwire.tenant"] == "beta"
    assert not any("sk-beta" in str(v) for v in span.attributes.values())  # no key
    # The engine got this span's context: its own spans are the server span's children.
    (headers,) = [h for rid, h in engine.seen.items() if rid.endswith(resp.id)]
    assert headers is not None
    assert headers["traceparent"] == f"00-{CALLER_TRACE}-{span.span_id}-01"
    assert headers["tracestate"] == "vendor=x"


def test_a_call_without_traceparent_starts_a_trace(
        traced: tuple[ThreadServer, SeeingEngine], collector: Collector) -> None:
    server, engine = traced
    with grpc.insecure_channel(server.address) as ch:
        chunks = list(service_pb2_grpc.TokenwireServiceStub(ch).StreamChatCompletion(
            chat_request(max_tokens=2, ignore_eos=True), metadata=AUTH, timeout=10))
    span = _one(collector, STREAM, chunks[0].id)
    assert span.parent_span_id == "" and span.trace_id not in ("", CALLER_TRACE)
    assert span.attributes["gen_ai.usage.completion_tokens"] == 2
    (headers,) = [h for rid, h in engine.seen.items() if rid.endswith(chunks[0].id)]
    assert headers is not None and headers["traceparent"].split("-")[1:3] == [
        span.trace_id, span.span_id]


def test_refusals_are_spans_with_their_status_and_no_request(
        traced: tuple[ThreadServer, SeeingEngine], collector: Collector) -> None:
    server, _ = traced
    parent = "5bf92f3577b34da6a3ce929d0e0e4736"
    with grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        with pytest.raises(grpc.RpcError) as bad:
            stub.CreateChatCompletion(chat_request(max_tokens=-1), timeout=10, metadata=(
                *AUTH, ("traceparent", f"00-{parent}-{CALLER_SPAN}-01")))
        with pytest.raises(grpc.RpcError) as unkeyed:
            stub.GetStats(models_pb2.GetStatsRequest(), timeout=10, metadata=(
                ("authorization", "Bearer sk-wrong"), ("traceparent",
                                                        f"00-{parent}-{CALLER_SPAN}-01")))
    assert bad.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert unkeyed.value.code() == grpc.StatusCode.UNAUTHENTICATED
    spans = collector.wait_for(lambda spans: len([s for s in spans if s.trace_id == parent]) == 2)
    by_method = {s.attributes["rpc.method"]: s for s in spans if s.trace_id == parent}
    chat, stats = by_method["CreateChatCompletion"], by_method["GetStats"]
    assert chat.attributes["rpc.grpc.status_code"] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert stats.attributes["rpc.grpc.status_code"] == grpc.StatusCode.UNAUTHENTICATED.value[0]
    assert "gen_ai.request.id" not in chat.attributes  # refused before the engine
    assert chat.status_code == stats.status_code == 0  # the caller's fault: no span error
    assert not any("sk-wrong" in str(v) for s in spans for v in s.attributes.values())


def test_an_unauthenticated_callers_huge_model_name_makes_a_small_span(
        traced: tuple[ThreadServer, SeeingEngine], collector: Collector) -> None:
    """Issue 42 L-6: the span is made before the key check and records the
    request's model; a multi-MiB `model` from a caller without a key is cut
    to MAX_ATTRIBUTE_CHARS (as is every attribute), so the span stays small
    and its export batch (with other calls' spans) still arrives."""
    server, _ = traced
    parent = "6bf92f3577b34da6a3ce929d0e0e4736"
    huge = "m" * (4 << 20)
    with grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        with pytest.raises(grpc.RpcError) as unkeyed:
            stub.CreateChatCompletion(chat_request(model=huge, max_tokens=2), timeout=10,
                                      metadata=(("traceparent", f"00-{parent}-{CALLER_SPAN}-01"),))
        resp = stub.CreateChatCompletion(chat_request(max_tokens=2), metadata=AUTH, timeout=10)
    assert unkeyed.value.code() == grpc.StatusCode.UNAUTHENTICATED
    collector.wait_for(lambda spans: any(s.trace_id == parent for s in spans) and any(
        s.attributes.get("gen_ai.request.id") == resp.id for s in spans))
    (refused,) = [s for s in collector.spans if s.trace_id == parent]
    assert refused.attributes["gen_ai.request.model"] == "m" * api_tracing.MAX_ATTRIBUTE_CHARS
    assert api_tracing.MAX_ATTRIBUTE_CHARS == 256


def test_opentelemetrys_own_limit_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    assert api_tracing.span_limits().max_span_attribute_length == 256
    monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", "1024")
    assert api_tracing.span_limits().max_span_attribute_length == 1024


def test_the_access_log_still_sees_each_request(
        traced: tuple[ThreadServer, SeeingEngine], caplog: pytest.LogCaptureFixture) -> None:
    server, _ = traced
    with caplog.at_level(logging.INFO, logger="tokenwire.access"), \
            grpc.insecure_channel(server.address) as ch:
        resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
            chat_request(max_tokens=2, ignore_eos=True), metadata=AUTH, timeout=10)
    (line,) = [r.getMessage() for r in caplog.records if r.name == "tokenwire.access"]
    assert f"request_id={resp.id} tenant=beta prompt_tokens={resp.usage.prompt_tokens} " \
           "completion_tokens=2" in line


def test_without_the_flag_no_tracer_and_no_context_for_the_engine() -> None:
    engine = SeeingEngine()
    with fake_serving(engine) as server, grpc.insecure_channel(server.address) as ch:
        resp = service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
            chat_request(max_tokens=2), metadata=(("traceparent", TRACEPARENT),), timeout=10)
        assert server._running.tracing is None  # type: ignore[attr-defined]
    (headers,) = [h for rid, h in engine.seen.items() if rid.endswith(resp.id)]
    assert headers is None


def test_the_flag_on_the_command_line_and_the_exporters_protocol(
        monkeypatch: pytest.MonkeyPatch) -> None:
    settings = parse_settings(["--engine", "fake", "--otlp-traces-endpoint", "http://h:4317"])
    assert settings.otlp_traces_endpoint == "http://h:4317"
    assert parse_settings(["--engine", "fake"]).otlp_traces_endpoint == ""
    exporter = api_tracing.span_exporter("http://127.0.0.1:4317")
    assert type(exporter).__module__.endswith("proto.grpc.trace_exporter")  # vLLM's default
    exporter.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
    exporter = api_tracing.span_exporter("http://127.0.0.1:4318/v1/traces")
    assert type(exporter).__module__.endswith("proto.http.trace_exporter")
    exporter.shutdown()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "thrift")
    with pytest.raises(ValueError, match="grpc and http/protobuf"):
        api_tracing.span_exporter("http://127.0.0.1:4317")


def test_every_serving_process_traces(collector: Collector) -> None:
    """Each call on a new connection (the kernel spreads them over the
    processes' SO_REUSEPORT sockets) until both processes' spans arrived:
    process 1 may start listening seconds after process 0 answers."""
    port = free_port()
    env = {**os.environ, **FAST_EXPORT}
    proc = subprocess.Popen(
        [sys.executable, "-m", "tokenwire.cli", "serve", "--engine", "fake", "--port", str(port),
         "--api-server-count", "2", "--otlp-traces-endpoint", collector.endpoint],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    sent: set[str] = set()

    def processes() -> set[object]:
        return {s.resource["tokenwire.process_index"] for s in collector.spans
                if s.name == CHAT and s.trace_id in sent}

    try:
        deadline = time.monotonic() + 90
        while processes() != {0, 1}:
            assert time.monotonic() < deadline, f"spans only from processes {processes()}"
            trace_id = f"{len(sent) + 1:032x}"
            try:
                with grpc.insecure_channel(f"127.0.0.1:{port}", options=[
                        ("grpc.use_local_subchannel_pool", 1)]) as ch:
                    service_pb2_grpc.TokenwireServiceStub(ch).CreateChatCompletion(
                        chat_request(max_tokens=1), timeout=10,
                        metadata=(("traceparent", f"00-{trace_id}-{CALLER_SPAN}-01"),))
                sent.add(trace_id)
            except grpc.RpcError:
                time.sleep(0.2)
        # every answered call was traced, by one of the two processes
        spans = collector.wait_for(
            lambda spans: sent <= {s.trace_id for s in spans if s.name == CHAT})
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    assert {s.resource["tokenwire.process_index"] for s in spans if s.trace_id in sent} == {0, 1}
