"""Chat outputs -> Anthropic's shapes: the unary `Message`
(CreateMessageResponse: thinking, text and tool_use blocks, stop_reason,
usage) and the streamed events (message_start, ping, content_block_start /
_delta / _stop, message_delta, message_stop), as vLLM's Anthropic server
(vllm/entrypoints/anthropic/serving.py) maps a chat to them. Events are
dicts with their `type`; wire.py writes them as SSE."""

from __future__ import annotations

import json
import uuid
from typing import Any

from google.protobuf import json_format, struct_pb2

from tokenwire.server.inference.shared.proto_json import to_object
from tokenwire.v1 import anthropic_pb2, chat_pb2

Event = dict[str, Any]


def message_id(chat_id: str) -> str:
    """`msg_…` from the chat's id: what follows `chatcmpl-` (its random
    part, or the call's x-request-id)."""
    return "msg_" + chat_id.removeprefix("chatcmpl-")


def tool_use_id(call_id: str) -> str:
    """`toolu_…` from a chat tool call's id (a `toolu_` id is kept: the
    agent sends it back in tool_use / tool_result blocks)."""
    return call_id if call_id.startswith("toolu_") else "toolu_" + call_id.rsplit("-", 1)[-1]


def stop_reason(finish: str, matched: struct_pb2.Value | None, *, tool_used: bool,
                tool_complete: bool) -> tuple[str | None, str | None]:
    """Anthropic's (stop_reason, stop_sequence) of a chat finish (vLLM's
    rule: max_tokens wins; complete tool calls are tool_use; a matched stop
    string is stop_sequence)."""
    if finish == "length":
        return "max_tokens", None
    if finish not in ("stop", "tool_calls"):
        return None, None
    if tool_complete:
        return "tool_use", None
    if matched is not None and matched.WhichOneof("kind") == "string_value":
        return "stop_sequence", matched.string_value
    if finish == "tool_calls" or tool_used:
        return "tool_use", None
    return "end_turn", None


def uncached(prompt_tokens: int, cached: int) -> int:
    """Anthropic's input_tokens: the prompt less its prefix-cache reads
    (vLLM's _build_anthropic_usage: total input = input_tokens + cache reads)."""
    return max(0, prompt_tokens - cached)


def _input(arguments: str) -> struct_pb2.Struct:
    out = struct_pb2.Struct()
    try:
        value = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        value = None
    if isinstance(value, dict):
        out.update(value)
    return out


def build_message(chat: chat_pb2.CreateChatCompletionResponse
                  ) -> anthropic_pb2.CreateMessageResponse:
    """The Message of a finished chat (its first choice)."""
    resp = anthropic_pb2.CreateMessageResponse(
        id=message_id(chat.id), type="message", role="assistant", model=chat.model)
    cached = chat.usage.prompt_tokens_details.cached_tokens
    resp.usage.input_tokens = uncached(chat.usage.prompt_tokens, cached)
    resp.usage.output_tokens = chat.usage.completion_tokens
    resp.usage.cache_read_input_tokens = cached
    choice = chat.choices[0]
    msg = choice.message
    if msg.reasoning_content:
        resp.content.add(type="thinking", thinking=msg.reasoning_content,
                         signature=uuid.uuid4().hex)
    if msg.content:
        resp.content.add(type="text", text=msg.content)
    for call in msg.tool_calls:
        block = resp.content.add(type="tool_use", id=tool_use_id(call.id),
                                 name=call.function.name)
        block.input.CopyFrom(_input(call.function.arguments))
    if not resp.content:  # Anthropic's empty answer: one empty text block
        resp.content.add(type="text", text="")
    reason, sequence = stop_reason(
        choice.finish_reason, choice.stop_reason if choice.HasField("stop_reason") else None,
        tool_used=bool(msg.tool_calls), tool_complete=bool(msg.tool_calls))
    resp.stop_reason = reason or "end_turn"
    if sequence is not None:
        resp.stop_sequence = sequence
    # Token out (chat's fields, present when asked: return_token_ids, nvext),
    # with the weight spans of those ids.
    resp.prompt_token_ids.extend(chat.prompt_token_ids)
    resp.token_ids.extend(choice.token_ids)
    if chat.HasField("nvext"):
        resp.nvext.CopyFrom(chat.nvext)
    if resp.token_ids or resp.HasField("nvext"):
        resp.weight_versions.extend(choice.weight_versions)
    if chat.HasField("kv_transfer_params"):  # the KV connector's answer
        resp.kv_transfer_params.CopyFrom(chat.kv_transfer_params)
    return resp


def message_object(resp: anthropic_pb2.CreateMessageResponse) -> dict[str, Any]:
    """The Message as Anthropic's JSON: every field its schema requires
    (`stop_sequence: null`, a text block's text even when empty)."""
    blocks: list[dict[str, Any]] = []
    for b in resp.content:
        if b.type == "text":
            blocks.append({"type": "text", "text": b.text})
        elif b.type == "thinking":
            blocks.append({"type": "thinking", "thinking": b.thinking, "signature": b.signature})
        else:
            blocks.append({"type": "tool_use", "id": b.id, "name": b.name,
                           "input": json_format.MessageToDict(b.input)})
    out = {
        "id": resp.id, "type": "message", "role": "assistant", "content": blocks,
        "model": resp.model, "stop_reason": resp.stop_reason or None,
        "stop_sequence": resp.stop_sequence if resp.HasField("stop_sequence") else None,
        "usage": _usage(resp.usage.input_tokens, resp.usage.output_tokens,
                        resp.usage.cache_read_input_tokens),
    }
    if resp.HasField("kv_transfer_params"):  # (vLLM's exclude_none: absent without one)
        out["kv_transfer_params"] = to_object(resp.kv_transfer_params)
    return _token_out(out, resp)


def _usage(input_tokens: int, output_tokens: int, cached: int) -> dict[str, Any]:
    """Anthropic's usage as vLLM prints it: input_tokens without the cache
    reads (the caller's `input_tokens`), cache_read_input_tokens holding them."""
    return {"input_tokens": input_tokens, "output_tokens": output_tokens,
            "cache_read_input_tokens": cached}


def _token_out(out: dict[str, Any], msg: Any) -> dict[str, Any]:
    """`out` with the token-out fields `msg` (a Message or a stream event)
    has: prompt_token_ids, token_ids, weight_versions, nvext."""
    for name in ("prompt_token_ids", "token_ids"):
        ids = getattr(msg, name, None)
        if ids:
            out[name] = list(ids)
    if msg.weight_versions:
        out["weight_versions"] = [to_object(span) for span in msg.weight_versions]
    if msg.HasField("nvext"):
        out["nvext"] = to_object(msg.nvext)
    return out


class MessageEvents:
    """Anthropic's events of one streamed chat, built chunk by chunk (one
    open content block at a time: thinking, text, or one tool_use)."""

    def __init__(self, input_tokens: int):
        self.input_tokens = input_tokens
        self.started = False
        self.index = -1  # the open block's index
        self.open: str | None = None  # its type
        self.signature: str | None = None  # a thinking block's, sent at its end
        self.tool_ids: dict[int, str] = {}  # chat tool-call index -> its block's id
        self.open_tool: str | None = None  # the open tool_use block's id
        self.last_args: list[str] = []
        self.finish = ""
        self.matched: struct_pb2.Value | None = None
        self.tool_used = False
        # Token out: ids not yet sent, and what message_delta carries at the
        # end (weight spans only when ids were asked).
        self.tail = anthropic_pb2.MessageStreamEvent()
        self.token_out = False

    def _start(self, block: dict[str, Any]) -> list[Event]:
        events = self._stop()
        self.index += 1
        self.open = block["type"]
        if self.open == "thinking":
            self.signature = uuid.uuid4().hex
        return [*events, {"type": "content_block_start", "index": self.index,
                          "content_block": block}]

    def _stop(self) -> list[Event]:
        if self.open is None:
            return []
        events: list[Event] = []
        if self.open == "thinking" and self.signature is not None:
            events.append(self._delta({"type": "signature_delta", "signature": self.signature}))
            self.signature = None
        events.append({"type": "content_block_stop", "index": self.index})
        self.open = self.open_tool = None
        return events

    def _delta(self, delta: dict[str, Any]) -> Event:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def start(self, chunk: chat_pb2.StreamChatCompletionResponse) -> list[Event]:
        """message_start (and a ping), from the stream's first chunk."""
        self.started = True
        message: dict[str, Any] = {
            "id": message_id(chunk.id), "type": "message", "role": "assistant",
            "content": [], "model": chunk.model, "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": self.input_tokens, "output_tokens": 0},
        }
        if chunk.prompt_token_ids:  # return_token_ids (and nvext's prompt ids asked)
            message["prompt_token_ids"] = list(chunk.prompt_token_ids)
        if chunk.HasField("nvext"):
            message["nvext"] = to_object(chunk.nvext)
        return [{"type": "message_start", "message": message}, {"type": "ping"}]

    def on_chunk(self, chunk: chat_pb2.StreamChatCompletionResponse) -> list[Event]:
        """The events of one chat chunk (the usage chunk ends the message)."""
        if self.started:
            if chunk.HasField("nvext"):  # the finished chunk's (completion ids, engine_data)
                self.tail.nvext.MergeFrom(chunk.nvext)
            events = []
        else:
            events = self.start(chunk)
        if not chunk.choices:
            if chunk.HasField("usage"):
                events.extend(self.end(chunk.usage.completion_tokens,
                                       chunk.usage.prompt_tokens_details.cached_tokens))
            return events
        choice = chunk.choices[0]
        if choice.token_ids or chunk.HasField("nvext"):
            self.token_out = True
            self.tail.token_ids.extend(choice.token_ids)
        self.tail.weight_versions.extend(choice.weight_versions)
        events = self._deltas(choice, events)
        if self.tail.token_ids:  # the ids so far ride on this chunk's last delta
            for event in reversed(events):
                if event["type"] == "content_block_delta":
                    event["token_ids"] = list(self.tail.token_ids)
                    del self.tail.token_ids[:]
                    break
        return events

    def _deltas(self, choice: chat_pb2.ChatCompletionChunkChoice, events: list[Event]
                ) -> list[Event]:
        """`events` and those of the choice's delta."""
        if choice.finish_reason:
            self.finish = choice.finish_reason
            self.matched = choice.stop_reason if choice.HasField("stop_reason") else None
        delta = choice.delta
        if delta.reasoning_content:
            if self.open != "thinking":
                events.extend(self._start({"type": "thinking", "thinking": "",
                                           "signature": ""}))
            events.append(self._delta({"type": "thinking_delta",
                                       "thinking": delta.reasoning_content}))
        if delta.content:
            if self.open != "text":
                events.extend(self._start({"type": "text", "text": ""}))
            events.append(self._delta({"type": "text_delta", "text": delta.content}))
        for call in delta.tool_calls:
            events.extend(self._tool_delta(call))
        return events

    def _tool_delta(self, call: chat_pb2.ToolCall) -> list[Event]:
        events: list[Event] = []
        key = call.index if call.HasField("index") else 0
        if call.id and call.function.name:
            block_id = tool_use_id(call.id)
            self.tool_ids[key] = block_id
            events.extend(self._start({"type": "tool_use", "id": block_id,
                                       "name": call.function.name, "input": {}}))
            self.open_tool = block_id
            self.tool_used = True
            self.last_args = []
        if call.function.arguments and self.open_tool == self.tool_ids.get(key):
            self.last_args.append(call.function.arguments)
            events.append(self._delta({"type": "input_json_delta",
                                       "partial_json": call.function.arguments}))
        return events

    def end(self, output_tokens: int, cached: int = 0) -> list[Event]:
        """The last block's stop, message_delta (stop_reason, usage), message_stop."""
        complete = self.tool_used and _is_json("".join(self.last_args))
        reason, sequence = stop_reason(self.finish or "stop", self.matched,
                                       tool_used=self.tool_used, tool_complete=complete)
        if not self.token_out:
            self.tail.ClearField("weight_versions")
        delta = _token_out({
            "type": "message_delta",
            "delta": {"stop_reason": reason, "stop_sequence": sequence},
            "usage": _usage(uncached(self.input_tokens, cached), output_tokens, cached),
        }, self.tail)
        return [*self._stop(), delta, {"type": "message_stop"}]


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True
