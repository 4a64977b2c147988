"""Control with several serving processes (control/relay.py), on fake
engines: process 0 runs every control call, the others relay to it over a
private Unix socket and mirror its paused flag and weight version;
AbortRequests reaches every process. Here the two "processes" are two
servers in this test process, each with its own fake engine (with vLLM they
share one engine core: tests/engine/test_frontends_engine.py)."""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import os
import time
from types import SimpleNamespace

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.rpc import StreamReader, chat_request, error_info
from tests.servers import ThreadServer
from tests.unit.control.relay_pair import TOKEN, start_pair
from tokenwire.server.control import relay as relay_module
from tokenwire.server.control.relay import LOCAL_HEADER, TOKEN_ENV, TOKEN_HEADER, ControlRelay
from tokenwire.server.core.serving_state import ServingState
from tokenwire.server.core.settings import ServerSettings
from tokenwire.v1 import (
    common_pb2,
    control_pb2,
    control_pb2_grpc,
    generate_pb2,
    models_pb2,
    service_pb2_grpc,
)

# On grpc.aio and pygrpc-native (tests/conftest.py): the relay's methods are
# registered ones, which native serves itself (runtime/transport.py).
pytestmark = pytest.mark.transports


@pytest.fixture(scope="module")
def pair(tmp_path_factory,
         transport) -> collections.abc.Iterator[tuple[ThreadServer, ThreadServer]]:
    servers = start_pair(tmp_path_factory.mktemp("ctl"), grpc_transport=transport)
    assert [s.transport for s in servers] == [transport, transport]  # no fallback
    yield servers[0], servers[1]
    for server in servers:
        server.stop()


def _control(server: ThreadServer) -> tuple[grpc.Channel, control_pb2_grpc.ControlServiceStub]:
    channel = grpc.insecure_channel(server.address)
    return channel, control_pb2_grpc.ControlServiceStub(channel)


def _stats(server: ThreadServer) -> models_pb2.GetStatsResponse:
    with grpc.insecure_channel(server.address) as ch:
        return service_pb2_grpc.TokenwireServiceStub(ch).GetStats(models_pb2.GetStatsRequest(),
                                                                  timeout=5)


def _health(server: ThreadServer) -> int:
    with grpc.insecure_channel(server.address) as ch:
        return (
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5).status
        )


def _eventually(check, timeout: float = 3.0) -> None:
    end = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < end, "not within the time"
        time.sleep(0.02)


def test_a_call_to_any_process_runs_on_process_0(pair) -> None:
    leader, follower = pair
    ch0, control0 = _control(leader)
    ch1, control1 = _control(follower)
    with ch0, ch1:
        try:
            state = control1.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10)
            assert state.state.paused and state.state.pause_mode == "keep"
            assert control0.IsPaused(control_pb2.IsPausedRequest(), timeout=5).is_paused
            assert _stats(leader).paused
            # The follower mirrors it: its own state, and its health
            # (--unhealthy-while-paused: a fleet gateway stops sending to it).
            _eventually(lambda: _stats(follower).paused)
            _eventually(lambda: _health(follower) == health_pb2.HealthCheckResponse.NOT_SERVING)
        finally:
            control1.Resume(control_pb2.ResumeRequest(), timeout=10)
        _eventually(lambda: not _stats(follower).paused)
        _eventually(lambda: _health(follower) == health_pb2.HealthCheckResponse.SERVING)
        assert not control0.IsPaused(control_pb2.IsPausedRequest(), timeout=5).is_paused


def test_a_new_version_is_served_at_once_by_every_process(pair) -> None:
    leader, follower = pair
    ch1, control1 = _control(follower)
    with ch1, grpc.insecure_channel(follower.address) as infer_ch:
        control1.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="step-7"),
                                  timeout=10)
        assert _stats(leader).weight_version == "step-7"
        # Right away, before the follower's next poll: it reads process 0's
        # version again instead of refusing.
        infer = service_pb2_grpc.TokenwireServiceStub(infer_ch)
        resp = infer.Generate(generate_pb2.GenerateRequest(
            token_ids=[10, 11], sampling_params=common_pb2.SamplingParams(max_tokens=2)),
            metadata=(("x-min-weight-version", "step-7"),), timeout=10)
        assert resp.choices[0].token_ids
        assert _stats(follower).weight_version == "step-7"
        with pytest.raises(grpc.RpcError) as exc:
            infer.Generate(generate_pb2.GenerateRequest(
                token_ids=[10, 11], sampling_params=common_pb2.SamplingParams(max_tokens=2)),
                metadata=(("x-min-weight-version", "step-8"),), timeout=10)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert error_info(exc.value).reason == "WEIGHT_VERSION_BEHIND"


def test_errors_come_back_as_process_0_gave_them(pair) -> None:
    _, follower = pair
    ch1, control1 = _control(follower)
    with ch1:
        with pytest.raises(grpc.RpcError) as exc:
            control1.Pause(control_pb2.PauseRequest(mode="sideways"), timeout=5)
        assert exc.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        info = error_info(exc.value)
        assert info.reason == "VALUE_NOT_ALLOWED" and info.metadata["param"] == "mode"
        trailers = dict(exc.value.trailing_metadata())
        assert trailers["tokenwire-reason"] == "VALUE_NOT_ALLOWED"


def test_abort_reaches_the_process_holding_the_request(pair) -> None:
    leader, follower = pair
    ch0, control0 = _control(leader)
    with ch0, grpc.insecure_channel(follower.address) as infer_ch:
        infer = service_pb2_grpc.TokenwireServiceStub(infer_ch)
        reader = StreamReader(infer.StreamChatCompletion(
            chat_request(max_tokens=400, ignore_eos=True, return_token_ids=True), timeout=30))
        reader.wait_ids(2)
        running = sorted(follower.engine.running)
        assert running and not leader.engine.running
        # A caller's own "this process only" mark counts only on the sockets.
        resp = control0.AbortRequests(control_pb2.AbortRequestsRequest(request_ids=running),
                                      metadata=((LOCAL_HEADER, "1"),), timeout=5)
        assert resp.status == "aborted" and resp.aborted == len(running)
        reader.join(10)
        assert [c.finish_reason for m in reader.msgs for c in m.choices if c.finish_reason] == \
            ["abort"]


def test_a_bounded_request_on_another_process_ends_at_the_update(pair) -> None:
    """Weight bounds (issue #26) with several serving processes: process 1
    reads process 0's version and generation before admitting a bounded
    request; process 0 has it end the requests an update breaks before the
    update returns (before generation resumes); an announce made on process
    0 fences process 1 too."""
    leader, follower = pair
    ch0, control0 = _control(leader)
    with ch0, grpc.insecure_channel(follower.address) as infer_ch:
        infer = service_pb2_grpc.TokenwireServiceStub(infer_ch)
        control0.SetWeightVersion(
            control_pb2.SetWeightVersionRequest(new_version="pin-a"), timeout=10
        )
        # Admitted at once on process 1 (read again, not refused as another version).
        reader = StreamReader(infer.StreamChatCompletion(chat_request(
            max_tokens=400, ignore_eos=True, return_token_ids=True,
            nvext={"exact_weight_version": "pin-a"}), timeout=60))
        reader.wait_ids(5)
        bounds = follower._running.state.bounds  # type: ignore[attr-defined]
        before = bounds.ended["WEIGHT_VERSION_CHANGED"]
        control0.SetWeightVersion(
            control_pb2.SetWeightVersionRequest(new_version="pin-b"), timeout=10
        )
        # Process 0 had process 1 end it before its own call returned (not a mirror period later).
        assert bounds.ended["WEIGHT_VERSION_CHANGED"] == before + 1
        reader.join(30)
        assert not reader.is_alive() and reader.error is None, reader.error
        final = [c for m in reader.msgs for c in m.choices if c.finish_reason][-1]
        assert final.finish_reason == "abort"
        # Ended before the label changed (SetWeightVersion ends them first):
        # the generation names the change.
        assert final.stop_reason.string_value.startswith(
            "WEIGHT_VERSION_CHANGED: weight version 'pin-a' -> "
        )
        assert "(update generation " in final.stop_reason.string_value
        assert len(reader.ids()) < 400
        control0.AnnounceWeightVersion(
            control_pb2.AnnounceWeightVersionRequest(weight_version="pin-c"), timeout=10
        )
        try:
            with pytest.raises(grpc.RpcError) as exc:
                infer.CreateChatCompletion(chat_request(max_tokens=2, nvext={"max_weight_lag": 0}),
                                           timeout=10)
            assert error_info(exc.value).reason == "WEIGHT_LAG_BEHIND"
        finally:
            control0.AnnounceWeightVersion(control_pb2.AnnounceWeightVersionRequest(), timeout=10)


def test_the_sockets_refuse_control_without_the_relay_token(pair) -> None:
    leader, follower = pair
    for server in (leader, follower):
        socket = server.settings.control_sockets[server.settings.process_index]
        assert os.stat(socket).st_mode & 0o777 == 0o600
        with grpc.insecure_channel(f"unix:{socket}") as ch:
            control = control_pb2_grpc.ControlServiceStub(ch)
            for metadata in ((), ((TOKEN_HEADER, "guessed"),)):
                with pytest.raises(grpc.RpcError) as exc:
                    control.Pause(control_pb2.PauseRequest(mode="abort"), metadata=metadata,
                                  timeout=5)
                assert exc.value.code() == grpc.StatusCode.UNAUTHENTICATED
                assert error_info(exc.value).reason == "RELAY_TOKEN_INVALID"
            with pytest.raises(grpc.RpcError) as exc:
                control.AbortRequests(control_pb2.AbortRequestsRequest(),
                                      metadata=((LOCAL_HEADER, "1"),), timeout=5)
            assert error_info(exc.value).reason == "RELAY_TOKEN_INVALID"
            # With this launch's token the socket serves (as it does the relay).
            assert not control.IsPaused(control_pb2.IsPausedRequest(),
                                        metadata=((TOKEN_HEADER, TOKEN),), timeout=5).is_paused
    assert not _stats(leader).paused


def test_each_launch_has_its_own_token_and_a_private_folder(tmp_path, monkeypatch) -> None:
    from tokenwire.server.runtime.frontends import control_sockets

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    tokens = []
    for launch in ("a", "b"):
        folder = tmp_path / launch
        folder.mkdir(mode=0o755)
        settings = control_sockets(ServerSettings(api_server_count=3, enable_control=True),
                                   str(folder))
        assert settings.control_sockets == tuple(str(folder / f"p{i}.sock") for i in range(3))
        assert os.stat(folder).st_mode & 0o777 == 0o700
        tokens.append(os.environ[TOKEN_ENV])
    assert tokens[0] != tokens[1] and min(map(len, tokens)) >= 32


def test_a_resume_mirrored_while_draining_leaves_health_not_serving(tmp_path, transport) -> None:
    """--unhealthy-while-paused: process 1 starts shutting down while
    paused; a Resume through process 0 reaches it by the mirror, and it
    stays NOT_SERVING (shutting down wins)."""
    leader, follower = start_pair(tmp_path, grpc_transport=transport)
    stopping = None
    try:
        ch0, control0 = _control(leader)
        with ch0:
            control0.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10)
            _eventually(lambda: _stats(follower).paused)
            running = follower._running
            stopping = follower.submit(running.stop(5.0, drain=120))  # type: ignore[attr-defined]
            _eventually(lambda: running.health.stopping)  # type: ignore[attr-defined]
            control0.Resume(control_pb2.ResumeRequest(), timeout=10)
            _eventually(lambda: not _stats(follower).paused)  # the mirror saw it
            assert _health(leader) == health_pb2.HealthCheckResponse.SERVING
            assert _health(follower) == health_pb2.HealthCheckResponse.NOT_SERVING
    finally:
        if stopping is not None:
            stopping.cancel()  # the rest of the drain is not needed
        for server in (follower, leader):
            server.stop()


# -- the serving path's reads of process 0's state (issue #32 item 10) ---------

class _Reads:
    """A counting stand-in for the relay's GetControlState call to process 0."""

    def __init__(self) -> None:
        self.count = 0
        self.state = control_pb2.ControlState(weight_version="v1")
        self.gate = asyncio.Event()

    async def __call__(self) -> control_pb2.ControlState:
        self.count += 1
        await self.gate.wait()
        return control_pb2.ControlState(weight_version=self.state.weight_version)


def test_concurrent_bounded_requests_share_one_read_and_skip_it_while_fresh() -> None:
    async def run() -> None:
        state = ServingState()
        local = SimpleNamespace(plane=SimpleNamespace(follow_bounds=None,
                                                      engine=SimpleNamespace(lora_names=list)))
        relay = ControlRelay(1, ("p0", "p1"), local, state, token=TOKEN)  # type: ignore[arg-type]
        reads, now = _Reads(), [1000.0]
        relay._read_state = reads  # type: ignore[method-assign]
        relay._clock = lambda: now[0]  # type: ignore[method-assign]
        # What app.py gives the serving path (engine/guarded.py, api/call_metadata.py).
        refresh = relay.refresh_quietly
        waiting = [asyncio.create_task(refresh()) for _ in range(50)]
        await asyncio.sleep(0)
        reads.gate.set()
        await asyncio.gather(*waiting)
        assert reads.count == 1, "50 concurrent requests, one read"
        assert state.weight_version == "v1"
        await refresh()
        assert reads.count == 1, "fresh: not read again"
        now[0] += relay_module.FRESH_S
        await refresh()
        assert reads.count == 2, "stale: read again"
        # Process 0's push (x-tokenwire-relay-refresh) reads now, fresh or not,
        # and the next request sees the new state without another read.
        reads.state.weight_version = "v2"
        await relay.refresh()
        assert reads.count == 3 and state.weight_version == "v2"
        await refresh()
        assert reads.count == 3 and state.weight_version == "v2"

    asyncio.run(run())


def test_every_change_on_process_0_is_pushed_before_its_call_answers(tmp_path, monkeypatch,
                                                                    transport) -> None:
    """With reads counted fresh for ever and process 1's mirror stopped, only
    process 0's pushes can tell process 1: a new version label (set after
    the weight-change push) and an announce are seen at once."""
    monkeypatch.setattr(relay_module, "FRESH_S", 1e9)
    leader, follower = start_pair(tmp_path, grpc_transport=transport)
    try:
        running = follower._running  # type: ignore[attr-defined]
        follower.submit(_cancel(running.mirror)).result(5)
        ch0, control0 = _control(leader)
        with ch0, grpc.insecure_channel(follower.address) as infer_ch:
            infer = service_pb2_grpc.TokenwireServiceStub(infer_ch)
            control0.SetWeightVersion(control_pb2.SetWeightVersionRequest(new_version="step-3"),
                                      timeout=10)
            resp = infer.Generate(generate_pb2.GenerateRequest(
                token_ids=[10, 11], sampling_params=common_pb2.SamplingParams(max_tokens=2)),
                metadata=(("x-min-weight-version", "step-3"),), timeout=10)
            assert resp.choices[0].token_ids
            ok = infer.CreateChatCompletion(chat_request(
                max_tokens=2, nvext={"exact_weight_version": "step-3"}), timeout=10)
            assert ok.choices[0].finish_reason == "length"
            control0.AnnounceWeightVersion(
                control_pb2.AnnounceWeightVersionRequest(weight_version="step-4"), timeout=10)
            with pytest.raises(grpc.RpcError) as exc:
                infer.CreateChatCompletion(chat_request(max_tokens=2, nvext={"max_weight_lag": 0}),
                                           timeout=10)
            assert error_info(exc.value).reason == "WEIGHT_LAG_BEHIND"
            control0.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10)
            assert _stats(follower).paused
            control0.Resume(control_pb2.ResumeRequest(), timeout=10)
            assert not _stats(follower).paused
    finally:
        for server in (follower, leader):
            server.stop()


async def _cancel(task: asyncio.Task) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
