"""Several serving processes over one vLLM engine core (--api-server-count
N): vLLM's multi-API-server mode, started for tokenwire's gRPC workers."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.vllm.args import (
    engine_env,
    programmatic_engine_args,
    stats_for_tracing,
)


def run_shared_engine(settings: ServerSettings, worker: Any) -> None:
    """vLLM's multi-API-server mode for tokenwire: start one engine core and
    settings.api_server_count processes running `worker(settings,
    client_config)` (each builds VllmEngine(settings, client_config) and
    serves on the shared port); return when they have all exited (SIGTERM
    or SIGINT here stops them, then the engine core)."""
    import signal

    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.utils import bind_engine_zmq_listeners, launch_core_engines
    from vllm.v1.executor import Executor
    from vllm.v1.metrics.prometheus import setup_multiprocess_prometheus
    from vllm.v1.utils import APIServerProcessManager, wait_for_completion_or_failure

    engine_env()
    # vLLM's metrics of every serving process in one folder (as `vllm serve
    # --api-server-count N` does), read back as one aggregate by process 0's
    # /metrics (core/metrics.py EngineMetrics).
    setup_multiprocess_prometheus()
    count = settings.api_server_count
    args = AsyncEngineArgs(**stats_for_tracing(
        dict(settings.engine_args) or programmatic_engine_args(settings)))
    args._api_process_count, args._api_process_rank = count, -1
    config = args.create_engine_config()
    listeners = bind_engine_zmq_listeners(config, count)

    def stop(signum: int, frame: object) -> None:
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop)
    manager = None
    with launch_core_engines(config, Executor.get_class(config), not args.disable_log_stats,
                             listeners.addresses) as launch:
        coordinator = launch.coordinator
        manager = APIServerProcessManager(
            listen_address=f"{settings.host}:{settings.port}", sock=None, args=settings,
            num_servers=count, input_listeners=listeners.inputs,
            output_listeners=listeners.outputs, target_server_fn=worker,
            stats_update_address=coordinator.get_stats_publish_address() if coordinator else None,
        )
        launch.watched_frontend_processes = manager.processes
    try:
        wait_for_completion_or_failure(api_server_manager=manager,
                                       engine_manager=launch.engine_manager,
                                       coordinator=coordinator)
    except SystemExit:
        pass
    finally:
        manager.shutdown(timeout=settings.grace_seconds + settings.drain_seconds + 5)
        if launch.engine_manager:
            launch.engine_manager.shutdown(timeout=30)
        if coordinator:
            coordinator.shutdown(timeout=30)
