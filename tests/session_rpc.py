"""A raw Session stream driver for tests (the protocol, without the client
library): send messages from the test thread, read events as they come."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import grpc
from google.protobuf import json_format

from tokenwire.v1 import chat_pb2, completion_pb2, generate_pb2, service_pb2_grpc, session_pb2

_STOP = object()
TERMINAL = ("done", "error")


def chat_body(**fields: Any) -> chat_pb2.CreateChatCompletionRequest:
    body: dict[str, Any] = {
        "messages": [{"role": "user", "content": "What is the capital of France?"}]
    }
    body.update(fields)
    return json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())


def start_chat(
    request_id: str, continuation: dict | None = None, **fields: Any
) -> session_pb2.SessionRequest:
    if continuation is not None:
        fields.setdefault("messages", [])
    start = session_pb2.SessionStart(request_id=request_id, chat=chat_body(**fields))
    if continuation is not None:
        json_format.ParseDict(continuation, start.continuation)
    return session_pb2.SessionRequest(start=start)


def start_generate(
    request_id: str, continuation: dict | None = None, **fields: Any
) -> session_pb2.SessionRequest:
    start = session_pb2.SessionStart(
        request_id=request_id,
        generate=json_format.ParseDict(fields, generate_pb2.GenerateRequest())
    )
    if continuation is not None:
        json_format.ParseDict(continuation, start.continuation)
    return session_pb2.SessionRequest(start=start)


def start_completion(
    request_id: str, continuation: dict | None = None, **fields: Any
) -> session_pb2.SessionRequest:
    start = session_pb2.SessionStart(
        request_id=request_id,
        completion=json_format.ParseDict(fields, completion_pb2.CreateCompletionRequest()),
    )
    if continuation is not None:
        json_format.ParseDict(continuation, start.continuation)
    return session_pb2.SessionRequest(start=start)


def cancel(request_id: str) -> session_pb2.SessionRequest:
    return session_pb2.SessionRequest(cancel=session_pb2.SessionCancel(request_id=request_id))


def close() -> session_pb2.SessionRequest:
    return session_pb2.SessionRequest(close=session_pb2.SessionClose())


class RawSession:
    """One Session call; `send` writes, `events`/`until_terminal` read."""

    def __init__(self, stub: service_pb2_grpc.TokenwireServiceStub, *, timeout: float = 60,
                 metadata: tuple[tuple[str, str], ...] | None = None):
        self._out: queue.Queue[Any] = queue.Queue()
        self.call = stub.Session(self._requests(), timeout=timeout, metadata=metadata)
        self.events: queue.Queue[Any] = queue.Queue()
        self.status: grpc.RpcError | None = None
        self._buffer: list[Any] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[session_pb2.SessionRequest]:
        while True:
            msg = self._out.get()
            if msg is _STOP:
                return
            yield msg

    def _read(self) -> None:
        try:
            for ev in self.call:
                self.events.put(ev)
        except grpc.RpcError as exc:
            self.status = exc
        self.events.put(_STOP)

    def send(self, *msgs: session_pb2.SessionRequest) -> RawSession:
        for m in msgs:
            self._out.put(m)
        return self

    def half_close(self) -> None:
        self._out.put(_STOP)

    def _take(self, want: Any, timeout: float) -> Any:
        """The first event (buffered or new) that `want` accepts."""
        for i, ev in enumerate(self._buffer):
            if want(ev):
                return self._buffer.pop(i)
        while True:
            ev = self.events.get(timeout=timeout)
            if ev is _STOP:
                self._buffer.append(ev)
                raise AssertionError(f"the stream ended: {self.status}")
            if want(ev):
                return ev
            self._buffer.append(ev)

    def until(self, want: Any, timeout: float = 30) -> list[session_pb2.SessionResponse]:
        """Events read up to (and with) the first one `want` accepts, in
        order; events before it are returned, not left buffered."""
        got = list(self._buffer)
        self._buffer.clear()
        for i, ev in enumerate(got):
            if ev is not _STOP and want(ev):
                self._buffer.extend(got[i + 1:])
                return got[: i + 1]
        if any(ev is _STOP for ev in got):
            raise AssertionError(f"the stream ended: {self.status}")
        while True:
            ev = self.events.get(timeout=timeout)
            if ev is _STOP:
                self._buffer.append(ev)
                raise AssertionError(f"the stream ended: {self.status}")
            got.append(ev)
            if want(ev):
                return got

    def next(self, timeout: float = 30) -> session_pb2.SessionResponse:
        return self._take(lambda ev: True, timeout)

    def until_terminal(
        self, request_id: str, timeout: float = 30
    ) -> list[session_pb2.SessionResponse]:
        """Events of one request up to its terminal one (others stay buffered)."""
        got = []
        while True:
            ev = self._take(lambda e: e is not _STOP and e.request_id == request_id, timeout)
            got.append(ev)
            if ev.WhichOneof("event") in TERMINAL:
                return got

    def drain(self, timeout: float = 30) -> list[session_pb2.SessionResponse]:
        """Every remaining event until the stream ends."""
        out = [ev for ev in self._buffer if ev is not _STOP]
        ended = any(ev is _STOP for ev in self._buffer)
        self._buffer.clear()
        while not ended:
            ev = self.events.get(timeout=timeout)
            if ev is _STOP:
                break
            out.append(ev)
        return out

    def close(self) -> None:
        self.half_close()
        self.call.cancel()


def by_request(
    events: list[session_pb2.SessionResponse],
) -> dict[str, list[session_pb2.SessionResponse]]:
    out: dict[str, list[session_pb2.SessionResponse]] = {}
    for ev in events:
        out.setdefault(ev.request_id, []).append(ev)
    return out


def kinds(events: list[session_pb2.SessionResponse]) -> list[str]:
    return [str(ev.WhichOneof("event")) for ev in events]
