"""OpenAI's wire for chat, completion and generate: the JSON of a unary
answer and Server-Sent Events, rendered once by the server
(EventStreamService; api/fronts.py runs them as `CHAT_WIRE` / `WIRE`).

A stream chunk becomes ``data: {json}\\n\\n`` with the JSON the gateway's
transcoder would print for it (proto_json), plus ``"choices": []`` when the
chunk has none (OpenAI always prints the key; the openai SDK reads a missing
one as ``None``) and every choice key vLLM prints null or empty
(STREAM_CHOICE_KEYS). Unary chat, completion and generate answers are
printed here too (response_json, the gateway's ``:json`` bindings), with
the keys OpenAI's schema requires. The stream ends with ``data: [DONE]\\n\\n``; a failure after
the first event is an OpenAI error event before it, with the fields
gateway/lua/openai_error.lua renders for a failed call (a test holds the two
renderings equal for every status code).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import grpc
from google.protobuf.message import Message

from tokenwire import wire
from tokenwire.server.core.errors import TokenwireError
from tokenwire.server.inference.shared.proto_json import encode_json, to_object
from tokenwire.server.inference.shared.wire import Wire
from tokenwire.v1 import chat_pb2
from tokenwire.wire import error_type

CONTENT_TYPE = "text/event-stream"
DONE = b"data: [DONE]\n\n"

# gRPC code -> HTTP status, as the gateway maps a failed call (tokenwire.wire's
# map, which gateway/lua/openai_error.lua reads too); error_type likewise.
HTTP_STATUS = {code: wire.http_status(code.value[0]) for code in grpc.StatusCode}


# The keys vLLM's server prints on every streamed choice, null (or "") until
# set, which proto3 JSON omits when unset: per chunk message type. (A chat
# choice's stop_reason comes with its finish_reason, as vLLM sends it.)
STREAM_CHOICE_KEYS: dict[str, dict[str, Any]] = {
    "tokenwire.v1.StreamChatCompletionResponse": {
        "delta": {}, "logprobs": None, "finish_reason": None},
    "tokenwire.v1.StreamCompletionResponse": {
        "text": "", "logprobs": None, "finish_reason": None, "stop_reason": None},
    "tokenwire.v1.GenerateResponse": {
        "logprobs": None, "finish_reason": None, "stop_reason": None},
}


CHAT_CHUNK_KEYS = STREAM_CHOICE_KEYS["tokenwire.v1.StreamChatCompletionResponse"]


def with_choice_keys(body: dict[str, Any], keys: dict[str, Any]) -> dict[str, Any]:
    """`body` with `keys` on every choice that lacks them (OpenAI's schema
    requires them, nullable; vLLM prints them)."""
    for choice in body.get("choices", ()):
        for key, value in keys.items():
            if key not in choice:
                choice[key] = {} if value == {} else value
        if "finish_reason" in keys and choice["finish_reason"] is not None:
            choice.setdefault("stop_reason", None)
    return body


# The same for a unary answer's choices (the gateway's ":json" routes), and
# the keys of a chat choice's message OpenAI's schema requires.
UNARY_CHOICE_KEYS: dict[str, dict[str, Any]] = {
    "tokenwire.v1.CreateChatCompletionResponse": {"logprobs": None, "stop_reason": None},
    "tokenwire.v1.CreateCompletionResponse": {
        "text": "", "logprobs": None, "stop_reason": None},
    "tokenwire.v1.GenerateResponse": {"logprobs": None, "stop_reason": None},
}
MESSAGE_KEYS = {"content": None, "refusal": None}

# The top-level keys of vLLM's unary answer (its response model's
# model_dump(): null when unset) that are singular fields of the contract,
# which proto3 JSON omits when unset. Not printed: vLLM's keys outside the
# contract (ec_transfer_params, metrics, service_tier, prompt_text,
# prompt_token_id_logprobs, a choice's sampling_mask: docs/contract.md,
# "vLLM's response keys") and a
# null for an empty list field (token_ids, prompt_logprobs, routed_experts,
# ...), which would not parse as the contract's message: the REST JSON
# stays the gRPC message printed (docs/contract.md).
UNARY_TOP_KEYS: dict[str, tuple[str, ...]] = {
    "tokenwire.v1.CreateChatCompletionResponse": (
        "system_fingerprint", "usage", "kv_transfer_params"),
    "tokenwire.v1.CreateCompletionResponse": ("system_fingerprint", "usage", "kv_transfer_params"),
    "tokenwire.v1.GenerateResponse": (
        "model", "created", "usage", "mm_placeholders", "kv_transfer_params"),
}


def response_json(resp: Message) -> bytes:
    """A unary chat, completion or generate answer as the JSON vLLM prints: the
    transcoder's, with every key OpenAI's schema requires (null or empty),
    and `top_logprobs` on every chat logprob entry."""
    body = to_object(resp)
    name = resp.DESCRIPTOR.full_name
    if name == "tokenwire.v1.CreateChatCompletionResponse":
        with_top_logprobs(body)
        for choice in body.get("choices", ()):
            message = choice.setdefault("message", {"role": "assistant"})
            for key, value in MESSAGE_KEYS.items():
                message.setdefault(key, value)
    with_choice_keys(body, UNARY_CHOICE_KEYS.get(name, {}))
    if "choices" not in body:
        body = {"choices": [], **body}
    for key in UNARY_TOP_KEYS.get(name, ()):
        body.setdefault(key, None)
    return encode_json(body)


def chunk_event(chunk: Message) -> bytes:
    """The event for one stream chunk (every required choice key present)."""
    body = to_object(chunk)
    keys = STREAM_CHOICE_KEYS.get(chunk.DESCRIPTOR.full_name)
    if keys is not None:
        with_choice_keys(body, keys)
    if "choices" not in body:
        body = {"choices": [], **body}
    return b"data: " + encode_json(body) + b"\n\n"


def with_top_logprobs(body: dict[str, Any]) -> dict[str, Any]:
    """A chat response or chunk object with `top_logprobs` on every logprob
    entry (an empty list when no alternatives were asked): OpenAI's schema
    requires the key and vLLM prints it; proto JSON omits an empty list."""
    for choice in body.get("choices", ()):
        for entry in (choice.get("logprobs") or {}).get("content", ()):
            entry.setdefault("top_logprobs", [])
    return body


def chat_chunk_event(chunk: Message) -> bytes:
    """The event for one chat chunk (logprob entries with `top_logprobs`,
    every required choice key present)."""
    fields = chunk.ListFields()
    # Fields come in number order: six whose fifth is choices and sixth the
    # fingerprint are the header's four, the choices and the fingerprint.
    if len(fields) == 6 and fields[4][0] is _CHOICES and fields[5][0] is _FINGERPRINT:
        event = _text_chunk_event(fields)
        if event is not None:
            return event
    return _chat_chunk_event(chunk)


def _chat_chunk_event(chunk: Message) -> bytes:
    """chat_chunk_event for any chunk: the message walked (proto_json)."""
    body = with_choice_keys(with_top_logprobs(to_object(chunk)), CHAT_CHUNK_KEYS)
    if "choices" not in body:
        body = {"choices": [], **body}
    return b"data: " + encode_json(body) + b"\n\n"


# The fast path for the chunk a stream sends per token (issue #37): the
# header, the choices and the fingerprint, every choice only its index, its
# new text and (with return_token_ids) its ids. Its bytes are those of the
# generic path (_chat_chunk_event; tests hold the two equal), printed with a
# few reads of the message instead of a walk: the header around the choices
# once per stream (_HEADS), a choice by hand. Any other chunk (the role
# chunk, the last one, logprobs, tool calls, usage) takes the generic path.
_CHUNK = chat_pb2.StreamChatCompletionResponse.DESCRIPTOR.fields_by_name
_CHOICES, _FINGERPRINT = _CHUNK["choices"], _CHUNK["system_fingerprint"]
_CHOICE = chat_pb2.ChatCompletionChunkChoice.DESCRIPTOR.fields_by_name
_INDEX, _DELTA, _TOKEN_IDS = _CHOICE["index"], _CHOICE["delta"], _CHOICE["token_ids"]
_CONTENT = chat_pb2.ChatCompletionDelta.DESCRIPTOR.fields_by_name["content"]
_CHOICE_TAIL = b',"logprobs":null,"finish_reason":null}'
# (id, object, created, model, fingerprint) -> the event's bytes before and
# after its choices; emptied when it reaches _MAX_HEADS entries.
_HEADS: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
_MAX_HEADS = 4096


def _text_chunk_event(fields: Sequence[tuple[Any, Any]]) -> bytes | None:
    """The event of a chunk whose choices hold text (and ids) only; None for
    any other."""
    parts = []
    for choice in fields[4][1]:
        listed = choice.ListFields()
        if not (2 <= len(listed) <= 3 and listed[0][0] is _INDEX and listed[1][0] is _DELTA
                and (len(listed) == 2 or listed[2][0] is _TOKEN_IDS)):
            return None
        delta = listed[1][1].ListFields()
        if len(delta) != 1 or delta[0][0] is not _CONTENT:
            return None
        part = b'{"index":%d,"delta":{"content":%b}' % (listed[0][1], encode_json(delta[0][1]))
        if len(listed) == 3:
            ids = listed[2][1]
            part += (b',"token_ids":[%d]' % ids[0] if len(ids) == 1
                     else b',"token_ids":' + encode_json(list(ids)))
        parts.append(part + _CHOICE_TAIL)
    key = (fields[0][1], fields[1][1], fields[2][1], fields[3][1], fields[5][1])
    head = _HEADS.get(key)
    if head is None:
        if len(_HEADS) >= _MAX_HEADS:
            _HEADS.clear()
        head = _HEADS[key] = (
            b'data: {"id":%b,"object":%b,"created":%d,"model":%b,"choices":[' % (
                encode_json(key[0]), encode_json(key[1]), key[2], encode_json(key[3])),
            b'],"system_fingerprint":%b}\n\n' % encode_json(key[4]))
    return head[0] + b",".join(parts) + head[1]


def error_body(err: TokenwireError) -> dict[str, dict[str, str | None]]:
    """OpenAI's error object for `err`."""
    http = HTTP_STATUS.get(err.code, wire.UNKNOWN_HTTP_STATUS)
    return {"error": {
        "message": err.message, "type": error_type(http), "param": err.param or None,
        "code": err.reason.lower() if err.reason else err.code.name.lower(),
    }}


def error_event(err: TokenwireError) -> bytes:
    """The error event that ends a started stream (DONE follows it)."""
    return b"data: " + encode_json(error_body(err)) + b"\n\n"


def _error_event(err: TokenwireError, last: Any | None) -> bytes:
    return error_event(err) + DONE


# The REST codecs of completion and generate, and chat's (its chunk event).
WIRE = Wire(json=response_json, event=chunk_event, error_event=_error_event, done=DONE)
CHAT_WIRE = Wire(json=response_json, event=chat_chunk_event, error_event=_error_event, done=DONE)
