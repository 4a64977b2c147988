"""OpenTelemetry traces of the server (vLLM's --otlp-traces-endpoint): one
SERVER span per RPC, continuing the W3C trace context (traceparent,
tracestate) of the call's metadata (the gateway's span, or the caller's;
none: a new trace), exported over OTLP through a batch processor, as vLLM
exports its own: gRPC in plaintext, or OTLP/HTTP when
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is http/protobuf. The span's context is
the call's trace context for the engine (core/tracing.py), so vLLM's
`llm_request` span is its child: one trace per request. The span carries
the request's id, model, tenant and tokens (vLLM's and OpenTelemetry's
GenAI names), collected as the access log's are (core/metrics.py's
AccessRecord, filled by the guarded engine), each value cut at
MAX_ATTRIBUTE_CHARS. The only module importing
OpenTelemetry, built only with the flag (runtime/app.py): without it there
is no tracer and no per-call work."""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Sequence
from typing import Any

import grpc
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.environment_variables import (
    OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT,
)
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tokenwire.server.core import tracing
from tokenwire.server.core.metrics import QUIET_SERVICES, AccessRecord, current_access
from tokenwire.server.core.rpc_handlers import Finish, HandlerInterceptor, wrap_handler

PROPAGATOR = TraceContextTextMapPropagator()
TRACE_HEADERS = ("traceparent", "tracestate")  # W3C trace context, as gRPC metadata keys
# Span attributes: OpenTelemetry's RPC names, vLLM's GenAI names (its
# llm_request span's: vllm/tracing/utils.py), OpenTelemetry's GenAI model.
RPC_SYSTEM, RPC_SERVICE, RPC_METHOD = "rpc.system", "rpc.service", "rpc.method"
RPC_STATUS = "rpc.grpc.status_code"
REQUEST_ID = "gen_ai.request.id"
REQUEST_MODEL = "gen_ai.request.model"
PROMPT_TOKENS = "gen_ai.usage.prompt_tokens"
COMPLETION_TOKENS = "gen_ai.usage.completion_tokens"
TENANT = "tokenwire.tenant"
# The longest attribute value a span keeps (characters; longer ones are cut):
# the span is made before the key check, so a caller without a key chooses
# the request's model (up to the message limit); a span of MiBs would fail
# its whole export batch (issue 42 L-6). OpenTelemetry's own variables
# (OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT)
# set another limit.
MAX_ATTRIBUTE_CHARS = 256
# A server span's error statuses (OpenTelemetry's gRPC conventions): the
# server's faults, not the caller's (INVALID_ARGUMENT, NOT_FOUND, ... stay unset).
SERVER_ERRORS = frozenset({
    grpc.StatusCode.UNKNOWN, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNIMPLEMENTED,
    grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DATA_LOSS,
})


def span_exporter(endpoint: str) -> SpanExporter:
    """The OTLP exporter vLLM would make for `endpoint` (its
    get_span_exporter): gRPC in plaintext unless
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL is http/protobuf; ValueError for
    another protocol."""
    protocol = os.environ.get(OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, "grpc")
    if protocol == "grpc":
        return OTLPSpanExporter(endpoint=endpoint, insecure=True)
    if protocol == "http/protobuf":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HttpExporter,
        )

        return HttpExporter(endpoint=endpoint)
    raise ValueError(f"{OTEL_EXPORTER_OTLP_TRACES_PROTOCOL}={protocol!r}: the OTLP protocols "
                     "are grpc and http/protobuf")


class Tracing:
    """The server's tracer (a provider of its own: vLLM's engine sets the
    process's global one for its spans) and the interceptor that traces
    every RPC with it. `shutdown` exports what is left."""

    def __init__(self, endpoint: str, *, process_index: int = 0,
                 exporter: SpanExporter | None = None):
        resource = Resource.create({
            SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME") or "tokenwire",
            "tokenwire.process_index": process_index,  # with --api-server-count N
        })
        self.provider = TracerProvider(resource=resource, span_limits=span_limits())
        self.provider.add_span_processor(
            BatchSpanProcessor(exporter if exporter is not None else span_exporter(endpoint)))
        self.interceptor = TracingInterceptor(self.provider.get_tracer("tokenwire.server"))

    async def shutdown(self) -> None:
        """Export the spans still queued (off the event loop), then stop."""
        await asyncio.to_thread(self.provider.shutdown)


def span_limits() -> SpanLimits:
    """Attribute values cut at MAX_ATTRIBUTE_CHARS, unless OpenTelemetry's
    variables say otherwise (the SDK's default is no limit)."""
    if os.environ.get(OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT) or os.environ.get(
            OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT):
        return SpanLimits()  # (reads them)
    return SpanLimits(max_span_attribute_length=MAX_ATTRIBUTE_CHARS)


def parent_of(metadata: Sequence[tuple[str, Any]] | None) -> Any:
    """The trace context the call's metadata continues (an empty context:
    none, the span starts a trace)."""
    carrier = {key: value for key, value in metadata or ()
               if key in TRACE_HEADERS and isinstance(value, str)}
    return PROPAGATOR.extract(carrier)


def status_of(context: grpc.aio.ServicerContext, failed: BaseException | None) -> grpc.StatusCode:
    """The call's status as its client will see it."""
    if isinstance(failed, asyncio.CancelledError | GeneratorExit):  # the call went away
        return grpc.StatusCode.CANCELLED
    code = context.code()
    if isinstance(code, grpc.StatusCode):
        return code
    return grpc.StatusCode.OK if failed is None else grpc.StatusCode.UNKNOWN


class TracingInterceptor(HandlerInterceptor):
    """A span around every RPC (health checks and reflection left out),
    named `<service>/<method>` as OpenTelemetry names RPC spans."""

    def __init__(self, tracer: trace.Tracer):
        self.tracer = tracer

    async def _span(self, details: grpc.HandlerCallDetails, request: Any,
                    context: grpc.aio.ServicerContext) -> Finish:
        """Starts the call's span, current for the engine while the call
        runs; returns what ends it."""
        service, _, method = details.method.lstrip("/").rpartition("/")
        span = self.tracer.start_span(
            f"{service}/{method}", context=parent_of(details.invocation_metadata),
            kind=SpanKind.SERVER,
            attributes={RPC_SYSTEM: "grpc", RPC_SERVICE: service, RPC_METHOD: method})
        headers: dict[str, str] = {}
        PROPAGATOR.inject(headers, context=trace.set_span_in_context(span))
        tracing.trace_headers.set(headers)
        outer = current_access.get()  # the access log's line, when it is on
        record = AccessRecord(method)  # this call's engine requests (engine/guarded.py)
        current_access.set(record)

        def finish(failed: BaseException | None) -> None:
            if outer is not None:
                outer.add_request(record.request_id, record.tenant, record.prompt_tokens)
                outer.completion_tokens += record.completion_tokens
                current_access.set(outer)
            code = status_of(context, failed)
            span.set_attribute(RPC_STATUS, code.value[0])
            model = getattr(request, "model", None)
            if isinstance(model, str) and model:
                span.set_attribute(REQUEST_MODEL, model)
            if record.request_id:
                span.set_attributes({REQUEST_ID: record.request_id,
                                     PROMPT_TOKENS: record.prompt_tokens,
                                     COMPLETION_TOKENS: record.completion_tokens})
            if record.tenant:
                span.set_attribute(TENANT, record.tenant)
            if code in SERVER_ERRORS:
                span.set_status(Status(StatusCode.ERROR, code.name))
            span.end()

        return finish

    def intercept(self, handler: grpc.RpcMethodHandler,
                  details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        if details.method.lstrip("/").startswith(QUIET_SERVICES):
            return handler
        return wrap_handler(handler, functools.partial(self._span, details))
