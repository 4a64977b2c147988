"""A caller that stops reading a multi-prompt stream (issue #23 item 4):
the server holds a bounded number of engine outputs (the batch merge stops
pulling from the engine when its bounded queue is full; vLLM then merges
the deltas nobody pulls), and a reader that resumes still gets every id of
every choice exactly once, in order. In-process, on the fake engine: the
event loop is run for a fixed number of turns, no clock involved."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from google.protobuf import json_format

from tokenwire.server.core.domain import Caller, EngineOutput, EngineRequest
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.completion.request import build_completion_plan
from tokenwire.server.inference.completion.service import run_completion, stream_completion
from tokenwire.v1 import completion_pb2

SETTINGS = ServerSettings(engine="fake", max_model_len=4096)
PROMPTS = 8
MAX_TOKENS = 300  # one output per token per choice (stream_interval 1)


class CountingEngine(FakeEngine):
    """A fake engine that counts the outputs taken from it."""

    def __init__(self) -> None:
        super().__init__(max_model_len=4096)
        self.pulled = 0

    async def generate(self, request: EngineRequest) -> AsyncIterator[EngineOutput]:
        async with contextlib.aclosing(super().generate(request)) as outputs:
            async for out in outputs:
                self.pulled += 1
                yield out


async def spin(turns: int = 20_000) -> None:
    """Let every runnable task go as far as it can (each engine step is one turn)."""
    for _ in range(turns):
        await asyncio.sleep(0)


def batch_request(**fields: Any) -> completion_pb2.CreateCompletionRequest:
    body = {"prompt": [[10 + i, 11] for i in range(PROMPTS)], "n": 2, "temperature": 1.0,
            "max_tokens": MAX_TOKENS, "ignore_eos": True, "return_token_ids": True, **fields}
    return json_format.ParseDict(body, completion_pb2.CreateCompletionRequest())


async def unary_ids(engine: FakeEngine) -> dict[int, list[int]]:
    """Each choice's ids in the unary response to the same batch."""
    plan = build_completion_plan(batch_request(), engine, SETTINGS, served_model="m",
                                 caller=Caller(), stream=False)
    unary = await run_completion(engine, plan, worker_id="w")
    ids = {c.index: list(c.token_ids) for c in unary.choices}
    assert len(ids) == 2 * PROMPTS and all(len(i) == MAX_TOKENS for i in ids.values())
    return ids


async def test_an_unread_batch_stream_holds_a_bounded_number_of_outputs() -> None:
    engine = CountingEngine()
    req = batch_request()
    plan = build_completion_plan(req, engine, SETTINGS, served_model="m", caller=Caller(),
                                 stream=True)
    stream = stream_completion(engine, plan, worker_id="w")
    got: dict[int, list[int]] = {}
    finishes: dict[int, list[str]] = {}

    def take(chunk: completion_pb2.StreamCompletionResponse) -> None:
        for ch in chunk.choices:
            got.setdefault(ch.index, []).extend(ch.token_ids)
            if ch.finish_reason:
                finishes.setdefault(ch.index, []).append(ch.finish_reason)

    take(await anext(stream))
    await spin()  # the caller reads nothing meanwhile
    # Without a bound every prompt runs to its end: PROMPTS x MAX_TOKENS outputs.
    assert engine.pulled <= 2 * PROMPTS + 1, engine.pulled
    assert len(engine.running) == PROMPTS, "the requests wait, they are not dropped"

    async for chunk in stream:  # the caller reads again: everything arrives
        take(chunk)
    assert got == await unary_ids(engine)
    assert finishes == {i: ["length"] for i in range(2 * PROMPTS)}


# -- the same in a Session ------------------------------------------------


def session_of(engine: FakeEngine, max_buffered_bytes: int = 4096) -> Any:
    from tokenwire.server.api.session import Session
    from tokenwire.server.core.serving_state import ServingState
    from tokenwire.server.runtime.app import build_data_plane
    from tokenwire.server.security.tenancy import Tenancy

    settings = ServerSettings(engine="fake", max_model_len=4096,
                              session_max_buffered_bytes=max_buffered_bytes)
    state = ServingState()
    state.serving = True
    return Session(build_data_plane(engine, settings, state, Tenancy()), caller=Caller())


def start_batch(rid: str) -> Any:
    from tokenwire.v1 import session_pb2

    return session_pb2.SessionRequest(start=session_pb2.SessionStart(
        request_id=rid, completion=batch_request(stream=True)))


async def messages(*msgs: Any) -> AsyncIterator[Any]:
    for msg in msgs:
        yield msg
    await asyncio.Event().wait()  # the client keeps the stream open


async def test_an_unread_session_batch_holds_a_bounded_number_of_outputs() -> None:
    engine = CountingEngine()
    events = session_of(engine).run(messages(start_batch("b")))
    first = await anext(events)
    await spin()  # the client reads nothing meanwhile
    # The outbox holds 4 KiB of chunks (tens of them); the merge two per prompt.
    assert engine.pulled <= 100, engine.pulled
    got: dict[int, list[int]] = {}
    event = first
    while event.WhichOneof("event") != "done":
        for ch in event.completion_chunk.choices:
            got.setdefault(ch.index, []).extend(ch.token_ids)
        event = await anext(events)
    await events.aclose()
    assert got == await unary_ids(engine)


async def test_closing_a_session_closes_its_engine_streams_at_once() -> None:
    engine = CountingEngine()
    events = session_of(engine).run(messages(start_batch("b")))
    await anext(events)
    await spin(200)  # the request now waits for room in the outbox
    assert len(engine.running) == PROMPTS
    await events.aclose()  # the client drops the stream
    # Its engine requests are aborted before the session is gone, not when
    # the garbage collector finalizes an abandoned generator.
    assert not engine.running
    assert len(engine.aborted) == PROMPTS
