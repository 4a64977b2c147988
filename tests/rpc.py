"""Small helpers for calling tokenwire in tests."""

from __future__ import annotations

import threading
import time
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
