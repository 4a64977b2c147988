"""An in-process OTLP trace collector for tests: a gRPC server implementing
OpenTelemetry's TraceService (opentelemetry.proto.collector.trace.v1
Export), keeping every exported span in memory with its service's name,
so tests read what the gateway, the server and vLLM's engine sent."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from concurrent import futures
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1 import common_pb2

# Spans exported within this many milliseconds (the batch processor's
# OTEL_BSP_SCHEDULE_DELAY; its default is 5 s): set it in the environment
# of whatever exports to the collector.
FAST_EXPORT = {"OTEL_BSP_SCHEDULE_DELAY": "100"}


def _value(value: common_pb2.AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@dataclasses.dataclass(frozen=True)
class Span:
    """One exported span: ids in lowercase hex, as traceparent spells them."""

    service: str  # the resource's service.name
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str  # "": a root span
    kind: int  # opentelemetry.proto.trace.v1.Span.SpanKind (2: SERVER)
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int  # opentelemetry.proto.trace.v1.Status.StatusCode (2: ERROR)


class Collector(trace_service_pb2_grpc.TraceServiceServicer):
    """The collector: `start()` listens on 127.0.0.1 (any port), `endpoint`
    is its URL for --otlp-traces-endpoint, `spans` what arrived."""

    def __init__(self) -> None:
        self._spans: list[Span] = []
        self._lock = threading.Lock()
        self._server: grpc.Server | None = None
        self.port = 0

    def Export(self, request: Any, context: Any) -> Any:  # the OTLP service's method name
        arrived = []
        for resource_spans in request.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope in resource_spans.scope_spans:
                for s in scope.spans:
                    arrived.append(Span(
                        service=str(resource.get("service.name", "")), name=s.name,
                        trace_id=s.trace_id.hex(), span_id=s.span_id.hex(),
                        parent_span_id=s.parent_span_id.hex(), kind=s.kind,
                        attributes={a.key: _value(a.value) for a in s.attributes},
                        resource=resource, status_code=s.status.code))
        with self._lock:
            self._spans.extend(arrived)
        return trace_service_pb2.ExportTraceServiceResponse()

    def start(self) -> Collector:
        self._server = grpc.server(futures.ThreadPoolExecutor(4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(self, self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(0)

    def __enter__(self) -> Collector:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def address(self) -> str:  # host:port, for Envoy's cluster
        return f"127.0.0.1:{self.port}"

    @property
    def spans(self) -> list[Span]:
        with self._lock:
            return list(self._spans)

    def wait_for(self, found: Callable[[list[Span]], bool], timeout: float = 30) -> list[Span]:
        """The spans once `found(spans)` holds (AssertionError with what
        arrived when it does not within `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans
            if found(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"spans not there after {timeout}s; arrived: "
                                     f"{[(s.service, s.name, s.trace_id) for s in spans]}")
            time.sleep(0.1)

    def named(self, name: str, trace_id: str | None = None) -> list[Span]:
        return [s for s in self.spans
                if s.name == name and (trace_id is None or s.trace_id == trace_id)]
