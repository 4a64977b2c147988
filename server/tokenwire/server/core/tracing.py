"""The running call's trace context as the engine hands it on: the W3C
headers (traceparent, tracestate) of the RPC's span, which the tracer
(api/tracing.py, with --otlp-traces-endpoint) sets for the call and an
engine adapter passes to its engine (vLLM's `trace_headers`), so the
engine's own spans join the request's trace. No OpenTelemetry here: with
tracing off nothing sets it and it stays None."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping

# The running RPC's span as W3C trace-context headers (None: no trace).
trace_headers: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "trace_headers", default=None)
