"""Chat outputs -> OpenAI's Responses shapes: the unary `Response`
(CreateResponseResponse: reasoning, message and function_call output
items, usage, incomplete_details, the KV connector's kv_transfer_params;
with the token ids asked, an image input's mm_placeholders), and the
Response and its output items as OpenAI prints them (response_object,
item_object), as vLLM's Responses server shapes them. The streamed events
are events.py's; wire.py writes them as SSE."""

from __future__ import annotations

import time
import uuid
from typing import Any

from google.protobuf import json_format

from tokenwire.server.inference.shared.proto_json import to_object
from tokenwire.v1 import chat_pb2, common_pb2, responses_pb2

Event = dict[str, Any]
ECHOED_OPTIONAL = ("instructions", "temperature", "top_p", "max_output_tokens",
                   "top_logprobs", "max_tool_calls")


def _uid() -> str:
    """vLLM's random_uuid: 16 hex digits (the low 64 bits of a uuid4)."""
    return f"{uuid.uuid4().int & (2**64 - 1):016x}"


def response_id(req: responses_pb2.CreateResponseRequest) -> str:
    """`resp_` + the request id (or a fresh one)."""
    return "resp_" + (req.request_id or _uid())


def chat_logprobs(chat: common_pb2.ChoiceLogProbs) -> list[dict[str, Any]]:
    out = []
    for entry in chat.content:
        out.append({
            "token": entry.token, "logprob": entry.logprob, "bytes": list(entry.bytes),
            "top_logprobs": [{"token": t.token, "logprob": t.logprob, "bytes": list(t.bytes)}
                             for t in entry.top_logprobs],
        })
    return out


def skeleton(req: responses_pb2.CreateResponseRequest, rid: str, model: str,
             created_at: int) -> responses_pb2.CreateResponseResponse:
    """The Response with the request's echoed fields, no output yet."""
    resp = responses_pb2.CreateResponseResponse(
        id=rid, object="response", created_at=created_at, status="in_progress", model=model,
        user=req.user, truncation=req.truncation or "disabled",
        service_tier=req.service_tier or "auto", store=False,
        parallel_tool_calls=req.parallel_tool_calls if req.HasField("parallel_tool_calls")
        else True, background=False,
    )
    for name in ECHOED_OPTIONAL:
        if req.HasField(name):
            setattr(resp, name, getattr(req, name))
    resp.metadata.update(req.metadata)
    resp.tools.extend(req.tools)
    if req.HasField("tool_choice"):
        resp.tool_choice.CopyFrom(req.tool_choice)
    else:
        resp.tool_choice.string_value = "auto"
    if req.HasField("reasoning"):
        resp.reasoning.CopyFrom(req.reasoning)
    if req.HasField("text"):
        resp.text.CopyFrom(req.text)
    else:
        resp.text.update({"format": {"type": "text"}})
    return resp


def set_usage(resp: responses_pb2.CreateResponseResponse, usage: common_pb2.Usage | Any) -> None:
    """The chat's usage as the Response's; reasoning_tokens is the chat's
    completion_tokens_details count (the reasoning parser's, as vLLM's
    Responses counts it; 0 without a reasoning parser)."""
    u = resp.usage
    u.input_tokens = usage.prompt_tokens
    u.output_tokens = usage.completion_tokens
    u.total_tokens = usage.prompt_tokens + usage.completion_tokens
    u.input_tokens_details.update(
        {"cached_tokens": usage.prompt_tokens_details.cached_tokens})
    u.output_tokens_details.update(
        {"reasoning_tokens": usage.completion_tokens_details.reasoning_tokens})


def set_status(resp: responses_pb2.CreateResponseResponse, finish_reason: str) -> None:
    if finish_reason == "length":
        resp.status = "incomplete"
        resp.incomplete_details.reason = "max_output_tokens"
    else:
        resp.status = "completed"


def reasoning_item(text: str, status: str = "completed") -> responses_pb2.ResponseOutputItem:
    item = responses_pb2.ResponseOutputItem(type="reasoning", id="rs_" + _uid(), status=status)
    item.content.add(type="reasoning_text", text=text)
    return item


def message_item(text: str, logprobs: list[dict[str, Any]] | None,
                  status: str = "completed") -> responses_pb2.ResponseOutputItem:
    item = responses_pb2.ResponseOutputItem(type="message", id="msg_" + _uid(),
                                            status=status, role="assistant")
    part = item.content.add(type="output_text", text=text)
    for entry in logprobs or ():
        part.logprobs.add().struct_value.update(entry)
    return item


def call_item(call: chat_pb2.ToolCall, status: str = "completed", harmony: bool = False
               ) -> responses_pb2.ResponseOutputItem:
    """gpt-oss (`harmony`): call_id is call_ + the fc_ id's digits, as vLLM's
    harmony items (responses/harmony.py), not the chat's chatcmpl-tool- id."""
    uid = _uid()
    return responses_pb2.ResponseOutputItem(
        type="function_call", id="fc_" + uid, status=status,
        call_id="call_" + uid if harmony else call.id or "call_" + _uid(),
        name=call.function.name, arguments=call.function.arguments)


def harmony_outcome(resp: responses_pb2.CreateResponseResponse, finish_reason: str) -> None:
    """gpt-oss: the items' and Response's status as vLLM's Responses server
    sets them for harmony (harmony_to_response_output, responses_full_generator):
    reasoning items have none; the last message or call cut by
    max_output_tokens is "incomplete"; a Response with no item is "incomplete"."""
    for item in resp.output:
        if item.type == "reasoning":
            item.status = ""
    if finish_reason == "length" and resp.output and resp.output[-1].type != "reasoning":
        resp.output[-1].status = "incomplete"
    if not resp.output:
        resp.status = "incomplete"
        resp.incomplete_details.reason = "max_output_tokens"


def build_response(req: responses_pb2.CreateResponseRequest,
                   chat: chat_pb2.CreateChatCompletionResponse, harmony: bool = False
                   ) -> responses_pb2.CreateResponseResponse:
    """The Response of a finished chat (its first choice); `harmony`: a
    gpt-oss model's (no empty message item, harmony_outcome)."""
    resp = skeleton(req, response_id(req), chat.model, int(time.time()))
    choice = chat.choices[0]
    msg = choice.message
    if msg.reasoning_content:
        resp.output.append(reasoning_item(msg.reasoning_content))
    logprobs = chat_logprobs(choice.logprobs) if choice.HasField("logprobs") else None
    if msg.content or not (msg.tool_calls or harmony):
        resp.output.append(message_item(msg.content, logprobs))
    for call in msg.tool_calls:
        resp.output.append(call_item(call, harmony=harmony))
    set_status(resp, choice.finish_reason)
    if harmony:
        harmony_outcome(resp, choice.finish_reason)
    set_usage(resp, chat.usage)
    resp.system_fingerprint = chat.system_fingerprint
    resp.prompt_token_ids.extend(chat.prompt_token_ids or chat.nvext.prompt_token_ids)
    resp.output_token_ids.extend(choice.token_ids or choice.nvext.completion_token_ids)
    if chat.HasField("mm_placeholders"):
        resp.mm_placeholders.CopyFrom(chat.mm_placeholders)
    if chat.HasField("nvext"):
        resp.nvext.CopyFrom(chat.nvext)
    if resp.output_token_ids or resp.HasField("nvext"):  # the spans of the ids asked
        resp.weight_versions.extend(choice.weight_versions)
    if chat.HasField("kv_transfer_params"):  # the KV connector's answer
        resp.kv_transfer_params.CopyFrom(chat.kv_transfer_params)
    return resp


def _logprob_object(value: Any) -> dict[str, Any]:
    """A stored logprob entry with its byte values as integers (a Struct holds doubles)."""
    entry = json_format.MessageToDict(value)
    for e in (entry, *entry.get("top_logprobs", ())):
        e["bytes"] = [int(b) for b in e.get("bytes", ())]
    return dict(entry)


def item_object(item: responses_pb2.ResponseOutputItem) -> dict[str, Any]:
    """An output item as OpenAI prints it (every required key)."""
    if item.type == "function_call":
        return {"type": "function_call", "id": item.id, "call_id": item.call_id,
                "name": item.name, "arguments": item.arguments, "status": item.status}
    if item.type == "reasoning":
        return {"type": "reasoning", "id": item.id, "summary": [],
                "content": [{"type": "reasoning_text", "text": c.text} for c in item.content],
                "encrypted_content": None, "status": item.status or None}
    return {"type": "message", "id": item.id, "role": "assistant", "status": item.status,
            "content": [{"type": "output_text", "text": c.text, "annotations": [],
                         "logprobs": [_logprob_object(v) for v in c.logprobs]}
                        for c in item.content]}


def response_object(resp: responses_pb2.CreateResponseResponse) -> dict[str, Any]:
    """The Response as OpenAI prints it: every key its schema requires, null
    where unset (the transcoder would omit them)."""
    def opt(name: str) -> Any:
        return getattr(resp, name) if resp.HasField(name) else None

    out: dict[str, Any] = {
        "id": resp.id, "object": "response", "created_at": resp.created_at,
        "status": resp.status, "background": resp.background, "error": None,
        "incomplete_details": ({"reason": resp.incomplete_details.reason}
                               if resp.HasField("incomplete_details") else None),
        "instructions": opt("instructions"),
        "max_output_tokens": opt("max_output_tokens"), "max_tool_calls": opt("max_tool_calls"),
        "metadata": dict(resp.metadata), "model": resp.model,
        "output": [item_object(item) for item in resp.output],
        "parallel_tool_calls": resp.parallel_tool_calls, "previous_response_id": None,
        "reasoning": (json_format.MessageToDict(resp.reasoning)
                      if resp.HasField("reasoning") else None),
        "service_tier": resp.service_tier, "store": resp.store,
        "temperature": opt("temperature"),
        "text": json_format.MessageToDict(resp.text),
        "tool_choice": json_format.MessageToDict(resp.tool_choice),
        "tools": [_tool_object(t) for t in resp.tools],
        "top_logprobs": opt("top_logprobs"), "top_p": opt("top_p"),
        "truncation": resp.truncation, "user": resp.user or None,
        "usage": None,
        "kv_transfer_params": (to_object(resp.kv_transfer_params)  # (vLLM's: null without)
                               if resp.HasField("kv_transfer_params") else None),
    }
    if resp.HasField("usage"):
        u = resp.usage
        out["usage"] = {
            "input_tokens": u.input_tokens,
            "input_tokens_details": {
                "cached_tokens": _count(u.input_tokens_details, "cached_tokens")},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {
                "reasoning_tokens": _count(u.output_tokens_details, "reasoning_tokens")},
            "total_tokens": u.total_tokens,
        }
    if resp.system_fingerprint:
        out["system_fingerprint"] = resp.system_fingerprint
    if resp.prompt_token_ids:
        out["prompt_token_ids"] = list(resp.prompt_token_ids)
    if resp.output_token_ids:
        out["output_token_ids"] = list(resp.output_token_ids)
    if resp.HasField("mm_placeholders"):  # vLLM's shape: {"image": [{"offset", "length"}]}
        out["mm_placeholders"] = json_format.MessageToDict(resp.mm_placeholders)
    if resp.weight_versions:
        out["weight_versions"] = [to_object(span) for span in resp.weight_versions]
    if resp.HasField("nvext"):
        out["nvext"] = to_object(resp.nvext)
    return out


def _count(details: Any, key: str) -> int:
    value = details[key] if key in details else 0
    return int(value) if isinstance(value, (int, float)) else 0


def _tool_object(tool: responses_pb2.ResponseTool) -> dict[str, Any]:
    return {"type": "function", "name": tool.name, "description": tool.description or None,
            "parameters": json_format.MessageToDict(tool.parameters)
            if tool.HasField("parameters") else None,
            "strict": tool.strict if tool.HasField("strict") else None}
