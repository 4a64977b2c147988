"""Prometheus metrics, served on their own HTTP port (--metrics-port):
tokenwire's own (`tokenwire_*`, this module) and, on the same page, the
engine's from the process's default registry (vLLM's `vllm:*`, which its
stat loggers register there; EngineMetrics); the served weights as gauges a
router can read (WeightGauges). Also the access log: one INFO line per
finished RPC on the `tokenwire.access` logger (AccessRecord)."""

from __future__ import annotations

import asyncio
import bisect
import contextvars
import dataclasses
import itertools
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import grpc
import prometheus_client as prom
from prometheus_client import multiprocess
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

from tokenwire.server.core.rpc_handlers import Finish, HandlerInterceptor, wrap_handler
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.weight_versions import split_number


class Metrics:
    def __init__(self) -> None:
        self.registry = prom.CollectorRegistry()
        r = self.registry
        self.requests = prom.Counter(
            "tokenwire_requests", "Finished RPCs by method and status code.",
            ["method", "code"], registry=r,
        )
        self.prompt_tokens = prom.Counter(
            "tokenwire_prompt_tokens", "Prompt tokens fed to the engine.", registry=r
        )
        self.completion_tokens = prom.Counter(
            "tokenwire_completion_tokens", "Tokens generated (ids sent to clients).", registry=r
        )
        self.session_requests = prom.Counter(
            "tokenwire_session_requests",
            "Generation requests that named a session (session_id or x-session-id).", registry=r,
        )
        self.in_flight = prom.Gauge(
            "tokenwire_requests_in_flight", "Generation requests in progress.", registry=r
        )
        self.engine_requests = prom.Gauge(
            "tokenwire_engine_requests", "Requests the engine holds.", registry=r
        )
        buckets = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
        self.queue_seconds = prom.Histogram(
            "tokenwire_queue_seconds", "Time in the engine queue before scheduling.",
            buckets=buckets, registry=r,
        )
        self.ttft_seconds = prom.Histogram(
            "tokenwire_time_to_first_token_seconds", "Receipt to first generated token.",
            buckets=buckets, registry=r,
        )

        # Bounded staleness (core/weight_bounds.py).
        self.ended_by_bound = prom.Counter(
            "tokenwire_requests_ended_by_weight_bound",
            "Running requests ended at a weight update their bound excludes, by reason "
            "(WEIGHT_VERSION_CHANGED, WEIGHT_LAG_EXCEEDED).", ["reason"], registry=r,
        )
        self.served_token_lag = CountHistogram(
            "tokenwire_served_token_weight_lag_updates",
            "Served tokens by their lag: weight updates between their request's start and "
            "their sampling.", buckets=(0, 1, 2, 3, 4, 8, 16), registry=r,
        )

    def watch_weights(self, state: ServingState) -> None:
        """The served weights' gauges (WeightGauges), read from `state` at
        each scrape."""
        self.registry.register(WeightGauges(state))  # type: ignore[arg-type]  # (a collector)

    def serve(self, host: str, port: int, engine: bool = True) -> int:
        """Start the /metrics HTTP endpoint; returns the bound port.
        `engine`: the engine's metrics (EngineMetrics) on the same page."""
        served = prom.CollectorRegistry()
        served.register(_Joined([self.registry, *([EngineMetrics()] if engine else [])]))
        server, _thread = prom.start_http_server(port, addr=host, registry=served)
        return int(server.server_address[1])


class WeightGauges:
    """The weights this replica serves, as gauges a router maps to endpoint
    attributes (issue #44 item 5; docs/deploy.md), read from ServingState at
    each scrape, so they are what admission sees:

    * `tokenwire_weight_version_info{version}` 1: the version name (what
      `x-exact-weight-version` must equal).
    * `tokenwire_weight_version_number{prefix}`: the name's trailing number,
      the order core/weight_versions.py compares names by where their
      prefixes agree (`step-12` -> prefix "step-", 12); no sample when the
      name has no trailing number. A float64: exact up to 2**53.
    * `tokenwire_weight_version_lag_updates`: updates behind the newest
      version announced to this replica (WeightBounds.behind: 1 from an
      announce until that version is committed, else 0), the lag
      `x-max-weight-lag` is admitted against.
    * `tokenwire_weight_update_generation`: +1 on every weight change,
      relabels included (ServingState.generation).
    """

    def __init__(self, state: ServingState):
        self.state = state

    def collect(self) -> list[GaugeMetricFamily]:
        state = self.state
        version = state.weight_version
        info = GaugeMetricFamily(
            "tokenwire_weight_version_info", "The weight version served (label version).",
            labels=["version"])
        info.add_metric([version], 1)
        number = GaugeMetricFamily(
            "tokenwire_weight_version_number",
            "The served version name's trailing number (names compare by it where their "
            "prefixes agree); absent when the name has none.", labels=["prefix"])
        split = split_number(version)
        if split is not None:
            number.add_metric([split[0]], float(split[1]))
        lag = GaugeMetricFamily(
            "tokenwire_weight_version_lag_updates",
            "Weight updates this replica is behind the newest version announced to it.",
            value=state.bounds.behind(version))
        generation = GaugeMetricFamily(
            "tokenwire_weight_update_generation",
            "Weight changes since start (update generation).", value=state.generation)
        return [info, number, lag, generation]


class EngineMetrics:
    """The engine's metrics: the families of the process's default registry
    (prometheus_client's REGISTRY: vLLM's `vllm:*`, which its
    PrometheusStatLogger registers there, and the process_* / python_*
    collectors), as vLLM's own /metrics serves them. With several serving
    processes (PROMETHEUS_MULTIPROC_DIR set, as vLLM's multi-API-server mode
    does), their aggregate from that folder, as vLLM's get_prometheus_registry
    reads it. tokenwire's own names are left out (served from Metrics)."""

    def __init__(self) -> None:
        self.source: Any = prom.REGISTRY
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            self.source = prom.CollectorRegistry()
            multiprocess.MultiProcessCollector(self.source)

    def collect(self) -> Iterator[Metric]:
        for family in self.source.collect():
            if not family.name.startswith("tokenwire_"):
                yield family


class _Joined:
    """Several registries as one collector (one page, one scrape)."""

    def __init__(self, sources: list[Any]):
        self.sources = sources

    def collect(self) -> Iterator[Metric]:
        for source in self.sources:
            yield from source.collect()


class CountHistogram:
    """A histogram that takes many equal observations at once (`observe(value,
    count)`: a request's tokens by lag when it ends, not one call per token),
    exposed through prometheus_client's own HistogramMetricFamily."""

    def __init__(self, name: str, documentation: str, *, buckets: tuple[float, ...],
                 registry: prom.CollectorRegistry):
        self.name, self.documentation = name, documentation
        self.bounds = (*buckets, float("inf"))
        self.counts = [0] * len(self.bounds)  # per bucket, not cumulative
        self.sum = 0.0
        registry.register(self)  # type: ignore[arg-type]  # (a collector: it has collect())

    def observe(self, value: float, count: int = 1) -> None:
        i = bisect.bisect_left(self.bounds, value)  # the first bound >= value
        self.counts[i] += count
        self.sum += value * count

    def collect(self) -> list[HistogramMetricFamily]:
        family = HistogramMetricFamily(self.name, self.documentation)
        family.add_metric([], [(floatToGoString(b), c) for b, c in
                               zip(self.bounds, itertools.accumulate(self.counts), strict=True)],
                          self.sum)
        return [family]


access_log = logging.getLogger("tokenwire.access")
# Services left out of the access log: probes and discovery, not requests.
QUIET_SERVICES = ("grpc.health.", "grpc.reflection.")


@dataclasses.dataclass
class AccessRecord:
    """One RPC's access-log line, filled while it runs: the interceptor
    opens it, the guarded engine (engine/guarded.py) adds each engine
    request's id, tenant and tokens through the current context."""

    method: str
    request_id: str = ""  # x-request-id metadata, else the (first) engine request's id
    tenant: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    started: float = dataclasses.field(default_factory=time.monotonic)

    def add_request(self, request_id: str, tenant: str | None, prompt_tokens: int) -> None:
        self.request_id = self.request_id or request_id
        self.tenant = self.tenant or (tenant or "")
        self.prompt_tokens += prompt_tokens

    def write(self, code: str) -> None:
        access_log.info(
            "%s %s request_id=%s tenant=%s prompt_tokens=%d completion_tokens=%d "
            "latency_ms=%.1f", self.method, code, logged(self.request_id or "-"),
            logged(self.tenant or "-"), self.prompt_tokens, self.completion_tokens,
            (time.monotonic() - self.started) * 1000)


def logged(text: str) -> str:
    """A caller's text as one token of an access-log line: as given when it
    is printable and has no space, else escaped (a newline as \\n, a space
    as \\x20), so no value can start a line or a field of its own (the
    request ids are checked on the way in too: inference/shared/identity.py)."""
    if text.isprintable() and " " not in text and "\\" not in text:
        return text
    escaped = text.encode("unicode_escape").decode("ascii")
    return escaped.replace(" ", "\\x20")


# The running RPC's record (None outside an RPC, or with the log off).
current_access: contextvars.ContextVar[AccessRecord | None] = contextvars.ContextVar(
    "current_access", default=None)


def _open_access(details: grpc.HandlerCallDetails, method: str) -> AccessRecord | None:
    if not access_log.isEnabledFor(logging.INFO) or details.method.lstrip("/").startswith(
            QUIET_SERVICES):
        return None
    request_id = ""
    for key, value in details.invocation_metadata or ():
        if key == "x-request-id":
            request_id = value if isinstance(value, str) else value.decode(errors="replace")
    record = AccessRecord(method, request_id)
    current_access.set(record)
    return record


def _code(context: grpc.aio.ServicerContext, failed: BaseException | None) -> str:
    if isinstance(failed, asyncio.CancelledError):
        return "CANCELLED"
    code = context.code()
    if code is None:
        return "OK" if failed is None else "UNKNOWN"
    return code.name if isinstance(code, grpc.StatusCode) else str(code)


class MetricsInterceptor(HandlerInterceptor):
    """Counts every finished RPC by method and status code."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def intercept(self, handler: grpc.RpcMethodHandler,
                  details: grpc.HandlerCallDetails) -> grpc.RpcMethodHandler:
        method = details.method.rsplit("/", 1)[-1]
        counter = self.metrics.requests

        async def start(request: Any, context: grpc.aio.ServicerContext) -> Finish:
            record = _open_access(details, method)

            def finish(failed: BaseException | None) -> None:
                code = _code(context, failed)
                counter.labels(method, code).inc()
                if record is not None:
                    record.write(code)

            return finish

        return wrap_handler(handler, start)
