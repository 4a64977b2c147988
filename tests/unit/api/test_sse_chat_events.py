"""The chat SSE event's fast path (api/sse.py, issue #37) prints the same
bytes as the generic one (the chunk walked by proto_json), for the chunks it
takes (text, ids, several choices, any text) and those it leaves (role,
finish, logprobs, tool calls, reasoning, usage, prompt ids), and for every
chunk of real streams from the fake engine."""

from __future__ import annotations

import asyncio
import json

import pytest

from tokenwire.server.core.admission import Admission
from tokenwire.server.core.domain import Caller
from tokenwire.server.core.metrics import Metrics
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.guarded import GuardedEngine
from tokenwire.server.inference.chat.request import build_chat_plan
from tokenwire.server.inference.chat.service import stream_chat
from tokenwire.server.inference.shared import openai_wire as sse
from tokenwire.v1 import chat_pb2

HEADER = dict(id="chatcmpl-1", object="chat.completion.chunk", created=1700000000,
              model="m", system_fingerprint="fp")


def _chunk(*choices: dict, **extra) -> chat_pb2.StreamChatCompletionResponse:
    chunk = chat_pb2.StreamChatCompletionResponse(**{**HEADER, **extra})
    for choice in choices:
        chunk.choices.add(**choice)
    return chunk


TEXT = [
    _chunk({"index": 0, "delta": {"content": "hi"}, "token_ids": [5]}),
    _chunk({"index": 0, "delta": {"content": ""}, "token_ids": [5, 6, 7]}),
    _chunk({"index": 0, "delta": {"content": 'q"\\\n\u00e9\u4e16\U0001f600<'}}),
    _chunk({"index": 0, "delta": {"content": "a"}, "token_ids": [1]},
           {"index": 1, "delta": {"content": "b"}, "token_ids": [2, 3]}),
    _chunk({"index": 3, "delta": {"content": "x"}}, model='m"odel', id="chatcmpl-\u00e9"),
]
OTHER = [
    _chunk({"index": 0, "delta": {"role": "assistant", "content": ""}}),
    _chunk({"index": 0, "delta": {"content": "x"}, "token_ids": [1], "finish_reason": "stop"}),
    _chunk({"index": 0, "delta": {"content": "x"}, "logprobs": {"content": [
        {"token": "x", "logprob": -0.5}]}}),
    _chunk({"index": 0, "delta": {"reasoning_content": "r"}}),
    _chunk({"index": 0, "delta": {"content": "x", "reasoning_content": "r"}}),
    _chunk({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c"}]}}),
    _chunk({"index": 0, "delta": {}}),
    _chunk({"delta": {"content": "x"}}),  # no index
    _chunk({"index": 0, "delta": {"content": "x"}},
           {"index": 1, "delta": {"content": "y"}, "finish_reason": "length"}),
    _chunk({"index": 0, "delta": {"content": "x"}}, usage={"prompt_tokens": 1}),
    _chunk({"index": 0, "delta": {"content": "x"}}, prompt_token_ids=[1, 2]),
    _chunk({"index": 0, "delta": {"content": "x"}}, system_fingerprint=""),
    _chunk({"index": 0, "delta": {"content": "x"}}, created=0),
    _chunk(usage={"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}),
]


@pytest.mark.parametrize("chunk", TEXT + OTHER)
def test_fast_path_prints_the_generic_bytes(chunk: chat_pb2.StreamChatCompletionResponse) -> None:
    event = sse.chat_chunk_event(chunk)
    assert event == sse._chat_chunk_event(chunk)
    assert event == sse.chat_chunk_event(chunk)  # from the cached header too
    body = json.loads(event.removeprefix(b"data: ").removesuffix(b"\n\n"))
    assert body["id"] == chunk.id and len(body["choices"]) == len(chunk.choices)


def _fast(chunk: chat_pb2.StreamChatCompletionResponse) -> bool:
    fields = chunk.ListFields()
    return (len(fields) == 6 and fields[4][0] is sse._CHOICES
            and fields[5][0] is sse._FINGERPRINT and sse._text_chunk_event(fields) is not None)


def test_text_chunks_take_the_fast_path_and_others_do_not() -> None:
    assert all(_fast(c) for c in TEXT)
    assert not any(_fast(c) for c in OTHER)


def test_header_cache_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sse, "_HEADS", {})
    monkeypatch.setattr(sse, "_MAX_HEADS", 3)
    for i in range(10):
        chunk = _chunk({"index": 0, "delta": {"content": "x"}}, id=f"chatcmpl-{i}")
        assert sse.chat_chunk_event(chunk) == sse._chat_chunk_event(chunk)
        assert len(sse._HEADS) <= 3


@pytest.mark.parametrize("fields", [
    dict(return_token_ids=True),
    dict(return_token_ids=True, n=2, stream_options={"include_usage": True}),
    dict(logprobs=True, top_logprobs=2),
    dict(stream_options={"include_usage": True, "continuous_usage_stats": True}),
])
def test_every_chunk_of_fake_streams(fields: dict) -> None:
    engine = FakeEngine(max_model_len=4096)
    guarded = GuardedEngine(engine, Admission(64, 10**9), Metrics())
    settings = ServerSettings(engine="fake", max_model_len=4096)
    req = chat_pb2.CreateChatCompletionRequest(max_tokens=12, ignore_eos=True, seed=0,
                                               temperature=1.0, **fields)
    req.messages.add(role="user").content.string_value = "h\u00e9llo \"w\" <o>\\rld"

    async def chunks() -> list[chat_pb2.StreamChatCompletionResponse]:
        plan = build_chat_plan(req, guarded, settings, served_model="fake", caller=Caller(),
                               stream=True)
        return [c async for c in stream_chat(guarded, plan, worker_id="w")]

    got = asyncio.run(chunks())
    assert len(got) >= 12
    for chunk in got:
        assert sse.chat_chunk_event(chunk) == sse._chat_chunk_event(chunk)
