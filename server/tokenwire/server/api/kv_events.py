"""The engine's KV-cache events (core/kv_events.py) as smg's wire:
`smg.grpc.common.KvEventBatch`, what vLLM's engine service streams from
`SubscribeKvEvents`. One `KvWire` per subscription, with the rules smg's own
relay applies: the publisher's sequence number and rank on every batch, an
event id counting every event the engine sent, block hashes as signed
int64; blocks stored sliced per block (token ids, size, the LoRA id, the
extra keys) under their parent, tier and cache level from the medium,
locality, the LoRA name and cache salt (the first text extra key of the
first block that is not the LoRA name). Left out, as smg's relay leaves
them out: a store whose hashes do not cover its tokens in whole blocks,
events of a residency agent, of a remote locality or an unknown medium,
and those of a hybrid model's groups that are no main attention."""

from __future__ import annotations

from smg_grpc_proto.generated import common_pb2

from tokenwire.server.core.kv_events import (
    AllBlocksCleared,
    BlocksRemoved,
    BlocksStored,
    ExtraKey,
    KvEvent,
    KvEventBatch,
)

MAIN_ATTENTION_KINDS = frozenset({"full_attention", "mla_attention", "sink_full_attention"})
TIERS = {
    "GPU": common_pb2.KV_CACHE_TIER_DEVICE, "DEVICE": common_pb2.KV_CACHE_TIER_DEVICE,
    "CPU": common_pb2.KV_CACHE_TIER_HOST, "CPU_PINNED": common_pb2.KV_CACHE_TIER_HOST,
    "CPU_TIER1": common_pb2.KV_CACHE_TIER_HOST, "CPU_TIER2": common_pb2.KV_CACHE_TIER_DISK,
    "DISK": common_pb2.KV_CACHE_TIER_DISK, "NVME": common_pb2.KV_CACHE_TIER_DISK,
    "STORAGE": common_pb2.KV_CACHE_TIER_DISK, "EXTERNAL": common_pb2.KV_CACHE_TIER_EXTERNAL,
    "NETWORK": common_pb2.KV_CACHE_TIER_EXTERNAL, "REMOTE": common_pb2.KV_CACHE_TIER_EXTERNAL,
    "SHARED": common_pb2.KV_CACHE_TIER_EXTERNAL,
}
# KvBlock.cache_level, for older consumers: absent on the device.
CACHE_LEVELS = {common_pb2.KV_CACHE_TIER_HOST: 1, common_pb2.KV_CACHE_TIER_DISK: 2,
                common_pb2.KV_CACHE_TIER_EXTERNAL: 3}
RESIDENCY_AGENT = "kvcr"


def _extra_key(key: ExtraKey) -> common_pb2.KvBlockExtraKey:
    if isinstance(key, str):
        return common_pb2.KvBlockExtraKey(text=key)
    if isinstance(key, bytes):
        return common_pb2.KvBlockExtraKey(blob=key)
    if isinstance(key, tuple):
        return common_pb2.KvBlockExtraKey(
            multimodal=common_pb2.KvMultimodalKey(identifier=key[0], offset=key[1]))
    return common_pb2.KvBlockExtraKey(number=key)


def _cache_salt(event: BlocksStored) -> str | None:
    first = event.extra_keys[0] if event.extra_keys else None
    for key in first or ():
        if isinstance(key, str) and key and key != event.lora_name:
            return key
    return None


class KvWire:
    """Domain batches → KvEventBatch messages, for one subscription."""

    def __init__(self) -> None:
        self.event_id = 0
        self.groups: dict[tuple[int | None, int], bool] = {}  # (rank, group) -> main attention
        self.dropped = 0

    def batch(self, batch: KvEventBatch) -> common_pb2.KvEventBatch:
        out = common_pb2.KvEventBatch(sequence_number=batch.sequence, timestamp=batch.timestamp)
        if batch.dp_rank is not None:
            out.dp_rank = batch.dp_rank
        for event in batch.events:
            self.event_id += 1
            mapped = self.event(event, batch.dp_rank)
            if mapped is None:
                self.dropped += 1
            else:
                out.events.append(mapped)
        return out

    def event(self, event: KvEvent, rank: int | None) -> common_pb2.KvCacheEvent | None:
        if isinstance(event, AllBlocksCleared):
            cleared = common_pb2.KvCacheCleared()
            if event.ownership is not None:
                cleared.ownership = event.ownership
            return common_pb2.KvCacheEvent(event_id=self.event_id, cleared=cleared)
        if event.ownership is not None and event.ownership.lower() == RESIDENCY_AGENT:
            return None
        if event.locality is not None and event.locality.upper() != "LOCAL":
            return None
        tier = common_pb2.KV_CACHE_TIER_DEVICE if event.medium is None else TIERS.get(
            event.medium.upper())
        if tier is None or not self._main_group(event, rank):
            return None
        if isinstance(event, BlocksStored):
            stored = self._stored(event, tier)
            return None if stored is None else common_pb2.KvCacheEvent(
                event_id=self.event_id, stored=stored)
        removed = common_pb2.KvBlocksRemoved(block_hashes=event.block_hashes, tier=tier,
                                             locality=common_pb2.KV_CACHE_LOCALITY_LOCAL)
        if tier in CACHE_LEVELS:
            removed.cache_level = CACHE_LEVELS[tier]
        _set(removed, medium=event.medium, group_idx=event.group_idx, ownership=event.ownership)
        return common_pb2.KvCacheEvent(event_id=self.event_id, removed=removed)

    def _main_group(self, event: BlocksStored | BlocksRemoved, rank: int | None) -> bool:
        """A hybrid model's group: its kind learned from its stores; a group
        of unknown kind counts as main attention (a single-group engine's)."""
        if event.group_idx is None:
            return True
        key = (rank, event.group_idx)
        if isinstance(event, BlocksStored) and event.kv_cache_spec_kind is not None:
            self.groups[key] = event.kv_cache_spec_kind in MAIN_ATTENTION_KINDS
        return self.groups.get(key, True)

    def _stored(self, event: BlocksStored, tier: int) -> common_pb2.KvBlocksStored | None:
        width = event.block_size
        if (not event.block_hashes or width <= 0
                or len(event.block_hashes) * width != len(event.token_ids)):
            return None
        blocks = []
        for index, block_hash in enumerate(event.block_hashes):
            block = common_pb2.KvBlock(
                block_hash=block_hash, block_size=width,
                token_ids=event.token_ids[index * width:(index + 1) * width])
            if event.lora_id is not None:
                block.lora_id = event.lora_id
            if tier in CACHE_LEVELS:
                block.cache_level = CACHE_LEVELS[tier]
            keys = event.extra_keys[index] if index < len(event.extra_keys) else None
            block.extra_keys.extend(_extra_key(k) for k in keys or ())
            blocks.append(block)
        stored = common_pb2.KvBlocksStored(blocks=blocks, tier=tier,
                                           locality=common_pb2.KV_CACHE_LOCALITY_LOCAL)
        if event.parent_block_hash is not None:
            stored.parent_block_hash = event.parent_block_hash
        _set(stored, medium=event.medium, group_idx=event.group_idx,
             kv_cache_spec_kind=event.kv_cache_spec_kind,
             kv_cache_spec_sliding_window=event.kv_cache_spec_sliding_window,
             ownership=event.ownership, session_id=event.session_id,
             lora_name=event.lora_name or None, cache_salt=_cache_salt(event))
        return stored


def _set(message: object, **fields: object) -> None:
    for name, value in fields.items():
        if value is not None:
            setattr(message, name, value)
