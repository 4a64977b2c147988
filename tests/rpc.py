"""Small helpers for calling tokenwire in tests."""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import json_format
from google.rpc import error_details_pb2, status_pb2

from tokenwire.v1 import chat_pb2


def chat_request(**fields: Any) -> chat_pb2.CreateChatCompletionRequest:
    """Build a request from OpenAI-style JSON fields (as a REST client would)."""
    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}
    body.update(fields)
    return json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    for key, value in err.trailing_metadata() or ():  # type: ignore[attr-defined]
        if key == "grpc-status-details-bin":
            status = status_pb2.Status.FromString(value)
            for detail in status.details:
                info = error_details_pb2.ErrorInfo()
                if detail.Unpack(info):
                    return info
    return None


def stream_ids(chunks: list[chat_pb2.StreamChatCompletionResponse]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for chunk in chunks:
        for ch in chunk.choices:
            out.setdefault(ch.index, []).extend(ch.token_ids)
    return out


def stream_text(chunks: list[chat_pb2.StreamChatCompletionResponse]) -> dict[int, str]:
    out: dict[int, str] = {}
    for chunk in chunks:
        for ch in chunk.choices:
            out[ch.index] = out.get(ch.index, "") + ch.delta.content
    return out
