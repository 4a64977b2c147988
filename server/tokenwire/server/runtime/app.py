"""Server lifecycle: engine start, warm-up, gRPC server, health, shutdown.

Shutdown order: health NOT_SERVING -> drain (--drain-seconds: new calls
still served while load balancers notice) -> new calls refused ->
server.stop(grace) (in-flight calls may finish; the rest are cancelled,
which aborts their engine requests) -> engine shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from smg_grpc_proto.generated import vllm_engine_pb2_grpc

from tokenwire.server.api.fronts import VLLM_ENGINE_SERVICE
from tokenwire.server.api.servicer import EventStreamServicer, TokenwireServicer
from tokenwire.server.api.vllm_engine import VllmEngineServicer
from tokenwire.server.control.plane import ControlPlane
from tokenwire.server.control.relay import ControlRelay, token_from_environment
from tokenwire.server.control.servicer import ControlServicer
from tokenwire.server.core.admission import Admission
from tokenwire.server.core.domain import (
    Engine,
    EngineRequest,
    GenerationParams,
    RenderOptions,
)
from tokenwire.server.core.errors import TokenwireError
from tokenwire.server.core.metrics import Metrics
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.guarded import GuardedEngine
from tokenwire.server.inference.continuation_store import ContinuationStore
from tokenwire.server.inference.data_plane import DataPlane
from tokenwire.server.inference.offload import Offload
from tokenwire.server.inference.prefill import Prefiller
from tokenwire.server.inference.turns import TurnTemplates
from tokenwire.server.runtime.interceptors import server_interceptors
from tokenwire.server.runtime.transport import listen, make_server, sockets_server, stop_server
from tokenwire.server.security.auth import check_exposure
from tokenwire.server.security.tenancy import Tenancy
from tokenwire.v1 import (
    control_pb2,
    control_pb2_grpc,
    events_pb2,
    events_pb2_grpc,
    service_pb2,
    service_pb2_grpc,
)

if TYPE_CHECKING:
    from tokenwire.server.api.tracing import Tracing

log = logging.getLogger("tokenwire.server")

SERVICE_NAME = service_pb2.DESCRIPTOR.services_by_name["TokenwireService"].full_name
EVENTS_SERVICE_NAME = events_pb2.DESCRIPTOR.services_by_name["EventStreamService"].full_name
CONTROL_SERVICE_NAME = control_pb2.DESCRIPTOR.services_by_name["ControlService"].full_name


def make_engine(settings: ServerSettings) -> Engine:
    if settings.engine == "fake":
        from tokenwire.server.engine.fake.engine import FakeEngine

        return FakeEngine(
            max_model_len=settings.max_model_len,
            block_size=settings.block_size,
            token_delay=settings.fake_token_delay,
        )
    from tokenwire.server.engine.vllm.adapter import VllmEngine

    return VllmEngine(settings)


def freeze_startup_heap() -> None:
    """Move what startup built (vLLM, torch, the tokenizer, the servicers:
    alive as long as the process) to the garbage collector's permanent
    generation, so that its full collections while serving scan only what
    requests allocate. Unfrozen, they scanned the whole startup heap: 9 %
    of the serving process's samples under load (docs/bench.md), and a
    stall of every stream at each one. vLLM's own servers do the same."""
    gc.collect()
    gc.freeze()


async def warm_up(engine: Engine) -> None:
    """One request with logprobs through the whole engine path: compiles the
    logprobs kernel and surfaces faults that only show on a first request."""
    prompt = engine.render_chat([{"role": "user", "content": "Hello"}], RenderOptions())
    params = GenerationParams(temperature=0.0, max_tokens=2, logprobs=1)
    request = EngineRequest("warmup", prompt, params, stream=False)
    async for _ in engine.generate(request):
        pass


def build_data_plane(
    engine: Engine, settings: ServerSettings, state: ServingState, tenancy: Tenancy
) -> DataPlane:
    """Every object the calls share, built once: continuation store, turn
    templates, speculative prefiller, tenancy, and the data plane over them."""
    store = ContinuationStore(
        max_tokens=settings.continuation_max_tokens,
        session_max_tokens=settings.continuation_session_max_tokens,
        session_max_requests=settings.continuation_session_max_requests,
    )
    turns = TurnTemplates(engine)
    prefiller = Prefiller(engine, settings, state, turns)
    return DataPlane(engine, settings, state, store=store, turns=turns, prefiller=prefiller,
                     tenancy=tenancy)


async def load_lora_modules(control: ControlPlane, modules: tuple[str, ...],
                            follower: bool = False) -> None:
    """--lora-modules NAME=PATH ...: load each with the control plane's
    checks; a bad one is logged and the server goes on serving the base
    model (and the others). A `follower` (serving process i > 0) skips one
    it serves already: process 0's load, taken from it (control/relay.py)."""
    for spec in modules:
        name, _, path = spec.partition("=")
        if follower and name in control.engine.lora_names():
            continue
        try:
            await control.load_lora(name, path, False, None)
            log.info("LoRA adapter %s loaded from %s", name, path)
        except TokenwireError as err:
            log.error("LoRA adapter %r not loaded: %s", spec, err.message)


class HealthReport:
    """What grpc.health.v1 says, decided in one place: SERVING only while the
    server accepts work, is not shutting down, and (--unhealthy-while-paused)
    generation is not paused. Shutting down wins: a Resume during the drain
    (here, or mirrored from process 0) leaves the server NOT_SERVING."""

    def __init__(self, servicer: health.aio.HealthServicer,  # type: ignore[name-defined]
                 state: ServingState, *, unhealthy_while_paused: bool):
        self.servicer = servicer
        self._state = state
        self._unhealthy_while_paused = unhealthy_while_paused
        self._paused = False
        self.stopping = False

    async def update(self) -> None:
        serving = (self._state.serving and not self.stopping
                   and not (self._unhealthy_while_paused and self._paused))
        status = (health_pb2.HealthCheckResponse.SERVING if serving
                  else health_pb2.HealthCheckResponse.NOT_SERVING)
        for name in ("", SERVICE_NAME):
            await self.servicer.set(name, status)

    async def on_paused(self, paused: bool) -> None:
        """The control plane (or the relay's mirror) paused or resumed."""
        self._paused = paused
        await self.update()


@dataclass
class RunningServer:
    server: grpc.aio.Server
    port: int
    engine: Engine
    state: ServingState
    health: HealthReport
    metrics: Metrics
    control: ControlPlane
    metrics_port: int = 0
    offload: Offload | None = None
    relay: ControlRelay | None = None  # several serving processes with control
    mirror: asyncio.Task[None] | None = None  # following process 0's control state
    tracing: Tracing | None = None  # with --otlp-traces-endpoint
    sockets: grpc.aio.Server | None = None  # the relay's socket, when not on `server`

    async def set_serving(self, serving: bool) -> None:
        self.state.serving = serving
        await self.health.update()

    async def stop(self, grace: float, drain: float = 0.0) -> None:
        """Health NOT_SERVING; for `drain` seconds new calls are still
        served (load balancers see the health change before any refusal);
        then new calls are refused, in-flight ones get `grace` seconds."""
        self.health.stopping = True  # from here on NOT_SERVING, whatever control does
        await self.health.update()
        if drain > 0:
            log.info("draining: health NOT_SERVING, new calls accepted for %.1fs", drain)
            await asyncio.sleep(drain)
        await self.set_serving(False)
        await asyncio.gather(*(stop_server(s, grace, self.state.idle)
                               for s in (self.server, self.sockets) if s))
        if self.mirror is not None:
            self.mirror.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.mirror
        if self.relay is not None:
            await self.relay.close()
        await self.state.cancel_background()
        if self.offload is not None:
            self.offload.shutdown()
        self.engine.shutdown()
        if self.tracing is not None:  # the spans still queued
            await self.tracing.shutdown()


async def start(settings: ServerSettings, engine: Engine) -> RunningServer:
    """Start the gRPC server on an already built engine (NOT_SERVING until
    the warm-up went through)."""
    options = [
        ("grpc.max_receive_message_length", settings.max_message_bytes),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        # Several serving processes share the port; one alone must not share it.
        ("grpc.so_reuseport", 1 if settings.api_server_count > 1 else 0),
    ]
    metrics = Metrics()
    check_exposure(settings)
    tenancy = Tenancy.from_settings(settings)
    interceptors, tracing = server_interceptors(settings, metrics, tenancy)
    server = make_server(settings, options, interceptors)  # --grpc-transport
    sockets = sockets_server(server, settings, options, interceptors)
    state = ServingState()
    metrics.watch_weights(state)  # the served weights as gauges (a router reads them)
    admission = Admission(settings.max_concurrent_requests, settings.max_admitted_tokens,
                          tenancy.limits)  # and each tenant's caps from --api-keys-file
    guarded = GuardedEngine(engine, admission, metrics, state,
                            salt_by_version=settings.salt_cache_by_version)
    metrics.engine_requests.set_function(engine.num_unfinished_requests)
    plane = build_data_plane(guarded, settings, state, tenancy)  # type: ignore[arg-type]
    service_pb2_grpc.add_TokenwireServiceServicer_to_server(TokenwireServicer(plane), server)
    events_pb2_grpc.add_EventStreamServiceServicer_to_server(EventStreamServicer(plane), server)
    vllm_engine_pb2_grpc.add_VllmEngineServicer_to_server(VllmEngineServicer(plane), server)
    health_servicer = health.aio.HealthServicer()
    health_report = HealthReport(health_servicer, state,
                                 unhealthy_while_paused=settings.unhealthy_while_paused)
    # --unhealthy-while-paused: a paused replica reports NOT_SERVING, so a
    # fleet gateway sends new calls elsewhere during its update.
    paused_health = health_report.on_paused if settings.unhealthy_while_paused else None

    control = ControlPlane(
        engine, state, timeout=settings.control_timeout_seconds,  # type: ignore[arg-type]
        engine_requests=engine.num_unfinished_requests,
        on_paused=paused_health, weights_root=settings.weights_root,
        collective_rpc_allow=settings.collective_rpc_allow,
        served_names=settings.accepted_names(),  # the served names and the folder alias
    )
    relay = _add_control((server, sockets), settings, control, state, paused_health)
    names = [SERVICE_NAME, EVENTS_SERVICE_NAME, VLLM_ENGINE_SERVICE]
    if settings.enable_control:
        names.append(CONTROL_SERVICE_NAME)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable_server_reflection(
        (*names, health.SERVICE_NAME, reflection.SERVICE_NAME), server
    )
    port = listen(server, settings, sockets)
    await asyncio.gather(*(s.start() for s in (server, sockets) if s))
    running = RunningServer(server, port, engine, state, health_report, metrics, control,
                            offload=plane.offload, relay=relay, tracing=tracing, sockets=sockets)
    await running.set_serving(False)
    await _bring_up(running, settings)
    log.info("tokenwire serving %s on %s:%d", settings.resolved_served_name(), settings.host, port)
    return running


def _add_control(servers: tuple[grpc.aio.Server, grpc.aio.Server | None],
                 settings: ServerSettings, control: ControlPlane, state: ServingState,
                 paused_health: Callable[[bool], Awaitable[None]] | None) -> ControlRelay | None:
    """--enable-control: the control service, or with several serving
    processes the relay to process 0's (returned; None without one)."""
    if not settings.enable_control:
        return None
    if not settings.control_sockets:
        control_pb2_grpc.add_ControlServiceServicer_to_server(ControlServicer(control), servers[0])
        return None
    relay = ControlRelay(  # several serving processes: process 0 runs control
        settings.process_index, settings.control_sockets, ControlServicer(control), state,
        token=token_from_environment(), admin_key=settings.admin_api_key,
        on_paused=paused_health,
    )
    for server in filter(None, servers):  # and the sockets' own server on native
        relay.serve_on(server)
    if not relay.leader:
        state.refresh = relay.refresh_quietly
    else:  # the others end their bounded requests before generation resumes
        control.on_weights_changed = relay.tell_followers
    return relay


async def _bring_up(running: RunningServer, settings: ServerSettings) -> None:
    """From NOT_SERVING to SERVING: the metrics port, the initial weight
    version (a follower mirrors process 0's), --lora-modules, the warm-up."""
    control, engine, relay = running.control, running.engine, running.relay
    if settings.metrics_port:
        # The engine's metrics (vLLM's vllm:*, of every serving process) on
        # process 0's port only: summing the ports counts them once.
        running.metrics_port = running.metrics.serve(settings.metrics_host, settings.metrics_port,
                                                     engine=settings.process_index == 0)
    if relay is not None and not relay.leader:
        await control.start("")  # process 0 sets the initial version
        running.mirror = asyncio.create_task(relay.mirror())
    else:
        await control.start(settings.weight_version)
    await load_lora_modules(control, settings.lora_modules,
                            follower=relay is not None and not relay.leader)
    if relay is not None and relay.leader:  # (each process loaded --lora-modules itself)
        control.publish_loras = relay.publish_loras
    if settings.warmup and not engine.pooling:  # (a pooling model does not generate)
        await warm_up(engine)
    await running.set_serving(True)


async def watch_engine(running: RunningServer, period: float, dead: asyncio.Event) -> None:
    """Probe the engine; when it dies, report NOT_SERVING and wake serve()."""
    while True:
        await asyncio.sleep(period)
        try:
            await running.engine.check_health()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.error("the engine is dead (%s): NOT_SERVING, exiting", exc)
            await running.set_serving(False)
            dead.set()
            return


async def serve(
    settings: ServerSettings, engine_factory: Callable[[ServerSettings], Engine] = make_engine
) -> int:
    """Run until SIGTERM/SIGINT (exit 0) or engine death (exit 1)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    engine = engine_factory(settings)
    try:
        running = await start(settings, engine)
    except BaseException:
        engine.shutdown()
        raise
    freeze_startup_heap()
    scheme = "plaintext" if not settings.tls_cert else "mtls" if settings.ssl_cert_reqs else "tls"
    print(f"tokenwire: serving on {settings.host}:{running.port} ({scheme})", flush=True)
    dead = asyncio.Event()
    watchdog = asyncio.create_task(watch_engine(running, settings.health_check_seconds, dead))
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait([watchdog, stopped], return_when=asyncio.FIRST_COMPLETED)
    watchdog.cancel()
    stopped.cancel()
    if dead.is_set():
        # In-flight calls fail with UNAVAILABLE (engine dead); do not wait long.
        await running.stop(min(1.0, settings.grace_seconds))
        return 1
    log.info("shutting down (drain %.1fs, grace %.1fs)", settings.drain_seconds,
             settings.grace_seconds)
    await running.stop(settings.grace_seconds, settings.drain_seconds)
    return 0
