"""A Conversation through a fleet gateway survives the loss of the replica
holding its session (issue #15 item 3): the next turn is sent again with the
full token ids on a fresh session, which lands on a live replica, and the
ids go on exactly."""

from __future__ import annotations

import time

import grpc
import pytest

from tests.gateway.envoy_fixture import start_gateway, stop_gateway
from tests.servers import ThreadServer
from tokenwire.client import Client, Conversation
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import models_pb2, service_pb2_grpc


def sessions(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        stub = service_pb2_grpc.TokenwireServiceStub(channel)
        return stub.GetStats(models_pb2.GetStatsRequest(), timeout=5).sessions


@pytest.mark.parametrize("mode", ["session"])
def test_conversation_goes_on_when_its_replica_dies(mode) -> None:
    servers = [ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                           served_model_name="fake-model", worker_id=f"r{i}"),
                            FakeEngine(max_model_len=512)).start() for i in range(2)]
    envoy = start_gateway("127.0.0.1:1", upstreams=tuple(s.address for s in servers),
                          health_check_interval_s=0.5)
    try:
        time.sleep(1.5)  # first health checks
        with Client(envoy.address, timeout=30) as client:
            conv = Conversation(client, mode=mode, max_tokens=6, temperature=0)
            first = conv.send("Hi")
            holder = next(s for s in servers if sessions(s.address) == 1)
            holder.stop()  # the replica with the session (and its continuations) is gone
            second = conv.send("Again")
            third = conv.send("And again")
            conv.close()
        history = first.prompt_ids + first.completion_ids
        assert second.prompt_ids[: len(history)] == history
        assert second.suffix_ids and second.prompt_ids == history + second.suffix_ids
        assert third.prompt_ids[: len(second.prompt_ids)] == second.prompt_ids
    finally:
        stop_gateway(envoy)
        for s in servers:
            s.stop()


async def test_async_conversation_goes_on_when_its_replica_dies() -> None:
    import asyncio

    from tokenwire.client import AsyncClient, AsyncConversation

    servers = [ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                           served_model_name="fake-model", worker_id=f"a{i}"),
                            FakeEngine(max_model_len=512)).start() for i in range(2)]
    envoy = start_gateway("127.0.0.1:1", upstreams=tuple(s.address for s in servers),
                          health_check_interval_s=0.5)
    try:
        await asyncio.sleep(1.5)
        async with AsyncClient(envoy.address, timeout=30) as client:
            conv = AsyncConversation(client, max_tokens=6, temperature=0)
            first = await conv.send("Hi")
            holder = next(s for s in servers if sessions(s.address) == 1)
            await asyncio.to_thread(holder.stop)
            second = await conv.send("Again")
            await conv.close()
        history = first.prompt_ids + first.completion_ids
        assert second.prompt_ids == history + second.suffix_ids and second.suffix_ids
    finally:
        stop_gateway(envoy)
        for s in servers:
            s.stop()
