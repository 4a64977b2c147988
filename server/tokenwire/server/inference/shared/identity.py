"""Who a request is and where it goes: the model it names (or a LoRA
adapter), its request id, its session, its data-parallel rank; each
validated with the field named."""

from __future__ import annotations

import uuid
from collections.abc import Collection

from tokenwire.server.core.errors import InvalidArgument, NotFound
from tokenwire.wire import DP_RANK_HEADERS

MAX_REQUEST_ID = 256


MAX_SESSION_ID = 256


class ServedModel(str):
    """The name the base model is reported under (vLLM's first served name),
    carrying the other names a request may give for it (`aliases`: the rest
    of --served-model-name, the model folder's name)."""

    aliases: tuple[str, ...]

    def __new__(cls, name: str, aliases: Collection[str] = ()) -> ServedModel:
        self = super().__new__(cls, name)
        self.aliases = tuple(a for a in aliases if a != name)
        return self


def check_model(requested: str, served: str, adapters: Collection[str] = ()) -> str:
    """The model a request names: the served model (also when empty, or named
    by any of its aliases: reported under its first name) or a loaded LoRA
    adapter's name (vLLM's rule: `model` selects the adapter)."""
    aliases = served.aliases if isinstance(served, ServedModel) else ()
    if requested and requested != served and requested not in aliases:
        if requested in adapters:
            return requested
        known = ", ".join(repr(n) for n in (served, *aliases, *sorted(adapters)))
        raise NotFound(
            f"model '{requested}' is not served here; this server serves {known}",
            param="model",
            reason="MODEL_NOT_FOUND",
        )
    return served


def lora_of(model: str, served: str) -> str | None:
    """The LoRA adapter a checked model name selects (None: the base)."""
    return None if model == served else model


def new_request_id(prefix: str, requested: str, header: str | None = None) -> str:
    """The request's id: its own request_id as given, else `prefix-<the
    call's x-request-id>` (vLLM's use of X-Request-Id), else a new one."""
    if not requested and header:
        return f"{prefix}-{check_request_id(header, 'x-request-id')}"
    if requested:
        return check_request_id(requested, "request_id")
    return f"{prefix}-{uuid.uuid4().hex}"


def check_request_id(value: str, param: str) -> str:
    """A caller's request id: at most MAX_REQUEST_ID characters, all of them
    printable (no newline or other control or format character: the id is
    written into the access log, the engine's logs and trace spans, where
    one would start a line of the caller's making: issue 42 L-4)."""
    if len(value) > MAX_REQUEST_ID:
        raise InvalidArgument(f"{param} must be at most {MAX_REQUEST_ID} characters",
                              param=param, reason="VALUE_TOO_LONG")
    if not value.isprintable():
        raise InvalidArgument(
            f"{param} must hold printable characters only (no newline, tab or other control "
            f"or format character); got {value!r}", param=param, reason="INVALID_FORMAT")
    return value


def pick_session_id(body: str, header: str | None) -> str | None:
    """The session a request belongs to: the body's session_id, else the
    x-session-id metadata; None when neither is given."""
    session = body or header or None
    if session is not None and len(session) > MAX_SESSION_ID:
        raise InvalidArgument(f"session_id must be at most {MAX_SESSION_ID} characters",
                              param="session_id", reason="VALUE_TOO_LONG")
    return session


def pick_dp_rank(body: int | None, body_param: str, header: str | None, dp_size: int) -> int | None:
    """The data-parallel rank a request is pinned to: the body field, else
    the metadata; None lets vLLM balance. Must be below the DP size."""
    param = body_param
    rank = body
    if rank is None and header is not None:
        param = DP_RANK_HEADERS[0]
        try:
            rank = int(header)
        except ValueError:
            raise InvalidArgument(f"{param} must be an integer rank; got {header!r}", param=param,
                                  reason="INVALID_FORMAT") from None
    if rank is None:
        return None
    if not 0 <= rank < dp_size:
        raise InvalidArgument(
            f"{param} must be in [0, {dp_size}) (the engine's --data-parallel-size); got {rank}",
            param=param, reason="VALUE_OUT_OF_RANGE",
        )
    return rank
