"""Session streams, blocking and asyncio: start requests with ids, read each
request's events from its handle, cancel by id, continue by id.

    with client.session() as s:
        h1 = s.start_chat(messages="Hi", max_tokens=20, return_token_ids=True)
        r1 = h1.result()                       # RequestResult
        h2 = s.start_chat(continue_from=h1.request_id, messages="And then?")
        for event in h2:                       # chunks/results as they come
            ...

Leaving the block (or close()) aborts requests still running; close(abort=False)
lets them finish first. A request's error raises the typed exception from
its handle; a session-level failure raises from every open handle.
"""

# `timeout` here is the gRPC deadline, sent to the server with the call.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import itertools
import queue
import threading
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any

import grpc

from tokenwire.client._common import RequestResult
from tokenwire.client._session_core import HandleState, cancel_message, close_message, start_message
from tokenwire.client.errors import RequestCancelledError, TokenwireError, from_rpc_error
from tokenwire.v1 import chat_pb2, completion_pb2, generate_pb2, service_pb2_grpc, session_pb2

_HALF_CLOSE = object()


class RequestHandle:
    """One request of a blocking Session. Iterate for its data events."""

    def __init__(self, session: Session, request_id: str):
        self._session = session
        self.request_id = request_id
        self._state = HandleState(request_id)
        self._events: queue.Queue[Any] = queue.Queue()

    def events(self, timeout: float | None = None) -> Iterator[session_pb2.SessionResponse]:
        """Data events (chunks or the result) until the request ends; raises
        the typed error when it fails. `timeout` bounds each wait."""
        while not self._state.ended:
            try:
                item = self._events.get(timeout=timeout)
            except queue.Empty:
                raise self._state.no_event(timeout) from None
            event = self._state.take(item)
            if event is not None:
                yield event
        if self._state.error is not None:
            raise self._state.error

    def __iter__(self) -> Iterator[session_pb2.SessionResponse]:
        return self.events()

    def result(self, timeout: float | None = None) -> RequestResult:
        """Wait for the end of the request; everything it returned."""
        for _ in self.events(timeout):
            pass
        return self._state.result

    def cancel(self) -> None:
        self._session.cancel(self.request_id)


class Session:
    """A blocking Session stream (open it with Client.session())."""

    def __init__(
        self, stub: service_pb2_grpc.TokenwireServiceStub, *, timeout: float | None,
        metadata: Sequence[tuple[str, str]],
    ):
        self._out: queue.Queue[Any] = queue.Queue()
        self._handles: dict[str, RequestHandle] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.failure: TokenwireError | None = None
        self._call = stub.Session(self._requests(), timeout=timeout, metadata=metadata)
        self._reader = threading.Thread(target=self._read, name="tokenwire-session", daemon=True)
        self._reader.start()

    def _requests(self) -> Iterator[session_pb2.SessionRequest]:
        while True:
            msg = self._out.get()
            if msg is _HALF_CLOSE:
                return
            yield msg

    def _read(self) -> None:
        try:
            for event in self._call:
                with self._lock:
                    handle = self._handles.get(event.request_id)
                    if event.WhichOneof("event") in ("done", "error"):
                        self._handles.pop(event.request_id, None)
                if handle is not None:
                    handle._events.put(event)
        except grpc.RpcError as exc:
            self.failure = from_rpc_error(exc)
        finally:
            with self._lock:
                handles, self._handles = list(self._handles.values()), {}
            for handle in handles:
                handle._events.put(self.failure or RequestCancelledError("the session ended"))

    @property
    def ended(self) -> bool:
        """The stream is over (failed, closed, or ended by the server)."""
        return self.failure is not None or not self._reader.is_alive()

    def _send(self, msg: session_pb2.SessionRequest) -> None:
        if self.failure is not None:
            raise self.failure
        if not self._reader.is_alive():
            raise RequestCancelledError("the session has ended")
        self._out.put(msg)

    def start(
        self, kind: str, request: Any = None, /, *, request_id: str | None = None,
        continue_from: str | None = None, suffix_ids: Sequence[int] | None = None,
        choice_index: int | None = None, **fields: Any,
    ) -> RequestHandle:
        rid = request_id or f"r{next(self._ids)}"
        msg = start_message(rid, kind, request, fields, continue_from, suffix_ids, choice_index)
        handle = RequestHandle(self, rid)
        with self._lock:
            self._handles[rid] = handle
        self._send(msg)
        return handle

    def start_chat(
        self, request: chat_pb2.CreateChatCompletionRequest | Mapping[str, Any] | None = None, /,
        **kwargs: Any,
    ) -> RequestHandle:
        """Start a chat request. With continue_from=ID, `messages` (or
        suffix_ids) are only the new turn; the server prepends the earlier
        request's prompt and completion ids."""
        return self.start("chat", request, **kwargs)

    def start_generate(
        self, request: generate_pb2.GenerateRequest | Mapping[str, Any] | None = None, /,
        **kwargs: Any,
    ) -> RequestHandle:
        """Start a token-in generate request (continue_from works as for chat)."""
        return self.start("generate", request, **kwargs)

    def start_completion(
        self, request: completion_pb2.CreateCompletionRequest | Mapping[str, Any] | None = None, /,
        **kwargs: Any,
    ) -> RequestHandle:
        """Start a completion (continue_from with suffix_ids continues one prompt)."""
        return self.start("completion", request, **kwargs)

    def cancel(self, request_id: str) -> None:
        """Cancel a running request (a no-op once the session has ended)."""
        if self.failure is None and self._reader.is_alive():
            self._out.put(cancel_message(request_id))

    def close(self, *, abort: bool = True, timeout: float | None = 30.0) -> None:
        """End the session: abort running requests (or, with abort=False, let
        them finish), then wait for the stream to end."""
        if self._reader.is_alive():
            if abort:
                self._out.put(close_message())
            self._out.put(_HALF_CLOSE)
            self._reader.join(timeout)
        if self._reader.is_alive():
            self._call.cancel()
            self._reader.join(5)

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncRequestHandle:
    """One request of an AsyncSession. `async for` its data events."""

    def __init__(self, session: AsyncSession, request_id: str):
        self._session = session
        self.request_id = request_id
        self._state = HandleState(request_id)
        self._events: asyncio.Queue[Any] = asyncio.Queue()

    async def events(
        self, timeout: float | None = None
    ) -> AsyncIterator[session_pb2.SessionResponse]:
        """Data events (chunks or the result) until the request ends; raises
        the typed error when it fails. `timeout` bounds each wait."""
        while not self._state.ended:
            try:
                item = await asyncio.wait_for(self._events.get(), timeout)
            except TimeoutError:
                raise self._state.no_event(timeout) from None
            event = self._state.take(item)
            if event is not None:
                yield event
        if self._state.error is not None:
            raise self._state.error

    def __aiter__(self) -> AsyncIterator[session_pb2.SessionResponse]:
        return self.events()

    async def result(self, timeout: float | None = None) -> RequestResult:
        """Wait for the end of the request; everything it returned."""
        async for _ in self.events(timeout):
            pass
        return self._state.result

    async def cancel(self) -> None:
        await self._session.cancel(self.request_id)


class AsyncSession:
    """An asyncio Session stream: `async with client.session() as s`."""

    def __init__(
        self, stub: service_pb2_grpc.TokenwireServiceStub, *, timeout: float | None,
        metadata: Sequence[tuple[str, str]],
    ):
        self._stub = stub
        self._timeout = timeout
        self._metadata = metadata
        self._handles: dict[str, AsyncRequestHandle] = {}
        self._ids = itertools.count(1)
        self._write_lock = asyncio.Lock()
        self._call: Any = None
        self._reader: asyncio.Task[None] | None = None
        self._closed_writing = False
        self.failure: TokenwireError | None = None

    async def open(self) -> AsyncSession:
        if self._call is None:
            self._call = self._stub.Session(timeout=self._timeout, metadata=self._metadata)
            self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        try:
            async for event in self._call:
                handle = self._handles.get(event.request_id)
                if event.WhichOneof("event") in ("done", "error"):
                    self._handles.pop(event.request_id, None)
                if handle is not None:
                    handle._events.put_nowait(event)
        except grpc.RpcError as exc:
            self.failure = from_rpc_error(exc)
        finally:
            handles, self._handles = list(self._handles.values()), {}
            for handle in handles:
                handle._events.put_nowait(
                    self.failure or RequestCancelledError("the session ended")
                )

    @property
    def ended(self) -> bool:
        """The stream is over (failed, closed, or ended by the server)."""
        return self.failure is not None or self._closed_writing or (
            self._reader is not None and self._reader.done())

    async def _write(self, msg: session_pb2.SessionRequest) -> None:
        await self.open()
        if self.failure is not None:
            raise self.failure
        if self._closed_writing or (self._reader is not None and self._reader.done()):
            raise RequestCancelledError("the session has ended")
        async with self._write_lock:
            try:
                await self._call.write(msg)
            except grpc.RpcError as exc:  # the stream is broken: the session is over
                self.failure = self.failure or from_rpc_error(exc)
                raise self.failure from None
            except asyncio.InvalidStateError:  # the call is already over
                self.failure = self.failure or RequestCancelledError("the session has ended")
                raise self.failure from None

    async def start(
        self, kind: str, request: Any = None, /, *, request_id: str | None = None,
        continue_from: str | None = None, suffix_ids: Sequence[int] | None = None,
        choice_index: int | None = None, **fields: Any,
    ) -> AsyncRequestHandle:
        rid = request_id or f"r{next(self._ids)}"
        msg = start_message(rid, kind, request, fields, continue_from, suffix_ids, choice_index)
        handle = AsyncRequestHandle(self, rid)
        self._handles[rid] = handle
        await self._write(msg)
        return handle

    async def start_chat(
        self, request: chat_pb2.CreateChatCompletionRequest | Mapping[str, Any] | None = None, /,
        **kwargs: Any,
    ) -> AsyncRequestHandle:
        return await self.start("chat", request, **kwargs)

    async def start_generate(
        self, request: generate_pb2.GenerateRequest | Mapping[str, Any] | None = None, /,
        **kwargs: Any,
    ) -> AsyncRequestHandle:
        return await self.start("generate", request, **kwargs)

    async def start_completion(
        self, request: completion_pb2.CreateCompletionRequest | Mapping[str, Any] | None = None, /,
        **kwargs: Any,
    ) -> AsyncRequestHandle:
        return await self.start("completion", request, **kwargs)

    async def cancel(self, request_id: str) -> None:
        """Cancel a running request (a no-op once the session has ended)."""
        try:
            await self._write(cancel_message(request_id))
        except TokenwireError:
            pass

    async def close(self, *, abort: bool = True, timeout: float | None = 30.0) -> None:
        if self._call is None or self._reader is None:
            return
        if not self._closed_writing and not self._reader.done():
            try:
                if abort:
                    await self._write(close_message())
                async with self._write_lock:
                    await self._call.done_writing()
            except (TokenwireError, asyncio.InvalidStateError):
                pass
            self._closed_writing = True
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), timeout)
        except TimeoutError:
            self._call.cancel()
            await asyncio.wait([self._reader])

    async def __aenter__(self) -> AsyncSession:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
