"""`Outbox`: the Session stream's events waiting to be written, bounded in
bytes, with back-pressure on whoever produces them (api/session.py)."""

from __future__ import annotations

import asyncio

from google.protobuf.message import Message


class Outbox:
    """Events waiting to be written, bounded in bytes. When the client reads
    slowly, producers of data events wait for room, and the session stops
    reading the client's messages (back-pressure through HTTP/2 flow
    control), so a client that sends but never reads cannot grow the
    server's memory. Terminal events never wait (they come from done
    callbacks): each needs a start the session read while there was room,
    so they are bounded by the running requests."""

    def __init__(self, max_bytes: int):
        self._queue: asyncio.Queue[tuple[int, object]] = asyncio.Queue()
        self.max_bytes = max_bytes
        self.bytes = 0
        self._room = asyncio.Condition()

    async def put_data(self, event: Message) -> None:
        size = event.ByteSize()
        if self.bytes and self.bytes + size > self.max_bytes:
            async with self._room:  # one event always fits into an empty outbox
                await self._room.wait_for(
                    lambda: not self.bytes or self.bytes + size <= self.max_bytes)
        self.bytes += size
        self._queue.put_nowait((size, event))

    def put_final(self, item: object) -> None:
        size = item.ByteSize() if isinstance(item, Message) else 0
        self.bytes += size
        self._queue.put_nowait((size, item))

    async def wait_for_room(self) -> None:
        """Return once the outbox is below its limit (the reader's gate)."""
        if self.bytes >= self.max_bytes:
            async with self._room:
                await self._room.wait_for(lambda: self.bytes < self.max_bytes)

    async def get(self) -> object:
        size, item = await self._queue.get()
        if size:
            self.bytes -= size
            async with self._room:
                self._room.notify_all()
        return item
