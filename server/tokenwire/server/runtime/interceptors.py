"""The gRPC server's interceptor chain, from the settings: metrics, a span
per RPC (--otlp-traces-endpoint), the API keys, and control access."""

from __future__ import annotations

from typing import TYPE_CHECKING

import grpc

from tokenwire.server.core.metrics import Metrics, MetricsInterceptor
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.security.auth import ApiKeyInterceptor, ControlAccessInterceptor, proxies_of
from tokenwire.server.security.tenancy import Tenancy

if TYPE_CHECKING:
    from tokenwire.server.api.tracing import Tracing


def server_interceptors(
    settings: ServerSettings, metrics: Metrics, tenancy: Tenancy
) -> tuple[list[grpc.aio.ServerInterceptor], Tracing | None]:
    """The interceptors in their order, and the tracer (None: no
    --otlp-traces-endpoint). ValueError: the admin key is an inference key."""
    interceptors: list[grpc.aio.ServerInterceptor] = [MetricsInterceptor(metrics)]
    inference_keys = [k for k in (*settings.api_keys(), *(t.key for t in tenancy.keys)) if k]
    if settings.admin_api_key and settings.admin_api_key in inference_keys:
        raise ValueError("--admin-api-key must differ from --api-key "
                         "(the inference key never grants control)")
    tracing = None  # outside the key check: a refused call is traced too
    if settings.otlp_traces_endpoint:  # a span per RPC (off: no tracer at all)
        from tokenwire.server.api.tracing import Tracing

        tracing = Tracing(settings.otlp_traces_endpoint, process_index=settings.process_index)
        interceptors.append(tracing.interceptor)
    if inference_keys:
        interceptors.append(ApiKeyInterceptor(inference_keys, open_probes=settings.open_probes,
                                              admin_key=settings.admin_api_key))
    interceptors.append(ControlAccessInterceptor(  # control, and GetStats
        settings.admin_api_key, proxies=proxies_of(settings.trusted_proxy),
        tenant_keys=[t.key for t in tenancy.keys]))
    return interceptors, tracing
