"""vLLM's `--kv-events-config` through `tokenwire serve` (issue #44): the
engine core publishes its KV-cache events on ZMQ, as under `vllm serve`, for
a router's exact prefix index (llm-d's precise prefix-cache scorer, smg).
The session's router_server (tests/conftest.py, the tiny random model), one
SUB socket on its endpoint:
a chat request's prompt ids come back as BlockStored events (whole blocks of
--block-size, prefix caching being vLLM's default), and a Generate request
that extends that prompt stores only its new blocks, chained by
parent_block_hash to the chat's last block. Payloads are decoded with
vLLM's own msgspec types (docs/engine.md, "KV-cache events"). The same
blocks reach a gRPC subscriber of tokenwire's own VllmEngine
SubscribeKvEvents (what smg's router subscribes to), in the same order."""

from __future__ import annotations

import threading
import time

import grpc
import msgspec
import zmq
from smg_grpc_proto.generated import common_pb2, vllm_engine_pb2_grpc
from vllm.distributed.kv_events import BlockStored, KVEventBatch

from tests.conftest import KV_TOPIC as TOPIC
from tests.conftest import ROUTER_BLOCK as BLOCK
from tests.conftest import RouterServer
from tests.rpc import chat_request
from tokenwire.v1 import generate_pb2, service_pb2_grpc

SALT = "kv-events-test"


def _stored(sub: zmq.Socket, decoder: msgspec.msgpack.Decoder, tokens: int,
            timeout: float = 30) -> list[BlockStored]:
    """BlockStored events off `sub` until they carry `tokens` token ids."""
    events: list[BlockStored] = []
    deadline = time.monotonic() + timeout
    while sum(len(e.token_ids) for e in events) < tokens:
        assert time.monotonic() < deadline, f"stored so far: {events}"
        if not sub.poll(500):
            continue
        topic, seq, payload = sub.recv_multipart()
        assert topic == TOPIC.encode() and len(seq) == 8
        batch = decoder.decode(payload)
        events += [e for e in batch.events if isinstance(e, BlockStored)]
    return events


class GrpcEvents:
    """tokenwire's SubscribeKvEvents, read on a thread: the stored blocks' ids."""

    def __init__(self, address: str):
        self.channel = grpc.insecure_channel(address)
        stub = vllm_engine_pb2_grpc.VllmEngineStub(self.channel)
        self.call = stub.SubscribeKvEvents(common_pb2.SubscribeKvEventsRequest(), timeout=300)
        self.tokens: list[int] = []
        self.error: grpc.RpcError | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            for batch in self.call:
                for event in batch.events:
                    if event.HasField("stored"):
                        for block in event.stored.blocks:
                            assert block.block_size == BLOCK
                            self.tokens += block.token_ids
        except grpc.RpcError as exc:
            self.error = exc

    def wait(self, count: int, timeout: float = 30) -> list[int]:
        deadline = time.monotonic() + timeout
        while len(self.tokens) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return self.tokens

    def close(self) -> None:
        self.call.cancel()
        self.thread.join(5)
        self.channel.close()


def test_kv_cache_events_reach_a_zmq_subscriber(router_server: RouterServer) -> None:
    server, port = router_server.server, router_server.kv_port
    sub = zmq.Context.instance().socket(zmq.SUB)
    relayed = GrpcEvents(server.address)
    try:
        sub.setsockopt(zmq.SUBSCRIBE, TOPIC.encode())
        sub.connect(f"tcp://127.0.0.1:{port}")
        time.sleep(0.5)  # the subscription reaches the publisher (ZMQ's slow joiner)
        decoder = msgspec.msgpack.Decoder(type=KVEventBatch)
        words = " ".join(f"word{i}" for i in range(80))  # 260 prompt ids: 8 whole blocks
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            # (salted: the session's server may hold other tests' prefixes)
            chat = stub.CreateChatCompletion(chat_request(
                messages=[{"role": "user", "content": words}], max_tokens=2,
                ignore_eos=True, return_token_ids=True, cache_salt=SALT), timeout=120)
            prompt = list(chat.prompt_token_ids)
            whole = len(prompt) // BLOCK * BLOCK
            assert whole >= 4 * BLOCK
            first = _stored(sub, decoder, whole)
            # The prompt's whole blocks, in order, one hash per block.
            assert [t for e in first for t in e.token_ids][:whole] == prompt[:whole]
            for e in first:
                assert e.block_size == BLOCK
                assert len(e.block_hashes) * BLOCK == len(e.token_ids)
                assert e.lora_name is None
            assert first[0].parent_block_hash is None
            hashes = [h for e in first for h in e.block_hashes]

            # The same prefix and 3 more blocks by Generate: only the new
            # blocks are stored, their chain hanging off the chat's blocks.
            longer = prompt[:whole] + [100 + i for i in range(3 * BLOCK)]
            gen = stub.Generate(generate_pb2.GenerateRequest(
                token_ids=longer, return_token_ids=True, cache_salt=SALT,
                sampling_params={"max_tokens": 1}), timeout=120)
            assert list(gen.prompt_token_ids) == longer
            second = _stored(sub, decoder, 3 * BLOCK)
            assert second[0].parent_block_hash == hashes[whole // BLOCK - 1]
            assert [t for e in second for t in e.token_ids][:3 * BLOCK] == longer[whole:]
            assert all(e.block_size == BLOCK for e in second)
            # tokenwire's SubscribeKvEvents relayed the same blocks, in order.
            got = relayed.wait(whole + 3 * BLOCK)
            assert relayed.error is None, relayed.error
            assert got[:whole + 3 * BLOCK] == prompt[:whole] + longer[whole:]
        assert server.proc is not None and server.proc.poll() is None, server.log_tail()
    finally:
        relayed.close()
        sub.close(linger=0)
