"""gpt-oss's Responses items as vLLM's Responses server makes them, without a
model: harmony output ids parsed by vLLM's HarmonyParser behind
engine/vllm/parsers.py, then tokenwire's Responses builders
(inference/responses/: build_response unary, ResponseEvents streamed, in
harmony mode) against vLLM's own items for the same ids
(tests/harmony_vllm.py: HarmonyContext + harmony_to_response_output):
same item types in the same order, id prefixes and lengths, status, texts,
call names and arguments. Needs the o200k_base vocabulary offline
(tests/harmony_vocab.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.harmony_vllm import GPT_OSS, harmony_ids, vllm_response_items
from tests.harmony_vocab import use_harmony_vocab
from tests.unit.inference.parser_cases import TOOLS, demo_tokenizer
from tokenwire.server.core.parsing import ParsedMessage, ParserConfig, ParseSpec
from tokenwire.server.inference.responses.events import ResponseEvents
from tokenwire.server.inference.responses.response import build_response, item_object
from tokenwire.v1 import chat_pb2, responses_pb2

pytestmark = pytest.mark.skipif(use_harmony_vocab() is not None,
                                reason=use_harmony_vocab() or "")

CALL = ("<|start|>assistant<|channel|>commentary to=functions.get_weather "
        '<|constrain|>json<|message|>{"city": "Paris"}<|call|>')
CASES = {
    "final": ("<|channel|>analysis<|message|>Easy.<|end|>"
              "<|start|>assistant<|channel|>final<|message|>Hello there.<|return|>", "stop"),
    "call": ("<|channel|>analysis<|message|>Need the weather.<|end|>" + CALL, "stop"),
    "preamble_call": ("<|channel|>commentary<|message|>Checking.<|end|>" + CALL, "stop"),
    "final_only": ("<|channel|>final<|message|>Hi.<|return|>", "stop"),
    # cut by max_output_tokens (the ids end mid-message)
    "cut_final": ("<|channel|>analysis<|message|>Easy.<|end|>"
                  "<|start|>assistant<|channel|>final<|message|>Hello there, how", "length"),
    "cut_call": ("<|channel|>analysis<|message|>Go.<|end|>"
                 "<|start|>assistant<|channel|>commentary to=functions.get_weather "
                 '<|constrain|>json<|message|>{"city": "Pa', "length"),
    "cut_analysis": ("<|channel|>analysis<|message|>Thinking about the", "length"),
    "no_structure": ("just some text a random model wrote", "length"),
}


def _request_parsers():
    from tokenwire.server.engine.vllm.parsers import VllmChatParsers

    parsers = VllmChatParsers(ParserConfig("openai", True, "openai_gptoss"),
                              demo_tokenizer(), GPT_OSS)
    rp = parsers.for_request(ParseSpec(tools=TOOLS))
    assert rp is not None and rp.harmony
    return rp


def _chat(parsed: ParsedMessage, finish: str) -> chat_pb2.CreateChatCompletionResponse:
    """The chat answer the Responses front gets (chat/response.py's fields)."""
    chat = chat_pb2.CreateChatCompletionResponse(model="gpt-oss")
    choice = chat.choices.add(index=0, finish_reason=finish)
    if parsed.content is not None:
        choice.message.content = parsed.content
    if parsed.reasoning is not None:
        choice.message.reasoning_content = parsed.reasoning
    for call in parsed.tool_calls:
        tc = choice.message.tool_calls.add(id=call.id, type="function")
        tc.function.name, tc.function.arguments = call.name, call.arguments
    return chat


def _stream(rp, ids: list[int], finish: str, step: int) -> list[dict[str, Any]]:
    """ResponseEvents over the chat chunks the parser's deltas make."""
    events = ResponseEvents(responses_pb2.CreateResponseRequest(), "gpt-oss", harmony=True)
    out = events.start()
    parser = rp.stream_parser([1, 2, 3])
    for k in range(0, len(ids), step):
        last = k + step >= len(ids)
        d = parser.delta("", ids[k:k + step], finished=last)
        chunk = chat_pb2.StreamChatCompletionResponse()
        choice = chunk.choices.add(index=0, finish_reason=finish if last else "")
        if d is not None:
            choice.delta.content = d.content or ""
            choice.delta.reasoning_content = d.reasoning or ""
            for tc in d.tool_calls:
                piece = choice.delta.tool_calls.add(index=tc.index, id=tc.id or "")
                piece.function.name = tc.name or ""
                piece.function.arguments = tc.arguments or ""
        out += events.on_chunk(chunk)
    return out + events.end()


def _args(text: str) -> Any:
    """JSON arguments as a value (the chat's parse re-dumps them), else the text."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _same_items(ours: list[dict[str, Any]], vllms: list[dict[str, Any]]) -> None:
    assert [o["type"] for o in ours] == [v["type"] for v in vllms]
    for o, v in zip(ours, vllms, strict=True):
        prefix = v["id"].split("_", 1)[0]
        assert o["id"].startswith(prefix + "_") and len(o["id"]) == len(v["id"]), (o, v)
        assert o["status"] == v["status"], (o, v)
        if v["type"] == "function_call":
            assert (o["name"], _args(o["arguments"])) == (v["name"], _args(v["arguments"]))
            assert o["call_id"] == "call_" + o["id"].split("_", 1)[1]
        else:
            assert [c["text"] for c in o["content"]] == [c["text"] for c in v["content"]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_unary_items_are_vllms(case) -> None:
    text, finish = CASES[case]
    ids = harmony_ids(text)
    rp = _request_parsers()
    resp = build_response(responses_pb2.CreateResponseRequest(),
                          _chat(rp.parse("", ids, [1, 2, 3]), finish), harmony=True)
    items, status = vllm_response_items(demo_tokenizer(), ids, finish,
                                        frozenset({"get_weather"}))
    assert resp.status == status
    assert resp.incomplete_details.reason == ("max_output_tokens" if status == "incomplete"
                                              else "")
    _same_items([item_object(i) for i in resp.output], items)


@pytest.mark.parametrize("step", [1, 4, 1000])
@pytest.mark.parametrize("case", sorted(CASES))
def test_streamed_items_are_vllms(case, step) -> None:
    text, finish = CASES[case]
    ids = harmony_ids(text)
    events = _stream(_request_parsers(), ids, finish, step)
    items, status = vllm_response_items(demo_tokenizer(), ids, finish,
                                        frozenset({"get_weather"}))
    final = events[-1]["response"]
    assert events[-1]["type"] == "response.completed" and final["status"] == status
    _same_items(final["output"], items)
    added = [e["item"] for e in events if e["type"] == "response.output_item.added"]
    assert [a["id"] for a in added] == [o["id"] for o in final["output"]]
    assert [a.get("call_id") for a in added] == [o.get("call_id") for o in final["output"]]


def test_non_harmony_items_unchanged() -> None:
    """Without harmony the chat's tool-call id is the call_id, an empty
    answer is one empty message, a reasoning item is "completed"."""
    chat = chat_pb2.CreateChatCompletionResponse(model="m")
    choice = chat.choices.add(index=0, finish_reason="length")
    choice.message.reasoning_content = "r"
    resp = build_response(responses_pb2.CreateResponseRequest(), chat)
    assert [(i.type, i.status) for i in resp.output] == [
        ("reasoning", "completed"), ("message", "completed")]
    tc = choice.message.tool_calls.add(id="chatcmpl-tool-1", type="function")
    tc.function.name = "f"
    resp = build_response(responses_pb2.CreateResponseRequest(), chat)
    assert [i.call_id for i in resp.output if i.type == "function_call"] == ["chatcmpl-tool-1"]


def test_several_analysis_messages_make_one_reasoning_item() -> None:
    """Not as vLLM (one reasoning item per analysis message there): the
    chat's parse joins them, so the Response has one, their texts joined
    by a newline (docs/engine.md)."""
    ids = harmony_ids("<|channel|>analysis<|message|>One.<|end|>"
               "<|start|>assistant<|channel|>analysis<|message|>Two.<|end|>"
               "<|start|>assistant<|channel|>final<|message|>Done.<|return|>")
    rp = _request_parsers()
    resp = build_response(responses_pb2.CreateResponseRequest(),
                          _chat(rp.parse("", ids, [1, 2, 3]), "stop"), harmony=True)
    items, _ = vllm_response_items(demo_tokenizer(), ids, "stop")
    assert [i["type"] for i in items] == ["reasoning", "reasoning", "message"]
    assert [(i.type, i.content[0].text) for i in resp.output] == [
        ("reasoning", "One.\nTwo."), ("message", "Done.")]
