"""The asyncio client: the same methods as Client, awaitable (streams are
async iterators), on a grpc.aio channel."""

# `timeout` here is the gRPC deadline, sent to the server with the call.
# ruff: noqa: ASYNC109

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any

import grpc

from tokenwire.client._common import DEFAULT_TARGET, ClientCore, Metadata, RetryPolicy, build
from tokenwire.client.control import AsyncControlClient
from tokenwire.client.errors import TokenwireError, UnavailableError
from tokenwire.client.session import AsyncSession
from tokenwire.v1 import (
    chat_pb2,
    completion_pb2,
    generate_pb2,
    models_pb2,
    service_pb2_grpc,
    tokenize_pb2,
)


class AsyncClient(ClientCore):
    """The asyncio tokenwire client: Client's methods and arguments, with
    asyncio I/O over the same ClientCore (streams are async iterators).

    Create it inside a running event loop; ``async with AsyncClient() as c``.
    """

    def __init__(
        self, target: str = DEFAULT_TARGET, *, timeout: float | None = None,
        retry: RetryPolicy | None = None, tenant: str | None = None,
        metadata: Sequence[tuple[str, str]] = (), channel: grpc.aio.Channel | None = None,
        options: Sequence[tuple[str, Any]] = (), api_key: str | None = None, tls: bool = False,
        root_certificates: bytes | None = None, admin_api_key: str | None = None,
    ):
        super().__init__(target, timeout=timeout, retry=retry, tenant=tenant, metadata=metadata,
                         api_key=api_key, tls=tls, root_certificates=root_certificates,
                         admin_api_key=admin_api_key)
        self._own_channel = channel is None
        creds = self._credentials
        self.channel = channel or (
            grpc.aio.secure_channel(target, creds, options=list(options)) if creds
            else grpc.aio.insecure_channel(target, options=list(options))
        )
        self.stub = service_pb2_grpc.TokenwireServiceStub(self.channel)
        self.control = AsyncControlClient(self.channel, self._admin_metadata, timeout)

    async def close(self) -> None:
        if self._own_channel:
            await self.channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- I/O: one attempt after another, as Attempts decides ----------------
    async def _unary(
        self, method: Callable[..., Any], request: Any, timeout: float | None, metadata: Metadata,
        *, operator: bool = False,
    ) -> Any:
        call = self._attempts(timeout, metadata, operator=operator)
        while True:
            try:
                return await method(request, **call.kwargs())
            except grpc.RpcError as exc:
                wait = call.failed(exc)
            await asyncio.sleep(wait)

    async def _stream(
        self, method: Callable[..., Any], request: Any, timeout: float | None, metadata: Metadata
    ) -> AsyncIterator[Any]:
        call = self._attempts(timeout, metadata)
        while True:
            rpc = method(request, **call.kwargs())
            received = False
            try:
                async for item in rpc:
                    received = True
                    yield item
                return
            except grpc.RpcError as exc:
                wait = call.failed(exc, received=received)
            finally:
                rpc.cancel()  # a consumer that stops early aborts the engine request
            await asyncio.sleep(wait)

    # -- chat and generate -----------------------------------------------
    async def chat(
        self, request: chat_pb2.CreateChatCompletionRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> chat_pb2.CreateChatCompletionResponse:
        req = build(chat_pb2.CreateChatCompletionRequest, request, fields)
        return await self._unary(self.stub.CreateChatCompletion, req, timeout, metadata)

    def stream_chat(
        self, request: chat_pb2.CreateChatCompletionRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> AsyncIterator[chat_pb2.StreamChatCompletionResponse]:
        req = build(chat_pb2.CreateChatCompletionRequest, request, fields)
        return self._stream(self.stub.StreamChatCompletion, req, timeout, metadata)

    async def complete(
        self, request: completion_pb2.CreateCompletionRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> completion_pb2.CreateCompletionResponse:
        """CreateCompletion: a text or token-id prompt, or a batch of them."""
        req = build(completion_pb2.CreateCompletionRequest, request, fields)
        return await self._unary(self.stub.CreateCompletion, req, timeout, metadata)

    def stream_complete(
        self, request: completion_pb2.CreateCompletionRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> AsyncIterator[completion_pb2.StreamCompletionResponse]:
        """StreamCompletion."""
        req = build(completion_pb2.CreateCompletionRequest, request, fields)
        return self._stream(self.stub.StreamCompletion, req, timeout, metadata)

    async def generate(
        self, request: generate_pb2.GenerateRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> generate_pb2.GenerateResponse:
        req = build(generate_pb2.GenerateRequest, request, fields)
        return await self._unary(self.stub.Generate, req, timeout, metadata)

    def stream_generate(
        self, request: generate_pb2.GenerateRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> AsyncIterator[generate_pb2.GenerateResponse]:
        req = build(generate_pb2.GenerateRequest, request, fields)
        return self._stream(self.stub.StreamGenerate, req, timeout, metadata)

    def session(self, *, timeout: float | None = None, metadata: Metadata = None) -> AsyncSession:
        """A Session stream: ``async with client.session() as s``."""
        return AsyncSession(self.stub, timeout=self.timeout if timeout is None else timeout,
                            metadata=self._md(metadata))

    # -- tokenizer and models ---------------------------------------------
    async def tokenize(
        self, request: tokenize_pb2.TokenizeRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> tokenize_pb2.TokenizeResponse:
        req = build(tokenize_pb2.TokenizeRequest, request, fields)
        return await self._unary(self.stub.Tokenize, req, timeout, metadata)

    async def detokenize(
        self, tokens: Sequence[int], *, model: str = "", timeout: float | None = None,
        metadata: Metadata = None,
    ) -> str:
        req = tokenize_pb2.DetokenizeRequest(tokens=list(tokens), model=model)
        resp = await self._unary(self.stub.Detokenize, req, timeout, metadata)
        return str(resp.prompt)

    async def list_models(
        self, *, timeout: float | None = None, metadata: Metadata = None
    ) -> models_pb2.ListModelsResponse:
        return await self._unary(self.stub.ListModels, models_pb2.ListModelsRequest(), timeout, metadata)

    async def health(
        self, *, timeout: float | None = None, metadata: Metadata = None
    ) -> models_pb2.GetHealthResponse:
        return await self._unary(self.stub.GetHealth, models_pb2.GetHealthRequest(), timeout, metadata)

    async def stats(
        self, *, timeout: float | None = None, metadata: Metadata = None
    ) -> models_pb2.GetStatsResponse:
        return await self._unary(self.stub.GetStats, models_pb2.GetStatsRequest(), timeout, metadata,
                                 operator=True)

    async def wait_ready(self, timeout: float = 120.0, poll: float = 0.5) -> None:
        end = time.monotonic() + timeout
        while True:
            try:
                await self.health(timeout=min(5.0, timeout))
                return
            except TokenwireError as exc:
                if time.monotonic() + poll > end:
                    raise UnavailableError(
                        f"{self.target} not serving after {timeout}s: {exc.message}"
                    ) from exc
            await asyncio.sleep(poll)
