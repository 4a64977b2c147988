"""The blocking client: one method per RPC, typed errors, deadlines, retries
where safe (see RetryPolicy)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, TypeVar

import grpc

from tokenwire.client._common import DEFAULT_TARGET, ClientCore, Metadata, RetryPolicy, build
from tokenwire.client.control import ControlClient
from tokenwire.client.errors import TokenwireError, UnavailableError
from tokenwire.client.session import Session
from tokenwire.v1 import (
    chat_pb2,
    completion_pb2,
    generate_pb2,
    models_pb2,
    service_pb2_grpc,
    tokenize_pb2,
)

R = TypeVar("R")


class Client(ClientCore):
    """A tokenwire client on one channel (blocking I/O over ClientCore).

    ``timeout`` is the default deadline of every call in seconds (None: no
    deadline; each method takes ``timeout=`` too). ``tenant`` is sent as the
    ``x-tenant-id`` header (honoured only by a server that trusts the hop,
    ``--trust-tenant-header``; otherwise the API key names the tenant).
    ``api_key`` (default $TOKENWIRE_API_KEY) is sent as ``authorization:
    Bearer``; ``tls`` / ``root_certificates`` open a TLS channel. Request
    methods take a proto message, an OpenAI-style dict, and/or keyword
    fields::

        client.chat(messages="What is the capital of France?", max_tokens=20,
                    return_token_ids=True)
    """

    def __init__(
        self, target: str = DEFAULT_TARGET, *, timeout: float | None = None,
        retry: RetryPolicy | None = None, tenant: str | None = None,
        metadata: Sequence[tuple[str, str]] = (), channel: grpc.Channel | None = None,
        options: Sequence[tuple[str, Any]] = (), api_key: str | None = None, tls: bool = False,
        root_certificates: bytes | None = None, admin_api_key: str | None = None,
    ):
        super().__init__(target, timeout=timeout, retry=retry, tenant=tenant, metadata=metadata,
                         api_key=api_key, tls=tls, root_certificates=root_certificates,
                         admin_api_key=admin_api_key)
        self._own_channel = channel is None
        creds = self._credentials
        self.channel = channel or (
            grpc.secure_channel(target, creds, options=list(options)) if creds
            else grpc.insecure_channel(target, options=list(options))
        )
        self.stub = service_pb2_grpc.TokenwireServiceStub(self.channel)
        # The ControlService, with the admin key (default $TOKENWIRE_ADMIN_API_KEY).
        self.control = ControlClient(self.channel, self._admin_metadata, timeout)

    def close(self) -> None:
        if self._own_channel:
            self.channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- I/O: one attempt after another, as Attempts decides ----------------
    def _unary(
        self, method: Callable[..., R], request: Any, timeout: float | None, metadata: Metadata,
        *, operator: bool = False,
    ) -> R:
        call = self._attempts(timeout, metadata, operator=operator)
        while True:
            try:
                return method(request, **call.kwargs())
            except grpc.RpcError as exc:
                wait = call.failed(exc)
            time.sleep(wait)

    def _stream(
        self, method: Callable[..., Any], request: Any, timeout: float | None, metadata: Metadata
    ) -> Iterator[Any]:
        call = self._attempts(timeout, metadata)
        while True:
            rpc = method(request, **call.kwargs())
            received = False
            try:
                for item in rpc:
                    received = True
                    yield item
                return
            except grpc.RpcError as exc:
                wait = call.failed(exc, received=received)
            finally:
                rpc.cancel()  # a consumer that stops early aborts the engine request
            time.sleep(wait)

    # -- chat and generate -----------------------------------------------
    def chat(
        self, request: chat_pb2.CreateChatCompletionRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> chat_pb2.CreateChatCompletionResponse:
        """CreateChatCompletion."""
        req = build(chat_pb2.CreateChatCompletionRequest, request, fields)
        return self._unary(self.stub.CreateChatCompletion, req, timeout, metadata)

    def stream_chat(
        self, request: chat_pb2.CreateChatCompletionRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> Iterator[chat_pb2.StreamChatCompletionResponse]:
        """StreamChatCompletion: chunks with text and token-id deltas."""
        req = build(chat_pb2.CreateChatCompletionRequest, request, fields)
        return self._stream(self.stub.StreamChatCompletion, req, timeout, metadata)

    def complete(
        self, request: completion_pb2.CreateCompletionRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> completion_pb2.CreateCompletionResponse:
        """CreateCompletion: a text or token-id prompt, or a batch of them."""
        req = build(completion_pb2.CreateCompletionRequest, request, fields)
        return self._unary(self.stub.CreateCompletion, req, timeout, metadata)

    def stream_complete(
        self, request: completion_pb2.CreateCompletionRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> Iterator[completion_pb2.StreamCompletionResponse]:
        """StreamCompletion."""
        req = build(completion_pb2.CreateCompletionRequest, request, fields)
        return self._stream(self.stub.StreamCompletion, req, timeout, metadata)

    def generate(
        self, request: generate_pb2.GenerateRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> generate_pb2.GenerateResponse:
        """Generate from token ids."""
        req = build(generate_pb2.GenerateRequest, request, fields)
        return self._unary(self.stub.Generate, req, timeout, metadata)

    def stream_generate(
        self, request: generate_pb2.GenerateRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> Iterator[generate_pb2.GenerateResponse]:
        """StreamGenerate."""
        req = build(generate_pb2.GenerateRequest, request, fields)
        return self._stream(self.stub.StreamGenerate, req, timeout, metadata)

    def session(self, *, timeout: float | None = None, metadata: Metadata = None) -> Session:
        """Open a Session stream (never retried). Use it as a context manager."""
        return Session(self.stub, timeout=self.timeout if timeout is None else timeout,
                       metadata=self._md(metadata))

    # -- tokenizer and models ---------------------------------------------
    def tokenize(
        self, request: tokenize_pb2.TokenizeRequest | Mapping[str, Any] | None = None, /,
        *, timeout: float | None = None, metadata: Metadata = None, **fields: Any,
    ) -> tokenize_pb2.TokenizeResponse:
        req = build(tokenize_pb2.TokenizeRequest, request, fields)
        return self._unary(self.stub.Tokenize, req, timeout, metadata)

    def detokenize(
        self, tokens: Sequence[int], *, model: str = "", timeout: float | None = None,
        metadata: Metadata = None,
    ) -> str:
        req = tokenize_pb2.DetokenizeRequest(tokens=list(tokens), model=model)
        return self._unary(self.stub.Detokenize, req, timeout, metadata).prompt

    def list_models(
        self, *, timeout: float | None = None, metadata: Metadata = None
    ) -> models_pb2.ListModelsResponse:
        return self._unary(self.stub.ListModels, models_pb2.ListModelsRequest(), timeout, metadata)

    def health(
        self, *, timeout: float | None = None, metadata: Metadata = None
    ) -> models_pb2.GetHealthResponse:
        return self._unary(self.stub.GetHealth, models_pb2.GetHealthRequest(), timeout, metadata)

    def stats(
        self, *, timeout: float | None = None, metadata: Metadata = None
    ) -> models_pb2.GetStatsResponse:
        return self._unary(self.stub.GetStats, models_pb2.GetStatsRequest(), timeout, metadata,
                            operator=True)

    def wait_ready(self, timeout: float = 120.0, poll: float = 0.5) -> None:
        """Block until the server reports SERVING (UnavailableError after timeout)."""
        end = time.monotonic() + timeout
        while True:
            try:
                self.health(timeout=min(5.0, timeout))
                return
            except TokenwireError as exc:
                if time.monotonic() + poll > end:
                    raise UnavailableError(
                        f"{self.target} not serving after {timeout}s: {exc.message}"
                    ) from exc
            time.sleep(poll)
