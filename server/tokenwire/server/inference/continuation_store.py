"""The token ids of finished session requests, kept so that a later turn can
continue one by id. Bounded: per session (requests and tokens) and over
all sessions (tokens); least recently used entries go first, and at the
server-wide limit from the session holding the most (a fair share: one
busy session cannot evict every other session's history). Ids are kept
as 4-byte arrays, not Python int lists (about 9x smaller); a turn's
prepared images count as their bytes / 4 ids."""

from __future__ import annotations

import collections
import dataclasses
from array import array
from collections.abc import Sequence

from tokenwire.server.core.errors import NotFound
from tokenwire.server.core.media_inputs import MultimodalPrompt

Key = tuple[str, str]  # (session id, request id)
REMEMBER_EVICTED = 1024  # evicted ids remembered per session, for a clear error


@dataclasses.dataclass
class StoredTurn:
    """One finished request: its prompt, each choice's completion, and the
    prompt's media as the engine prepared them (a turn with images: the
    next turn runs them again under its longer prompt)."""

    prompt: array
    completions: list[array]
    cache_salt: str | None
    media: MultimodalPrompt | None = None

    @classmethod
    def of(
        cls, prompt: Sequence[int], completions: Sequence[Sequence[int]], cache_salt: str | None,
        media: MultimodalPrompt | None = None,
    ) -> StoredTurn:
        return cls(array("I", prompt), [array("I", c) for c in completions], cache_salt, media)

    @property
    def tokens(self) -> int:
        """Its size in the store's unit, a 4-byte id: the ids, and the
        media's prepared bytes as that many ids' worth."""
        media = -(-self.media.nbytes // 4) if self.media is not None else 0
        return len(self.prompt) + sum(len(c) for c in self.completions) + media


@dataclasses.dataclass
class _SessionEntries:
    keys: collections.OrderedDict[str, None] = dataclasses.field(
        default_factory=collections.OrderedDict
    )
    tokens: int = 0
    evicted: collections.OrderedDict[str, str] = dataclasses.field(
        default_factory=collections.OrderedDict
    )


class ContinuationStore:
    def __init__(self, *, max_tokens: int, session_max_tokens: int, session_max_requests: int):
        self.max_tokens = max_tokens
        self.session_max_tokens = session_max_tokens
        self.session_max_requests = session_max_requests
        self._turns: collections.OrderedDict[Key, StoredTurn] = collections.OrderedDict()
        self._sessions: dict[str, _SessionEntries] = {}
        self.tokens = 0

    def __len__(self) -> int:
        return len(self._turns)

    def put(self, session: str, request_id: str, turn: StoredTurn) -> bool:
        """Store a finished request; False when it alone exceeds a limit."""
        self.discard(session, request_id)
        size = turn.tokens
        if size > min(self.max_tokens, self.session_max_tokens) or self.session_max_requests < 1:
            return False
        entries = self._sessions.setdefault(session, _SessionEntries())
        entries.evicted.pop(request_id, None)
        self._turns[(session, request_id)] = turn
        entries.keys[request_id] = None
        entries.tokens += size
        self.tokens += size
        while (
            len(entries.keys) > self.session_max_requests
            or entries.tokens > self.session_max_tokens
        ):
            oldest = next(iter(entries.keys))
            self._evict((session, oldest), "the session's limits")
        while self.tokens > self.max_tokens:
            # Fair share: the session holding the most tokens gives up its
            # least recently used entry, so a busy session evicts its own
            # history before anyone else's.
            largest = max(self._sessions, key=lambda s: self._sessions[s].tokens)
            oldest = next(iter(self._sessions[largest].keys))
            self._evict((largest, oldest), "the server-wide token limit")
        return True

    def get(self, session: str, request_id: str) -> StoredTurn:
        key = (session, request_id)
        turn = self._turns.get(key)
        if turn is None:
            entries = self._sessions.get(session)
            why = entries.evicted.get(request_id) if entries else None
            if why is not None:
                raise NotFound(
                    f"request '{request_id}' was evicted from the continuation store by {why} "
                    f"({self.session_max_requests} requests and {self.session_max_tokens} "
                    f"tokens per session, {self.max_tokens} tokens in all); send the whole "
                    "prompt as token ids instead",
                    param="continuation.previous_request_id", reason="CONTINUATION_EVICTED",
                )
            raise NotFound(
                f"no finished request '{request_id}' in this session (unknown id, or the "
                "request failed or was cancelled)",
                param="continuation.previous_request_id", reason="CONTINUATION_NOT_FOUND",
            )
        self._turns.move_to_end(key)
        self._sessions[session].keys.move_to_end(request_id)
        return turn

    def discard(self, session: str, request_id: str) -> None:
        """Forget an entry (its id is being reused), not as an eviction."""
        turn = self._turns.pop((session, request_id), None)
        if turn is not None:
            entries = self._sessions[session]
            del entries.keys[request_id]
            entries.tokens -= turn.tokens
            self.tokens -= turn.tokens

    def drop_session(self, session: str) -> None:
        entries = self._sessions.pop(session, None)
        if entries is None:
            return
        for request_id in entries.keys:
            turn = self._turns.pop((session, request_id))
            self.tokens -= turn.tokens

    def _evict(self, key: Key, why: str) -> None:
        session, request_id = key
        self.discard(session, request_id)
        evicted = self._sessions[session].evicted
        evicted[request_id] = why
        if len(evicted) > REMEMBER_EVICTED:
            evicted.popitem(last=False)
