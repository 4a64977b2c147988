"""Small helpers for calling tokenwire in tests."""

from __future__ import annotations

import threading
import time
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format
from google.protobuf.message import Message
from google.rpc import error_details_pb2
from grpc_status import rpc_status

from tokenwire.v1 import chat_pb2


def chat_request(**fields: Any) -> chat_pb2.CreateChatCompletionRequest:
    """Build a request from OpenAI-style JSON fields (as a REST client would)."""
    body = {"messages": [{"role": "user", "content": "What is the capital of France?"}]}
    body.update(fields)
    return json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())


T = TypeVar("T", bound=Message)


def _detail(err: grpc.RpcError, kind: type[T]) -> T | None:
    status = rpc_status.from_call(err)  # type: ignore[arg-type]
    for detail in status.details if status is not None else ():
        message = kind()
        if detail.Unpack(message):
            return message
    return None


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    return _detail(err, error_details_pb2.ErrorInfo)


def retry_info(err: grpc.RpcError) -> error_details_pb2.RetryInfo | None:
    return _detail(err, error_details_pb2.RetryInfo)


def field_violations(err: grpc.RpcError) -> list[error_details_pb2.BadRequest.FieldViolation]:
    bad = _detail(err, error_details_pb2.BadRequest)
    return list(bad.field_violations) if bad is not None else []


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


class StreamReader(threading.Thread):
    """Reads a server stream in the background (chat chunks or generate
    messages): `msgs` so far, `error` if it failed."""

    def __init__(self, call: Any) -> None:
        super().__init__(daemon=True)
        self.call = call
        self.msgs: list[Any] = []
        self.error: grpc.RpcError | None = None
        self.start()

    def run(self) -> None:
        try:
            for msg in self.call:
                self.msgs.append(msg)
        except grpc.RpcError as exc:
            self.error = exc

    def ids(self) -> list[int]:
        """Every choice's token ids so far, in arrival order."""
        return [t for m in self.msgs for c in m.choices for t in c.token_ids]

    def wait_ids(self, n: int, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while len(self.ids()) < n:
            assert time.monotonic() < deadline and self.error is None, self.error or "no progress"
            time.sleep(0.005)
