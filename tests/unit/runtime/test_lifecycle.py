"""Process-level behaviour: graceful SIGTERM, and a client without vLLM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import grpc
import pytest

from tests.rpc import chat_request, stream_ids
from tests.servers import ProcessServer
from tokenwire.v1 import service_pb2_grpc

pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


def test_sigterm_lets_inflight_stream_finish_then_exits_zero(transport) -> None:
    server = ProcessServer(
        ["--engine", "fake", "--fake-token-delay", "0.01", "--grace-seconds", "10",
         "--grpc-transport", transport]
    )
    server.start(timeout=60)
    try:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            call = stub.StreamChatCompletion(
                chat_request(ignore_eos=True, max_tokens=150, return_token_ids=True), timeout=30
            )
            chunks = [next(call), next(call)]
            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            time.sleep(0.3)
            # New work is refused while the in-flight stream drains.
            with pytest.raises(grpc.RpcError) as exc_info:
                stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=5)
            assert exc_info.value.code() == grpc.StatusCode.UNAVAILABLE
            chunks += list(call)
            assert len(stream_ids(chunks)[0]) == 150
            assert chunks[-1].choices[0].finish_reason == "length"
        assert server.proc.wait(30) == 0
    finally:
        server.stop()


def test_client_imports_without_vllm() -> None:
    code = (
        "import sys; sys.modules['vllm'] = None; sys.modules['torch'] = None\n"
        "import tokenwire.v1.service_pb2_grpc, tokenwire.client, tokenwire.cli\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "ok"


def test_drain_window_reports_not_serving_before_refusing(transport) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from tests.servers import ThreadServer
    from tokenwire.server.core.settings import ServerSettings
    from tokenwire.server.engine.fake.engine import FakeEngine

    server = ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                         grpc_transport=transport),
                          FakeEngine(max_model_len=512)).start()
    stopping = server.submit(server._running.stop(5.0, drain=1.5))
    with grpc.insecure_channel(server.address) as ch:
        stub = service_pb2_grpc.TokenwireServiceStub(ch)
        health = health_pb2_grpc.HealthStub(ch)
        deadline = time.monotonic() + 5
        while health.Check(health_pb2.HealthCheckRequest(), timeout=5).status == \
                health_pb2.HealthCheckResponse.SERVING:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        # Health says NOT_SERVING, yet a new call inside the window is served.
        ok = stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=5)
        assert ok.choices[0].finish_reason == "length"
        # After the window, new calls are refused.
        time.sleep(1.8)
        with pytest.raises(grpc.RpcError):
            stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=5)
    stopping.result(30)


def _health(address: str) -> int:
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as ch:
        return (
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
        )


def _until(check) -> None:
    deadline = time.monotonic() + 10
    while not check():
        assert time.monotonic() < deadline, "not within the time"
        time.sleep(0.02)


def test_a_resume_while_draining_leaves_health_not_serving() -> None:
    """--unhealthy-while-paused: a paused replica that starts shutting down
    stays NOT_SERVING when someone resumes it during --drain-seconds."""
    from grpc_health.v1 import health_pb2

    from tests.servers import ThreadServer
    from tokenwire.client import Client
    from tokenwire.server.core.settings import ServerSettings
    from tokenwire.server.engine.fake.engine import FakeEngine

    server = ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                         enable_control=True, unhealthy_while_paused=True),
                          FakeEngine(max_model_len=512)).start()
    running = server._running
    stopping = None
    try:
        with Client(server.address, timeout=10) as client:
            client.control.pause("keep")
            stopping = server.submit(running.stop(5.0, drain=120))  # type: ignore[attr-defined]
            _until(lambda: running.health.stopping)  # type: ignore[attr-defined]
            assert not client.control.resume().paused
            assert _health(server.address) == health_pb2.HealthCheckResponse.NOT_SERVING
            # Still draining: new calls are served, the health is what moved.
            assert client.chat(messages="hi", max_tokens=2).choices[0].finish_reason == "length"
    finally:
        if stopping is not None:
            stopping.cancel()  # the rest of the drain is not needed
        server.stop()


def test_serving_process_freezes_its_startup_heap() -> None:
    """After startup the GC's full collections no longer scan what startup
    built (issue #27: 9 % of the serving process's samples under load)."""
    code = (
        "import asyncio, gc, os, signal\n"
        "from tokenwire.server.runtime import app\n"
        "from tokenwire.server.core.settings import ServerSettings\n"
        "async def main():\n"
        "    task = asyncio.create_task(app.serve(ServerSettings(engine='fake', port=0, "
        "max_model_len=256)))\n"
        "    while gc.get_freeze_count() == 0 and not task.done():\n"
        "        await asyncio.sleep(0.05)\n"
        "    print('frozen', gc.get_freeze_count(), flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGTERM)\n"
        "    print('exit', await task, flush=True)\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = dict(
        line.split(" ", 1)
        for line in out.stdout.splitlines()
        if line.startswith(("frozen", "exit"))
    )
    assert int(lines["frozen"]) > 10_000, out.stdout + out.stderr  # the whole startup heap
    assert lines["exit"] == "0"
