"""The client core, shared by the sync and asyncio clients: configuration
and metadata (ClientCore), request building, the retry policy and its pure
decision (retry_wait), one call's attempts (Attempts: what each attempt is
sent with, and after a failure the wait or the typed error), deadlines, and
reading token ids out of responses. The sync and async classes only do I/O
on top of it; their RPC methods are generated (_service_methods.py)."""

from __future__ import annotations

import dataclasses
import os
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import grpc
from google.protobuf import json_format, struct_pb2
from google.protobuf.message import Message

from tokenwire.client.errors import TokenwireError, UnavailableError, from_rpc_error
from tokenwire.v1 import chat_pb2, completion_pb2, generate_pb2, session_pb2
from tokenwire.wire import TENANT_HEADER

DEFAULT_TARGET = "127.0.0.1:50051"
API_KEY_ENV = "TOKENWIRE_API_KEY"
ADMIN_KEY_ENV = "TOKENWIRE_ADMIN_API_KEY"

M = TypeVar("M", bound=Message)
# Extra metadata a call takes (``metadata=``), after the client's own.
Metadata = Iterable[tuple[str, str]] | None


# Keywords every generation method takes by the same name, which chat and
# completion requests keep in nvext (Generate at its root): the weight bounds
# and the cache salt by version.
NVEXT_KEYWORDS = ("exact_weight_version", "max_weight_lag", "salt_cache_by_version")


def build(cls: type[M], request: M | Mapping[str, Any] | None, fields: Mapping[str, Any]) -> M:
    """A request from a message, an OpenAI-style dict, and/or keyword fields
    (keywords win). A string `messages` is one user message. NVEXT_KEYWORDS
    go into `nvext` where the message has no root field of that name."""
    fields = dict(fields)
    names = cls.DESCRIPTOR.fields_by_name
    moved = {
        k: fields.pop(k)
        for k in NVEXT_KEYWORDS
        if k in fields and k not in names and "nvext" in names
    }
    if moved:
        fields["nvext"] = {**dict(fields.get("nvext") or {}), **moved}
    if isinstance(fields.get("messages"), str):
        fields["messages"] = [{"role": "user", "content": fields["messages"]}]
    if isinstance(request, Message):
        msg = cls()
        msg.CopyFrom(request)
        if fields:
            json_format.ParseDict(fields, msg)
        return msg
    body = dict(request or {})
    body.update(fields)
    if isinstance(body.get("messages"), str):
        body["messages"] = [{"role": "user", "content": body["messages"]}]
    return json_format.ParseDict(body, cls())


def struct(info: Mapping[str, Any] | None) -> struct_pb2.Struct:
    """A google.protobuf.Struct from a dict (None: empty)."""
    msg = struct_pb2.Struct()
    json_format.ParseDict(dict(info or {}), msg)
    return msg


def user(content: str) -> dict[str, str]:
    return {"role": "user", "content": content}


def as_messages(
    message: str | Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
) -> list[dict[str, Any]]:
    """A str (one user message), a message dict, or a list of them."""
    if message is None:
        return []
    if isinstance(message, str):
        return [user(message)]
    if isinstance(message, Mapping):
        return [dict(message)]
    return [dict(m) for m in message]


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Retries with exponential backoff and jitter, only where safe.

    Retried: UNAVAILABLE and RESOURCE_EXHAUSTED, which the server returns
    before any work is done (not serving yet, or the engine's queue is
    full), when the engine died under the call (ENGINE_DEAD: nothing of it
    reached the caller; `tokenwire up` restarts the replica, a fleet has
    others) and the transport returns when it cannot connect; for
    streaming RPCs only before the first message arrived.
    Never retried: every other code, and Session streams (they hold state).
    All attempts share the call's deadline.
    """

    max_attempts: int = 3
    initial_backoff: float = 0.25
    max_backoff: float = 4.0
    multiplier: float = 2.0
    codes: frozenset[grpc.StatusCode] = frozenset(
        {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.RESOURCE_EXHAUSTED}
    )

    def should_retry(self, err: TokenwireError, attempt: int) -> bool:
        return attempt < self.max_attempts and err.code in self.codes

    def backoff(self, attempt: int, err: TokenwireError | None = None) -> float:
        """Seconds to wait before attempt `attempt + 1` (attempt counts from
        1); at least the server's RetryInfo delay when it sent one."""
        cap = min(self.max_backoff, self.initial_backoff * self.multiplier ** (attempt - 1))
        wait = random.uniform(cap / 2, cap)
        if err is not None and err.retry_after:
            wait = max(wait, err.retry_after)
        return wait


def retry_wait(
    policy: RetryPolicy, err: TokenwireError, attempt: int, deadline: Deadline,
    *, received: bool = False,
) -> float | None:
    """The one retry decision (no I/O): seconds to wait before attempt
    `attempt + 1`, or None when the error must be raised (not retryable, out
    of attempts or deadline, or a stream that already delivered a message)."""
    if received or not policy.should_retry(err, attempt):
        return None
    wait = policy.backoff(attempt, err)
    return wait if deadline.allows(wait) else None


class Attempts:
    """One call's attempts, without I/O: the deadline and metadata every
    attempt is sent with (`kwargs`), and after a failure (`failed`) the
    seconds to wait before the next attempt, or the typed error raised, as
    retry_wait decides. The sync and async loops only call and sleep."""

    def __init__(
        self, policy: RetryPolicy, deadline: Deadline, metadata: tuple[tuple[str, str], ...]
    ):
        self.policy = policy
        self.deadline = deadline
        self.metadata = metadata
        self.attempt = 1

    def kwargs(self) -> dict[str, Any]:
        return {"timeout": self.deadline.remaining(), "metadata": self.metadata}

    def failed(self, exc: grpc.RpcError, *, received: bool = False) -> float:
        """The wait before the next attempt; raises the typed error when the
        call must not be tried again (`received`: a stream gave a message)."""
        err = from_rpc_error(exc)
        wait = retry_wait(self.policy, err, self.attempt, self.deadline, received=received)
        if wait is None:
            raise err from None
        self.attempt += 1
        return wait


class Deadline:
    """An overall deadline shared by the attempts of one call."""

    def __init__(self, timeout: float | None):
        self.end = None if timeout is None else time.monotonic() + timeout

    def remaining(self) -> float | None:
        return None if self.end is None else max(0.0, self.end - time.monotonic())

    def allows(self, wait: float) -> bool:
        return self.end is None or time.monotonic() + wait < self.end


def base_metadata(
    metadata: Sequence[tuple[str, str]], api_key: str | None
) -> tuple[tuple[str, str], ...]:
    """The client's own metadata, plus `authorization: Bearer <key>` when an
    API key is given (or set in $TOKENWIRE_API_KEY)."""
    key = os.environ.get(API_KEY_ENV, "") if api_key is None else api_key
    return (*metadata, ("authorization", f"Bearer {key}")) if key else tuple(metadata)


def credentials(
    tls: bool, root_certificates: bytes | None
) -> grpc.ChannelCredentials | None:
    """TLS channel credentials (None: plaintext)."""
    if not tls and root_certificates is None:
        return None
    return grpc.ssl_channel_credentials(root_certificates=root_certificates)


def call_metadata(
    base: Sequence[tuple[str, str]], tenant: str | None, extra: Iterable[tuple[str, str]] | None
) -> tuple[tuple[str, str], ...]:
    md = list(base)
    if tenant:
        md.append((TENANT_HEADER, tenant))
    md.extend(extra or ())
    return tuple(md)


def admin_metadata(
    base: Sequence[tuple[str, str]], admin_api_key: str | None
) -> tuple[tuple[str, str], ...]:
    """`base` without its authorization, plus the admin key's (if any; default
    $TOKENWIRE_ADMIN_API_KEY): what ControlService calls carry."""
    key = admin_api_key if admin_api_key is not None else os.environ.get(ADMIN_KEY_ENV, "")
    md = tuple((k, v) for k, v in base if k != "authorization")
    return md + ((("authorization", f"Bearer {key}"),) if key else ())


class ClientCore:
    """What a client is, whatever its I/O: target, default deadline, retry
    policy, tenant and metadata (inference and admin), TLS credentials."""

    def __init__(
        self, target: str, *, timeout: float | None, retry: RetryPolicy | None,
        tenant: str | None, metadata: Sequence[tuple[str, str]], api_key: str | None,
        tls: bool, root_certificates: bytes | None, admin_api_key: str | None,
    ):
        self.target = target
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.tenant = tenant
        self._metadata = base_metadata(metadata, api_key)
        self._admin_metadata = admin_metadata(self._metadata, admin_api_key)
        # Operator calls (GetStats) carry the admin key when the client has one.
        self._operator_metadata = (
            self._admin_metadata if any(k == "authorization" for k, _ in self._admin_metadata)
            else self._metadata
        )
        self._credentials = credentials(tls, root_certificates)

    def _md(self, metadata: Metadata, *, operator: bool = False) -> tuple[tuple[str, str], ...]:
        return call_metadata(self._operator_metadata if operator else self._metadata, self.tenant,
                             metadata)

    def _deadline(self, timeout: float | None) -> Deadline:
        return Deadline(self.timeout if timeout is None else timeout)

    def _channel(self, channel: Any, options: Sequence[tuple[str, Any]], grpc_module: Any) -> Any:
        """`channel` when given (the caller owns it), else a new one on the
        target (TLS when asked), from `grpc_module` (grpc or grpc.aio)."""
        self._own_channel = channel is None
        if channel is not None:
            return channel
        if self._credentials:
            return grpc_module.secure_channel(self.target, self._credentials, options=list(options))
        return grpc_module.insecure_channel(self.target, options=list(options))

    def _not_ready(self, exc: TokenwireError, timeout: float, poll: float, end: float) -> None:
        """wait_ready's decision after a failed health check: raises
        UnavailableError when another poll would pass the end."""
        if time.monotonic() + poll > end:
            raise UnavailableError(
                f"{self.target} not serving after {timeout}s: {exc.message}"
            ) from exc

    def _attempts(self, timeout: float | None, metadata: Metadata, *,
                  operator: bool = False) -> Attempts:
        """The attempts of one call: `timeout` (default: the client's) and
        extra `metadata`; `operator`: the call carries the admin key."""
        return Attempts(self.retry, self._deadline(timeout), self._md(metadata, operator=operator))


# -- what a request returned -----------------------------------------------


@dataclasses.dataclass
class RequestResult:
    """Everything one session request returned."""

    request_id: str
    done: session_pb2.SessionRequestDone
    chat: chat_pb2.CreateChatCompletionResponse | None = None
    generate: generate_pb2.GenerateResponse | None = None
    chat_chunks: list[chat_pb2.StreamChatCompletionResponse] = dataclasses.field(
        default_factory=list
    )
    generate_chunks: list[generate_pb2.GenerateResponse] = dataclasses.field(default_factory=list)
    completion: completion_pb2.CreateCompletionResponse | None = None
    completion_chunks: list[completion_pb2.StreamCompletionResponse] = dataclasses.field(
        default_factory=list)

    def add(self, event: session_pb2.SessionResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "completion_chunk":
            self.completion_chunks.append(event.completion_chunk)
        elif kind == "completion_result":
            self.completion = event.completion_result
        if kind == "chat_chunk":
            self.chat_chunks.append(event.chat_chunk)
        elif kind == "chat_result":
            self.chat = event.chat_result
        elif kind == "generate_chunk":
            self.generate_chunks.append(event.generate_chunk)
        elif kind == "generate_result":
            self.generate = event.generate_result
        elif kind == "done":
            self.done = event.done

    @property
    def tokens(self) -> TurnTokens:
        """Prompt ids, completion ids, logprobs and text of choice 0."""
        if self.chat is not None:
            t = TurnTokens.from_chat(self.chat)
        elif self.chat_chunks:
            t = TurnTokens.from_chat_chunks(self.chat_chunks)
        elif self.generate is not None:
            t = TurnTokens.from_generate([self.generate])
        else:
            t = TurnTokens.from_generate(self.generate_chunks)
        if self.done.prompt_token_ids:
            t.prompt_ids = list(self.done.prompt_token_ids)
        return t


@dataclasses.dataclass
class TurnTokens:
    """The token view of one response (choice 0): what a trainer needs."""

    prompt_ids: list[int] = dataclasses.field(default_factory=list)
    completion_ids: list[int] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)
    text: str = ""
    finish_reason: str = ""
    cached_tokens: int = 0

    @classmethod
    def from_chat(cls, resp: chat_pb2.CreateChatCompletionResponse) -> TurnTokens:
        t = cls(prompt_ids=list(resp.prompt_token_ids))
        if resp.choices:
            c = resp.choices[0]
            t.completion_ids = list(c.token_ids)
            t.logprobs = _chat_logprobs(c.logprobs, c.nvext)
            t.text = c.message.content
            t.finish_reason = c.finish_reason
        t.cached_tokens = resp.usage.prompt_tokens_details.cached_tokens
        return t

    @classmethod
    def from_chat_chunks(
        cls, chunks: Iterable[chat_pb2.StreamChatCompletionResponse]
    ) -> TurnTokens:
        t = cls()
        for chunk in chunks:
            t.add_chat_chunk(chunk)
        return t

    def add_chat_chunk(self, chunk: chat_pb2.StreamChatCompletionResponse) -> None:
        if chunk.prompt_token_ids:
            self.prompt_ids = list(chunk.prompt_token_ids)
        if chunk.HasField("usage"):
            self.cached_tokens = chunk.usage.prompt_tokens_details.cached_tokens
        for c in chunk.choices:
            if c.index != 0:
                continue
            self.completion_ids.extend(c.token_ids)
            self.logprobs.extend(e.logprob for e in c.logprobs.content)
            self.text += c.delta.content
            if c.finish_reason:
                self.finish_reason = c.finish_reason
                if not self.logprobs and c.nvext.engine_data.completion_logprobs:
                    self.logprobs = list(c.nvext.engine_data.completion_logprobs)

    @classmethod
    def from_generate(cls, responses: Iterable[generate_pb2.GenerateResponse]) -> TurnTokens:
        t = cls()
        for resp in responses:
            if resp.prompt_token_ids:
                t.prompt_ids = list(resp.prompt_token_ids)
            if resp.HasField("usage"):
                t.cached_tokens = resp.usage.prompt_tokens_details.cached_tokens
            for c in resp.choices:
                if c.index != 0:
                    continue
                t.completion_ids.extend(c.token_ids)
                t.logprobs.extend(e.logprob for e in c.logprobs.content)
                t.text += c.text
                t.finish_reason = c.finish_reason or t.finish_reason
        return t


def _chat_logprobs(logprobs: Any, nvext: Any) -> list[float]:
    if logprobs.content:
        return [e.logprob for e in logprobs.content]
    return list(nvext.engine_data.completion_logprobs)
