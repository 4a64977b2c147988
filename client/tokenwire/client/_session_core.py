"""The Session stream without I/O, shared by Session and AsyncSession: the
start message of a request (a chat, completion or generate body, maybe
continuing an earlier request), the cancel and close messages, and each
request's event bookkeeping (HandleState: data events, its result, its
error)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from google.protobuf import json_format

from tokenwire.client._common import RequestResult, as_messages, build
from tokenwire.client.errors import DeadlineExceededError, TokenwireError, from_session_error
from tokenwire.v1 import chat_pb2, completion_pb2, generate_pb2, session_pb2


def continuation(
    previous_request_id: str, *, messages: Any = None, suffix_ids: Sequence[int] | None = None,
    choice_index: int | None = None,
) -> session_pb2.Continuation:
    c = session_pb2.Continuation(previous_request_id=previous_request_id)
    if messages is not None:
        for m in as_messages(messages):
            json_format.ParseDict(m, c.messages.add())
    if suffix_ids is not None:
        c.suffix_token_ids.extend(suffix_ids)
    if choice_index is not None:
        c.choice_index = choice_index
    return c


def session_start(
    request_id: str, *, chat: chat_pb2.CreateChatCompletionRequest | None = None,
    generate: generate_pb2.GenerateRequest | None = None,
    cont: session_pb2.Continuation | None = None,
    completion: completion_pb2.CreateCompletionRequest | None = None,
) -> session_pb2.SessionRequest:
    start = session_pb2.SessionStart(request_id=request_id)
    if chat is not None:
        start.chat.CopyFrom(chat)
    if completion is not None:
        start.completion.CopyFrom(completion)
    if generate is not None:
        start.generate.CopyFrom(generate)
    if cont is not None:
        start.continuation.CopyFrom(cont)
    return session_pb2.SessionRequest(start=start)


def start_message(
    request_id: str, kind: str, request: Any, fields: dict[str, Any], continue_from: str | None,
    suffix_ids: Sequence[int] | None, choice_index: int | None,
) -> session_pb2.SessionRequest:
    cont = None
    if continue_from is not None:
        messages = fields.pop("messages", None)
        cont = continuation(
            continue_from, messages=messages, suffix_ids=suffix_ids, choice_index=choice_index
        )
    elif suffix_ids is not None or choice_index is not None:
        raise ValueError("suffix_ids and choice_index need continue_from")
    if kind == "chat":
        return session_start(
            request_id, chat=build(chat_pb2.CreateChatCompletionRequest, request, fields), cont=cont
        )
    if kind == "completion":
        return session_start(
            request_id, completion=build(completion_pb2.CreateCompletionRequest, request, fields),
            cont=cont,
        )
    return session_start(
        request_id, generate=build(generate_pb2.GenerateRequest, request, fields), cont=cont
    )


class HandleState:
    """Turns one request's events into data events, a result or an error."""

    def __init__(self, request_id: str):
        self.request_id = request_id
        self.result = RequestResult(request_id, done=session_pb2.SessionRequestDone())
        self.ended = False
        self.error: TokenwireError | None = None

    def take(
        self, item: session_pb2.SessionResponse | TokenwireError
    ) -> session_pb2.SessionResponse | None:
        """A data event to hand out, or None when the request ended (raises on error)."""
        if isinstance(item, TokenwireError):
            self.ended, self.error = True, item
            raise item
        self.result.add(item)
        kind = item.WhichOneof("event")
        if kind == "done":
            self.ended = True
            return None
        if kind == "error":
            self.ended, self.error = True, from_session_error(item.error)
            raise self.error
        return item

    def no_event(self, timeout: float | None) -> DeadlineExceededError:
        """The error of a wait for the next event that timed out."""
        return DeadlineExceededError(f"no event for request '{self.request_id}' within {timeout}s")


def cancel_message(request_id: str) -> session_pb2.SessionRequest:
    """Cancel one running request."""
    return session_pb2.SessionRequest(cancel=session_pb2.SessionCancel(request_id=request_id))


def close_message() -> session_pb2.SessionRequest:
    """Abort the session's running requests (then the client half-closes)."""
    return session_pb2.SessionRequest(close=session_pb2.SessionClose())
