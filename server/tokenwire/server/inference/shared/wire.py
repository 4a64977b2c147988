"""`Wire`: a front's REST codecs (inference/front.py), held by the fronts
that print their own JSON or SSE (shared/openai_wire.py,
anthropic/wire.py, responses/wire.py) and run by api/fronts.py."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from tokenwire.server.core.errors import TokenwireError


@dataclasses.dataclass(frozen=True)
class Wire:
    """A front's REST codecs, run by the server (EventStreamService) so the
    gateway passes bytes through: the unary JSON printer, the SSE framer of
    one chunk, the error event that ends a started stream (given the last
    chunk sent, None when only keep-alives went out) and the bytes that end
    a stream (b"": its last event ends it)."""

    json: Callable[[Any], bytes]
    event: Callable[[Any], bytes]
    error_event: Callable[[TokenwireError, Any | None], bytes]
    done: bytes = b""
