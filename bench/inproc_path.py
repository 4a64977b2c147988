"""tokenwire's own Python per token, with no gRPC and no network: the fake
engine alone, then the same requests through the serving path (plan,
admission/metrics, chat chunk building, serialization). The difference is
what tokenwire's code costs per token. `--sse`: each chunk rendered as the
REST path's event instead (inference/shared/openai_wire.py, in the HttpBody the gateway passes
through), as EventStreamService does.

    .venv/bin/python -m bench.inproc_path [--requests 200] [--sse]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from google.api.httpbody_pb2 import HttpBody

from tokenwire.server.core.admission import Admission
from tokenwire.server.core.domain import Caller
from tokenwire.server.core.metrics import Metrics
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.guarded import GuardedEngine
from tokenwire.server.inference.chat.request import build_chat_plan
from tokenwire.server.inference.chat.service import stream_chat
from tokenwire.server.inference.shared.openai_wire import chat_chunk_event
from tokenwire.v1 import chat_pb2


def _request() -> chat_pb2.CreateChatCompletionRequest:
    req = chat_pb2.CreateChatCompletionRequest(
        max_tokens=128, ignore_eos=True, return_token_ids=True, temperature=1.0, seed=0
    )
    req.messages.add(role="user").content.string_value = "Request 1: " + " ".join(["alpha"] * 48)
    return req


async def measure(requests: int, sse: bool = False) -> tuple[float, float]:
    """(fake engine us/token, serving path us/token on top of it); `sse`: the
    REST path's rendering (an event per chunk, in an HttpBody) instead of the
    gRPC chunk's serialization."""
    engine = FakeEngine(max_model_len=4096)
    settings = ServerSettings(engine="fake", max_model_len=4096)
    guarded = GuardedEngine(engine, Admission(1024, 10**9), Metrics())
    tokens = 0
    t0 = time.perf_counter()
    for _ in range(requests):
        plan = build_chat_plan(
            _request(), engine, settings, served_model="fake", caller=Caller(), stream=True
        )
        async for out in engine.generate(plan.request):
            tokens += len(out.choices[0].token_ids)
    engine_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    for _ in range(requests):
        plan = build_chat_plan(
            _request(), guarded, settings, served_model="fake", caller=Caller(), stream=True
        )
        async for chunk in stream_chat(guarded, plan, worker_id="bench"):
            if sse:
                HttpBody(data=chat_chunk_event(chunk)).SerializeToString()
            else:
                chunk.SerializeToString()
    total_s = time.perf_counter() - t0
    return engine_s / tokens * 1e6, (total_s - engine_s) / tokens * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--sse", action="store_true",
                        help="render each chunk as the REST path's SSE event (HttpBody)")
    ns = parser.parse_args()
    engine_us, path_us = asyncio.run(measure(ns.requests, ns.sse))
    what = "SSE events" if ns.sse else "serialization"
    print(
        f"fake engine alone: {engine_us:.1f} us/token; tokenwire's chat path on top (plan, "
        f"admission, chunks, {what}): {path_us:.1f} us/token"
    )


if __name__ == "__main__":
    main()
