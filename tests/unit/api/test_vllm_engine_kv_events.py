"""vLLM's engine service's SubscribeKvEvents on the fake engine: the blocks a
request's prompt adds to the prefix cache arrive as BlockStored (token ids
per block, the hash chain through parent_block_hash, consecutive sequence
numbers, the rank), to every subscriber at once; an engine without KV
events answers FAILED_PRECONDITION naming --kv-events-config, a resume
cursor OUT_OF_RANGE; a cancelled call frees its subscription; a subscriber
that falls behind is dropped. Then the wire mapping's rules (api/kv_events.py)
on hand-made domain events."""

from __future__ import annotations

import asyncio
import collections.abc
import time

import grpc
import pytest
from smg_grpc_proto.generated import common_pb2
from smg_grpc_proto.generated import vllm_engine_pb2 as pb
from smg_grpc_proto.generated import vllm_engine_pb2_grpc as pb_grpc

from tests.rpc import error_info
from tests.servers import fake_serving
from tokenwire.server.api.kv_events import KvWire
from tokenwire.server.core.errors import ResourceExhausted
from tokenwire.server.core.kv_events import (
    AllBlocksCleared,
    BlocksRemoved,
    BlocksStored,
    KvEventBatch,
    fold_hash,
)
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.kv_events import FakeKvEvents

BLOCK = 16


def ids(text: str) -> list[int]:
    return [b + 3 for b in text.encode()]


def generate(stub: pb_grpc.VllmEngineStub, prompt: list[int]) -> None:
    list(stub.Generate(pb.GenerateRequest(tokenized=pb.TokenizedInput(input_ids=prompt),
                                          sampling_params=pb.SamplingParams(max_tokens=2),
                                          stream=False), timeout=10))


pytestmark = pytest.mark.transports  # on grpc.aio and pygrpc-native (tests/conftest.py)


@pytest.fixture(scope="module")
def served(transport: str) -> collections.abc.Iterator[
        tuple[FakeEngine, pb_grpc.VllmEngineStub, pb_grpc.VllmEngineStub]]:
    """A fake engine publishing KV events, and one without them."""
    on, off = FakeEngine(max_model_len=512, block_size=BLOCK), FakeEngine(max_model_len=512)
    on.kv.enabled = True
    with fake_serving(on, served_model_name="fake-model", grpc_transport=transport) as s_on, \
            fake_serving(off, served_model_name="fake-model", grpc_transport=transport) as s_off, \
            grpc.insecure_channel(s_on.address) as ch_on, \
            grpc.insecure_channel(s_off.address) as ch_off:
        yield on, pb_grpc.VllmEngineStub(ch_on), pb_grpc.VllmEngineStub(ch_off)


def _subscribe(stub: pb_grpc.VllmEngineStub, start: int = 0):
    call = stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(
        start_sequence_number=start), timeout=20)
    call.initial_metadata()  # the subscription is in place
    return call


def _wait(predicate, timeout: float = 5) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline
        time.sleep(0.02)


def test_a_prompts_blocks_arrive_chained_to_every_subscriber(served) -> None:
    engine, stub, _ = served
    first_sub, second_sub = _subscribe(stub), _subscribe(stub)
    try:
        _wait(lambda: engine.kv.subscribers == 2)
        prompt = ids("a prompt of several blocks, " * 3)  # 84 ids: 5 whole blocks
        generate(stub, prompt)
        one, also = next(first_sub), next(second_sub)
        assert one == also  # every subscriber gets every batch
        assert one.dp_rank == 0 and one.timestamp > 0 and len(one.events) == 1
        stored = one.events[0].stored
        assert one.events[0].event_id == 1
        assert not stored.HasField("parent_block_hash")  # the prompt's start
        assert stored.tier == common_pb2.KV_CACHE_TIER_DEVICE and stored.medium == "GPU"
        assert stored.locality == common_pb2.KV_CACHE_LOCALITY_LOCAL
        whole = len(prompt) // BLOCK * BLOCK
        assert [list(b.token_ids) for b in stored.blocks] == [
            prompt[i:i + BLOCK] for i in range(0, whole, BLOCK)]
        assert all(b.block_size == BLOCK for b in stored.blocks)
        hashes = [b.block_hash for b in stored.blocks]
        assert len(set(hashes)) == len(hashes)

        # The same prefix and two more blocks: only those, hung off its last block.
        longer = prompt[:whole] + list(range(40, 40 + 2 * BLOCK))
        generate(stub, longer)
        two = next(first_sub)
        assert two.sequence_number == one.sequence_number + 1  # consecutive
        assert two.events[0].event_id == 2
        more = two.events[0].stored
        assert more.parent_block_hash == hashes[-1]
        assert [list(b.token_ids) for b in more.blocks] == [
            longer[whole:whole + BLOCK], longer[whole + BLOCK:]]
        assert next(second_sub) == two

        generate(stub, prompt)  # all cached: nothing stored, no batch
        generate(stub, ids("another prompt entirely, two blocks"))
        three = next(first_sub)
        assert three.sequence_number == two.sequence_number + 1
        assert not three.events[0].stored.HasField("parent_block_hash")
    finally:
        first_sub.cancel()
        second_sub.cancel()
    _wait(lambda: engine.kv.subscribers == 0)  # a cancelled call frees its subscription


def test_without_kv_events_the_call_names_the_flag(served) -> None:
    with pytest.raises(grpc.RpcError) as exc:
        next(served[2].SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=5))
    assert exc.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "--kv-events-config" in exc.value.details()
    assert error_info(exc.value).reason == "KV_EVENTS_DISABLED"


def test_a_resume_cursor_is_out_of_range(served) -> None:
    with pytest.raises(grpc.RpcError) as exc:
        next(served[1].SubscribeKvEvents(
            common_pb2.SubscribeKvEventsRequest(start_sequence_number=7), timeout=5))
    assert exc.value.code() == grpc.StatusCode.OUT_OF_RANGE
    assert error_info(exc.value).reason == "KV_EVENTS_NO_REPLAY"


def test_a_cancelled_call_frees_its_subscription(served) -> None:
    engine, stub, _ = served
    call = _subscribe(stub)
    _wait(lambda: engine.kv.subscribers == 1)
    call.cancel()
    _wait(lambda: engine.kv.subscribers == 0)


def test_a_shutdown_ends_the_subscriptions_at_once() -> None:
    """Not after the shutdown's grace: a subscription is no call to finish."""
    engine = FakeEngine(max_model_len=512)
    engine.kv.enabled = True
    with fake_serving(engine, grace_seconds=30) as server, \
            grpc.insecure_channel(server.address) as ch:
        call = _subscribe(pb_grpc.VllmEngineStub(ch))
        started = time.monotonic()
        server.call(server._running.stop(30))  # type: ignore[attr-defined]
        assert time.monotonic() - started < 5
        with pytest.raises(grpc.RpcError) as exc:
            next(call)
        assert exc.value.code() == grpc.StatusCode.UNAVAILABLE
        assert engine.kv.subscribers == 0


def test_a_subscriber_that_falls_behind_is_dropped() -> None:
    async def run() -> None:
        hub = FakeKvEvents(backlog=2)
        hub.enabled = True
        slow, fast = hub.subscribe(), hub.subscribe()
        hub.publish(())
        assert (await anext(slow)).sequence == 0 and (await anext(fast)).sequence == 0
        for _ in range(3):  # `slow` takes none of them: over its backlog of 2
            hub.publish(())
            assert (await anext(fast)).sequence == hub.sequence
        with pytest.raises(ResourceExhausted) as exc:
            await anext(slow)
        assert exc.value.reason == "KV_EVENTS_SUBSCRIBER_BEHIND"
        assert hub.subscribers == 1  # memory freed at once, the other one goes on
        await fast.aclose()  # type: ignore[attr-defined]
        assert hub.subscribers == 0

    asyncio.run(run())


def test_the_wire_keeps_what_smgs_relay_keeps() -> None:
    wire = KvWire()
    stored = BlocksStored(block_hashes=(1, 2), token_ids=(5, 6, 7, 8), block_size=2,
                          parent_block_hash=-3, lora_id=4, lora_name="ad", medium="cpu",
                          extra_keys=(("ad", "salt", ("img", 1), b"d", 9), None),
                          group_idx=0, kv_cache_spec_kind="full_attention", session_id="s")
    batch = wire.batch(KvEventBatch(9, 1.5, (
        stored,
        BlocksStored(block_hashes=(1,), token_ids=(5, 6, 7), block_size=2),  # unaligned
        BlocksStored(block_hashes=(3,), token_ids=(1, 2), block_size=2, locality="REMOTE"),
        BlocksStored(block_hashes=(3,), token_ids=(1, 2), block_size=2, medium="TAPE"),
        BlocksStored(block_hashes=(3,), token_ids=(1, 2), block_size=2, group_idx=1,
                     kv_cache_spec_kind="sliding_window"),
        BlocksRemoved(block_hashes=(3,), group_idx=1),  # the sliding-window group's
        BlocksRemoved(block_hashes=(1, 2), medium="CPU"),
        AllBlocksCleared(),
    ), dp_rank=1))
    assert (batch.sequence_number, batch.timestamp, batch.dp_rank) == (9, 1.5, 1)
    assert [e.event_id for e in batch.events] == [1, 7, 8]  # ids count what was left out
    out = batch.events[0].stored
    assert out.tier == common_pb2.KV_CACHE_TIER_HOST and out.medium == "cpu"
    assert (out.parent_block_hash, out.lora_name, out.cache_salt, out.session_id) == (
        -3, "ad", "salt", "s")
    assert [list(b.token_ids) for b in out.blocks] == [[5, 6], [7, 8]]
    first = out.blocks[0]
    assert (first.lora_id, first.cache_level, first.block_size) == (4, 1, 2)
    assert [k.WhichOneof("key") for k in first.extra_keys] == [
        "text", "text", "multimodal", "blob", "number"]
    assert first.extra_keys[2].multimodal.identifier == "img"
    assert not out.blocks[1].extra_keys
    removed = batch.events[1].removed
    assert list(removed.block_hashes) == [1, 2] and removed.cache_level == 1
    assert batch.events[2].HasField("cleared")
    assert wire.dropped == 5


def test_hashes_fold_to_signed_64_bits() -> None:
    assert fold_hash(5) == 5
    assert fold_hash((1 << 64) - 1) == -1
    assert fold_hash((1 << 70) + 3) == 3
    assert fold_hash(b"\x00" * 24 + b"\xff" * 8) == -1


def test_vllms_publisher_read_back_per_rank() -> None:
    """engine/vllm/kv_events.py against vLLM's own ZmqEventPublisher (no
    engine): two data-parallel ranks on the base port and the next, each
    batch decoded into domain events under its rank and sequence; a gap in a
    rank's sequence ends the subscription; the flag's forms that publish
    nothing here are FAILED_PRECONDITION."""
    import itertools
    import types

    from vllm.config.kv_events import KVEventsConfig
    from vllm.distributed.kv_events import (
        AllBlocksCleared as VllmCleared,
    )
    from vllm.distributed.kv_events import (
        BlockRemoved,
        BlockStored,
        KVEventBatch,
        ZmqEventPublisher,
    )

    from tests.servers import free_port
    from tokenwire.server.core.errors import FailedPrecondition
    from tokenwire.server.engine.vllm import kv_events as vllm_kv

    port = free_port()
    config = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq",
                            endpoint=f"tcp://*:{port}", topic="kv")
    endpoints = vllm_kv.sources(config, types.SimpleNamespace(data_parallel_size=2))
    assert endpoints == [(0, f"tcp://127.0.0.1:{port}"), (1, f"tcp://127.0.0.1:{port + 1}")]
    for off in (None, KVEventsConfig(), KVEventsConfig(enable_kv_cache_events=True,
                                                       endpoint="tcp://10.0.0.1:5557")):
        with pytest.raises(FailedPrecondition) as exc:
            vllm_kv.sources(off, types.SimpleNamespace())
        assert exc.value.reason == "KV_EVENTS_DISABLED"

    publishers = [ZmqEventPublisher(data_parallel_rank=r, endpoint=config.endpoint, topic="kv")
                  for r in (0, 1)]
    stored = BlockStored(block_hashes=[(1 << 64) - 1, 7], parent_block_hash=None,
                         token_ids=[1, 2, 3, 4], block_size=2, lora_id=None, medium="GPU",
                         lora_name=None, extra_keys=[("salt",), None])

    async def run() -> None:
        batches = vllm_kv.subscribe(endpoints, "kv")
        first = asyncio.ensure_future(anext(batches))
        await asyncio.sleep(0.5)  # the subscription reaches the publishers (ZMQ's slow joiner)
        publishers[0].publish(KVEventBatch(ts=1.0, events=[stored]))
        one = await asyncio.wait_for(first, 10)
        assert (one.sequence, one.timestamp, one.dp_rank) == (0, 1.0, 0)
        assert one.events == (BlocksStored(
            block_hashes=(-1, 7), token_ids=(1, 2, 3, 4), block_size=2, medium="GPU",
            extra_keys=(("salt",), None)),)
        publishers[1].publish(KVEventBatch(ts=2.0, events=[
            BlockRemoved(block_hashes=[7], medium="GPU"), VllmCleared()]))
        two = await asyncio.wait_for(anext(batches), 10)
        assert (two.sequence, two.dp_rank) == (0, 1)  # rank 1's own numbering
        assert two.events == (BlocksRemoved(block_hashes=(7,), medium="GPU"),
                              AllBlocksCleared())
        publishers[0]._seq_gen = itertools.count(5)  # batches 1-4 of rank 0 never came
        publishers[0].publish(KVEventBatch(ts=3.0, events=[]))
        with pytest.raises(ResourceExhausted):
            await asyncio.wait_for(anext(batches), 10)

    try:
        asyncio.run(run())
    finally:
        for publisher in publishers:
            publisher.shutdown()
