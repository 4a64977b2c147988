"""The fake engine's KV-cache events, as vLLM's `--kv-events-config` would
publish them (off until a test sets `enabled`): a BlocksStored for the
blocks a prompt adds to the fake's prefix cache, one hash per block chained
to the block before it. One batch per store, numbered from 0 like vLLM's
publisher; every subscriber gets every batch through its own bounded
backlog, and one that falls further behind is dropped
(KV_EVENTS_SUBSCRIBER_BEHIND)."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import time
from collections.abc import AsyncIterator, Hashable

from tokenwire.server.core.kv_events import (
    SUBSCRIBER_BACKLOG,
    AllBlocksCleared,
    BlocksStored,
    KvEvent,
    KvEventBatch,
    fold_hash,
    kv_events_disabled,
    subscriber_behind,
)


def block_hash(key: Hashable) -> int:
    """A fake block's hash: its prefix-cache key digested (stable across runs)."""
    return fold_hash(hashlib.blake2b(repr(key).encode(), digest_size=8).digest())


class _Subscriber:
    def __init__(self) -> None:
        self.batches: collections.deque[KvEventBatch] = collections.deque()
        self.ready = asyncio.Event()
        self.behind = False


class FakeKvEvents:
    def __init__(self, backlog: int = SUBSCRIBER_BACKLOG) -> None:
        self.enabled = False
        self.backlog = backlog
        self.sequence = -1
        self._subscribers: set[_Subscriber] = set()

    @property
    def subscribers(self) -> int:
        return len(self._subscribers)

    def stored(self, prompt: list[int], new: list[tuple[int, Hashable]], block_size: int,
               parent: Hashable | None, lora: str | None = None) -> None:
        """Blocks a prompt added to the cache: (end, key) of each, consecutive
        (a block's key holds its whole prefix, so what was cached is a prefix
        of the prompt's blocks), and the key of the block before the first
        (None at the prompt's start)."""
        if not (self.enabled and new):
            return
        start = new[0][0] - block_size
        self.publish((BlocksStored(
            block_hashes=tuple(block_hash(key) for _, key in new),
            token_ids=tuple(prompt[start:new[-1][0]]), block_size=block_size,
            parent_block_hash=None if parent is None else block_hash(parent),
            lora_name=lora or None, medium="GPU"),))

    def cleared(self) -> None:
        if self.enabled:
            self.publish((AllBlocksCleared(),))

    def publish(self, events: tuple[KvEvent, ...]) -> None:
        self.sequence += 1
        batch = KvEventBatch(self.sequence, time.time(), events, 0)
        for sub in list(self._subscribers):
            if len(sub.batches) >= self.backlog:
                sub.behind = True
                self._subscribers.discard(sub)
            else:
                sub.batches.append(batch)
            sub.ready.set()

    def subscribe(self) -> AsyncIterator[KvEventBatch]:
        if not self.enabled:
            raise kv_events_disabled("the fake engine's events are off")
        sub = _Subscriber()
        self._subscribers.add(sub)
        return self._stream(sub)

    async def _stream(self, sub: _Subscriber) -> AsyncIterator[KvEventBatch]:
        try:
            while True:
                if sub.behind:
                    raise subscriber_behind(f"more than {self.backlog} batches not taken")
                if sub.batches:
                    yield sub.batches.popleft()
                    continue
                sub.ready.clear()
                await sub.ready.wait()
        finally:
            self._subscribers.discard(sub)
