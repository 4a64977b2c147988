"""vLLM's KV-cache events (`--kv-events-config`, its ZMQ publisher) read back
as domain batches (core/kv_events.py): each subscription opens its own SUB
socket per data-parallel rank on the publisher's endpoint (a bind wildcard
connected on 127.0.0.1; rank r's port is the base port + r, as vLLM offsets
it, or what the engine client reports for the rank), decodes the payloads
with vLLM's msgspec types and checks each rank's sequence numbers.

Bounded memory: a socket queues at most SUBSCRIBER_BACKLOG batches on this
side (ZMQ's receive high-water mark); a subscriber whose stream does not
take them stops reading, the publisher drops what it cannot queue, and the
gap ends the subscription with KV_EVENTS_SUBSCRIBER_BEHIND. Closing the
iterator (a cancelled RPC) closes the sockets."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Iterable
from typing import Any

from tokenwire.server.core.kv_events import (
    SUBSCRIBER_BACKLOG,
    AllBlocksCleared,
    BlocksRemoved,
    BlocksStored,
    ExtraKey,
    KvEvent,
    KvEventBatch,
    fold_hash,
    kv_events_disabled,
    subscriber_behind,
)

log = logging.getLogger("tokenwire.engine")


def connectable(endpoint: str) -> str:
    """A publisher's bind endpoint as a subscriber connects to it: the
    wildcards (`*`, 0.0.0.0, `[::]`) on this host."""
    return (endpoint.replace("tcp://*", "tcp://127.0.0.1").replace("0.0.0.0", "127.0.0.1")
            .replace("[::]", "127.0.0.1"))


def offset_port(endpoint: str, rank: int) -> str:
    """Rank `rank`'s endpoint, as vLLM's publisher offsets it (a tcp port of
    0 is left to the OS, inproc gets a suffix)."""
    from vllm.distributed.kv_events import ZmqEventPublisher

    return ZmqEventPublisher.offset_endpoint_port(endpoint, rank) or endpoint


def sources(config: Any, parallel: Any, reported: dict[int, Any] | None = None
            ) -> list[tuple[int, str]]:
    """(rank, endpoint to connect) of every rank publishing to this process;
    FAILED_PRECONDITION KV_EVENTS_DISABLED when no ZMQ publisher binds here."""
    if config is None or not getattr(config, "enable_kv_cache_events", False):
        raise kv_events_disabled("no --kv-events-config with enable_kv_cache_events")
    if getattr(config, "publisher", None) != "zmq":
        raise kv_events_disabled(f"publisher {config.publisher!r}, not 'zmq'")
    endpoint = str(config.endpoint)
    from vllm.distributed.kv_events import ZmqEventPublisher

    if not ZmqEventPublisher._is_bind_endpoint(endpoint):
        raise kv_events_disabled(f"the engine connects out to {endpoint}, it binds nothing here")
    found = [(rank, connectable(str(c.endpoint))) for rank, c in sorted((reported or {}).items())
             if getattr(c, "endpoint", None)]
    if found:
        return found
    if endpoint.endswith(":0"):
        raise kv_events_disabled(f"{endpoint}: a port the OS chose, which the engine did not "
                                 "report; give a port")
    return [(rank, connectable(offset_port(endpoint, rank))) for rank in _ranks(parallel)]


def _ranks(parallel: Any) -> Iterable[int]:
    size = int(getattr(parallel, "data_parallel_size", 1) or 1)
    rank = int(getattr(parallel, "data_parallel_rank", 0) or 0)
    if getattr(parallel, "data_parallel_external_lb", False):
        return [rank]  # this process's engine is one rank of the deployment
    if getattr(parallel, "data_parallel_hybrid_lb", False):
        return range(rank, rank + int(getattr(parallel, "data_parallel_size_local", 1) or 1))
    return range(size)


def _extra(keys: Any) -> tuple[ExtraKey, ...] | None:
    if keys is None:
        return None
    out: list[ExtraKey] = []
    for key in keys:
        if isinstance(key, (list, tuple)) and len(key) == 2 and isinstance(key[0], str) \
                and isinstance(key[1], int):
            out.append((key[0], key[1]))
        elif isinstance(key, (str, int, bytes)) and not isinstance(key, bool):
            out.append(key)
    return tuple(out)


def domain_event(event: Any) -> KvEvent | None:
    """One of vLLM's decoded events as a domain event (None: a kind this
    version does not know)."""
    from vllm.distributed.kv_events import AllBlocksCleared as Cleared
    from vllm.distributed.kv_events import BlockRemoved, BlockStored

    if isinstance(event, BlockStored):
        parent = event.parent_block_hash
        return BlocksStored(
            block_hashes=tuple(fold_hash(h) for h in event.block_hashes),
            token_ids=tuple(event.token_ids), block_size=int(event.block_size),
            parent_block_hash=None if parent is None else fold_hash(parent),
            lora_id=event.lora_id, lora_name=event.lora_name, medium=event.medium,
            extra_keys=tuple(_extra(k) for k in event.extra_keys or ()),
            group_idx=event.group_idx, kv_cache_spec_kind=event.kv_cache_spec_kind,
            kv_cache_spec_sliding_window=event.kv_cache_spec_sliding_window,
            locality=event.locality, ownership=event.ownership, session_id=event.session_id)
    if isinstance(event, BlockRemoved):
        return BlocksRemoved(block_hashes=tuple(fold_hash(h) for h in event.block_hashes),
                             medium=event.medium, group_idx=event.group_idx,
                             locality=event.locality, ownership=event.ownership)
    if isinstance(event, Cleared):
        return AllBlocksCleared(ownership=getattr(event, "ownership", None))
    return None


def domain_batch(payload: bytes, sequence: int, rank: int, decoder: Any) -> KvEventBatch:
    """A publisher payload as a batch; one that does not decode is an empty
    batch under its sequence (the subscriber sees no gap for it)."""
    try:
        raw = decoder.decode(payload)
    except Exception as exc:  # one bad payload must not end the stream
        log.warning("KV event batch %d of rank %d did not decode: %s", sequence, rank, exc)
        return KvEventBatch(sequence, time.time(), (), rank)
    events = tuple(e for e in map(domain_event, raw.events) if e is not None)
    dp_rank = raw.data_parallel_rank if raw.data_parallel_rank is not None else rank
    return KvEventBatch(sequence, float(raw.ts), events, dp_rank)


async def subscribe(endpoints: list[tuple[int, str]], topic: str,
                    backlog: int = SUBSCRIBER_BACKLOG) -> AsyncIterator[KvEventBatch]:
    """Every rank's batches as they are published, from now on."""
    import msgspec
    import zmq
    import zmq.asyncio
    from vllm.distributed.kv_events import KVEventBatch

    decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
    context = zmq.asyncio.Context.instance()
    poller = zmq.asyncio.Poller()
    rank_of: dict[Any, int] = {}
    last: dict[int, int] = {}
    try:
        for rank, endpoint in endpoints:
            sock = context.socket(zmq.SUB)
            rank_of[sock] = rank
            sock.setsockopt(zmq.RCVHWM, backlog)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.SUBSCRIBE, topic.encode())
            sock.connect(endpoint)
            poller.register(sock, zmq.POLLIN)
        log.info("KV-event subscriber on %s", ", ".join(e for _, e in endpoints))
        while True:
            for sock, _ in await poller.poll():
                while sock.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                    frames = await sock.recv_multipart(zmq.NOBLOCK)
                    if len(frames) < 3 or len(frames[1]) != 8:
                        continue
                    rank, sequence = rank_of[sock], int.from_bytes(frames[1], "big")
                    if rank in last and sequence != last[rank] + 1:
                        raise subscriber_behind(
                            f"rank {rank}: batch {sequence} after {last[rank]}")
                    last[rank] = sequence
                    yield domain_batch(frames[2], sequence, rank, decoder)
    finally:
        for sock in rank_of:
            sock.close(linger=0)
