"""The tokenwire client library: needs only grpcio and protobuf.

- Client / AsyncClient: one method per RPC, typed errors, deadlines, retries
  where safe.
- Session / AsyncSession (client.session()): the bidirectional Session stream.
- Conversation / AsyncConversation: multi-turn token-in/token-out rollouts.
- client.control (ControlClient / AsyncControlClient): pause/resume, weight
  updates with versions, cache reset, LoRA; ``client.control.paused(mode)``.
"""

from tokenwire.client._common import RequestResult, RetryPolicy, TurnTokens
from tokenwire.client.async_client import AsyncClient
from tokenwire.client.control import AsyncControlClient, ControlClient
from tokenwire.client.conversation import AsyncConversation, Conversation, Turn
from tokenwire.client.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InternalError,
    InvalidArgumentError,
    NotFoundError,
    RequestCancelledError,
    ResourceExhaustedError,
    TokenwireError,
    UnauthenticatedError,
    UnavailableError,
)
from tokenwire.client.session import AsyncRequestHandle, AsyncSession, RequestHandle, Session
from tokenwire.client.sync_client import Client

__all__ = [
    "AsyncClient",
    "AsyncControlClient",
    "AsyncConversation",
    "AsyncRequestHandle",
    "AsyncSession",
    "Client",
    "ControlClient",
    "Conversation",
    "DeadlineExceededError",
    "FailedPreconditionError",
    "InternalError",
    "InvalidArgumentError",
    "NotFoundError",
    "RequestCancelledError",
    "RequestHandle",
    "RequestResult",
    "ResourceExhaustedError",
    "RetryPolicy",
    "Session",
    "TokenwireError",
    "Turn",
    "TurnTokens",
    "UnauthenticatedError",
    "UnavailableError",
]
