"""--sse-keep-alive-interval (vLLM's flag, issue #35): an SSE stream idle
that long (queued, a long prefill, between tokens) gets vLLM's comment line
`: keep-alive`, then its events as without the flag; off (the default), no
comment; a cancelled stream frees its engine request; the wrapper
(api/sse_keep_alive.py) loses no chunk and closes what it wraps."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncGenerator

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request
from tests.servers import fake_serving
from tokenwire.server.api import sse_keep_alive
from tokenwire.server.core import errors
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.runtime.cli import main, parse_settings
from tokenwire.v1 import completion_pb2, events_pb2_grpc, generate_pb2, service_pb2_grpc

COMMENT = b": keep-alive\n\n"
DELAY = 0.15  # seconds per token of the fake engine: its first output comes that late
FIELDS = dict(max_tokens=4, ignore_eos=True, return_token_ids=True)


pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture(scope="module")
def keep_alive(transport):
    engine = FakeEngine(max_model_len=512, token_delay=DELAY)
    with fake_serving(engine, sse_keep_alive_interval=0.05, grpc_transport=transport) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        yield engine, service_pb2_grpc.TokenwireServiceStub(ch), \
            events_pb2_grpc.EventStreamServiceStub(ch)


@pytest.fixture(scope="module")
def plain(transport):
    engine = FakeEngine(max_model_len=512, token_delay=DELAY)
    with fake_serving(engine, grpc_transport=transport) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        yield events_pb2_grpc.EventStreamServiceStub(ch)


def _split(bodies) -> list[bytes]:
    """The SSE blocks of a stream, comments included, in order."""
    data = b"".join(b.data for b in bodies)
    assert data.endswith(b"\n\n")
    return [block + b"\n\n" for block in data.split(b"\n\n")[:-1]]


def _data(blocks: list[bytes]) -> list[bytes]:
    return [b.removeprefix(b"data: ").removesuffix(b"\n\n") for b in blocks if b != COMMENT]


def test_an_idle_chat_stream_gets_keep_alives_then_its_events(keep_alive) -> None:
    _, stub, events = keep_alive
    expected = list(stub.CreateChatCompletion(chat_request(**FIELDS), timeout=10)
                    .choices[0].token_ids)
    bodies = list(events.StreamChatCompletionEvents(chat_request(**FIELDS), timeout=10))
    assert bodies[0].content_type == "text/event-stream"
    assert all(not b.content_type for b in bodies[1:])
    blocks = _split(bodies)
    assert blocks[0] == COMMENT, "a keep-alive before the engine's first output"
    assert blocks.count(COMMENT) >= 2
    data = _data(blocks)
    assert data[-1] == b"[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert not any("error" in c for c in chunks)
    ids = [t for c in chunks for ch in c["choices"] for t in ch.get("token_ids", [])]
    assert ids == expected and len(ids) == 4  # every id once, in order
    assert [ch["finish_reason"] for c in chunks for ch in c["choices"]
            if ch.get("finish_reason")] == ["length"]


def test_completion_and_generate_streams_get_keep_alives(keep_alive) -> None:
    _, _, events = keep_alive
    comp = json_format.ParseDict({"prompt": "Hello", "max_tokens": 3, "ignore_eos": True},
                                 completion_pb2.CreateCompletionRequest())
    gen = json_format.ParseDict({"token_ids": [5, 6, 7], "sampling_params": {
        "max_tokens": 3, "ignore_eos": True}}, generate_pb2.GenerateRequest())
    for bodies in (list(events.StreamCompletionEvents(comp, timeout=10)),
                   list(events.StreamGenerateEvents(gen, timeout=10))):
        blocks = _split(bodies)
        assert blocks[0] == COMMENT and bodies[0].content_type == "text/event-stream"
        data = _data(blocks)
        assert data[-1] == b"[DONE]"
        assert len(data) >= 2 and all(json.loads(d) for d in data[:-1])


def test_without_the_flag_no_comment(plain) -> None:
    bodies = list(plain.StreamChatCompletionEvents(chat_request(**FIELDS), timeout=10))
    data = b"".join(b.data for b in bodies)
    assert b": keep-alive" not in data and not data.startswith(b":")
    assert data.endswith(b"data: [DONE]\n\n")


def test_bad_input_is_still_an_error_status(keep_alive) -> None:
    _, _, events = keep_alive
    with pytest.raises(grpc.RpcError) as err:
        list(events.StreamChatCompletionEvents(chat_request(max_tokens=-1), timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_a_cancelled_stream_frees_its_engine_request(keep_alive) -> None:
    engine, _, events = keep_alive
    call = events.StreamChatCompletionEvents(
        chat_request(max_tokens=200, ignore_eos=True), timeout=30)
    assert next(call).data == COMMENT  # the engine has the request, not yet an output
    call.cancel()
    deadline = time.monotonic() + 5
    while engine.running and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not engine.running


async def _ticks(delays: list[float], log: list[str]) -> AsyncGenerator[int]:
    try:
        for i, delay in enumerate(delays):
            await asyncio.sleep(delay)
            yield i
    finally:
        log.append("closed")


def test_beats_lose_no_chunk() -> None:
    async def run() -> list[int | None]:
        log: list[str] = []
        got = [x async for x in sse_keep_alive.beats(_ticks([0.12, 0, 0.12, 0], log), 0.05)]
        assert log == ["closed"]
        return got

    got = asyncio.run(run())
    assert [x for x in got if x is not None] == [0, 1, 2, 3]
    assert got[0] is None and got.count(None) >= 2  # before ids 0 and 2, at least


def test_beats_close_cancels_the_pending_chunk_and_closes_the_source() -> None:
    async def run() -> None:
        log: list[str] = []
        beats = sse_keep_alive.beats(_ticks([10.0], log), 0.01)
        assert await anext(beats) is None
        await beats.aclose()
        assert log == ["closed"]

    asyncio.run(asyncio.wait_for(run(), 5))


def test_beats_never_swallow_a_cancellation() -> None:
    async def run() -> None:
        log: list[str] = []

        async def consume() -> None:
            async for _ in sse_keep_alive.beats(_ticks([10.0], log), 0.01):
                pass

        task = asyncio.ensure_future(consume())
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert log == ["closed"]

    asyncio.run(asyncio.wait_for(run(), 5))


def test_the_flag_parses_and_a_negative_one_is_refused() -> None:
    args = ["--engine", "fake", "--sse-keep-alive-interval"]
    assert parse_settings([*args, "15"]).sse_keep_alive_interval == 15.0
    assert parse_settings(["--engine", "fake"]).sse_keep_alive_interval == 0.0
    with pytest.raises(SystemExit, match="--sse-keep-alive-interval"):
        main([*args, "-1"])


def test_vllms_command_line_takes_the_flag() -> None:
    """`tokenwire serve` as `vllm serve` (vLLM's parser): the flag is honoured."""
    assert parse_settings(["Qwen/X", "--sse-keep-alive-interval", "5"]
                          ).sse_keep_alive_interval == 5.0


def test_up_passes_the_flag_to_its_servers() -> None:
    """`tokenwire up` (REST on the gateway, where the comments matter)."""
    from tokenwire.cli import build_parser as top_parser
    from tokenwire.gateway.cli import plan_replicas

    ns, extra = top_parser().parse_known_args(
        ["up", "--engine", "fake", "--sse-keep-alive-interval", "15"])
    ns.extra = extra
    (replica,) = plan_replicas(ns)
    argv = list(replica.argv)
    assert argv[argv.index("--sse-keep-alive-interval") + 1] == "15.0"


class _LateFailure(FakeEngine):
    """Fails 0.15 s into a request, before any output (a long prefill that dies)."""

    armed = False  # after the server's warm-up

    async def generate(self, request):  # type: ignore[override]
        if not self.armed:
            async for out in super().generate(request):
                yield out
            return
        await asyncio.sleep(DELAY)
        raise errors.Unavailable("the engine died: late", reason="ENGINE_DEAD")


def test_an_engine_error_after_a_keep_alive_is_an_error_event() -> None:
    """As in vLLM: once a keep-alive went out (HTTP 200 sent), an engine
    error is an error event and [DONE]; the call still ends with its status."""
    engine = _LateFailure(max_model_len=512)
    with fake_serving(engine, sse_keep_alive_interval=0.05) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        engine.armed = True
        call = events_pb2_grpc.EventStreamServiceStub(ch).StreamChatCompletionEvents(
            chat_request(max_tokens=3), timeout=10)
        bodies = []
        with pytest.raises(grpc.RpcError) as err:
            for body in call:
                bodies.append(body)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    blocks = _split(bodies)
    assert blocks[0] == COMMENT
    data = _data(blocks)
    assert data[-1] == b"[DONE]" and "error" in json.loads(data[-2])
