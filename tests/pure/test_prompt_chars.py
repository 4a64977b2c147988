"""A body's weight for the off-loop threshold (prompt_chars.weighs_over) is
found by a bounded look, whatever the body; the text a Messages / Responses
body holds (block_text_chars) is never more than the chat it converts to
counts, so refusing by it refuses only what chat would refuse."""

from __future__ import annotations

import time

from google.protobuf import json_format

from tokenwire.server.inference.anthropic.request import text_chars as messages_chars
from tokenwire.server.inference.anthropic.request import to_chat as messages_to_chat
from tokenwire.server.inference.responses.request import text_chars as responses_chars
from tokenwire.server.inference.responses.request import to_chat as responses_to_chat
from tokenwire.server.inference.shared.prompt_chars import NODES, rendered_chars, weighs_over
from tokenwire.v1 import anthropic_pb2, embeddings_pb2, responses_pb2


def test_weighing_counts_every_string_and_stops_early() -> None:
    small = json_format.ParseDict({"input": ["hello", "world"]},
                                  embeddings_pb2.CreateEmbeddingRequest())
    assert not weighs_over((small,), 32_768)
    assert weighs_over((small,), 9)  # "hello" + "world"
    big = json_format.ParseDict({"input": ["x" * 40_000]}, embeddings_pb2.CreateEmbeddingRequest())
    assert weighs_over((big,), 32_768)


def test_a_body_of_many_items_is_heavy_after_a_bounded_look() -> None:
    blocks = [{"type": "text", "text": ""} for _ in range(100_000)]  # no text, many items
    req = json_format.ParseDict({"model": "m", "max_tokens": 1,
                                 "messages": [{"role": "user", "content": blocks}]},
                                anthropic_pb2.CreateMessageRequest())
    start = time.perf_counter()
    assert weighs_over((req,), 32_768)
    assert time.perf_counter() - start < 0.05  # (NODES items, not 100k)
    few = json_format.ParseDict({"model": "m", "max_tokens": 1, "messages": [
        {"role": "user", "content": blocks[:NODES // 8]}]}, anthropic_pb2.CreateMessageRequest())
    assert not weighs_over((few,), 32_768)


def test_a_messages_bodys_text_is_at_most_its_chats() -> None:
    body = {"model": "m", "max_tokens": 1, "system": [{"type": "text", "text": "sys"}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hello"},
                                             {"type": "text", "text": "again"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "calling"},
                    {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": "bcd"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1",
                     "content": [{"type": "text", "text": "result"}]}]},
                {"role": "user", "content": "plain"}]}
    req = json_format.ParseDict(body, anthropic_pb2.CreateMessageRequest())
    counted = messages_chars(req)
    assert counted == len("sys" "hello" "again" "calling" "result" "plain")
    assert counted <= rendered_chars(messages_to_chat(req, stream=False))[1]


def test_a_responses_bodys_text_is_at_most_its_chats() -> None:
    body = {"model": "m", "instructions": "be brief", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "hello"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "out"},
        {"role": "assistant", "content": "done"}]}
    req = json_format.ParseDict(body, responses_pb2.CreateResponseRequest())
    counted = responses_chars(req)
    assert counted == len("be brief" "hello" "done")
    assert counted <= rendered_chars(responses_to_chat(req, stream=False))[1]
