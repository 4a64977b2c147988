"""smg's router (PyPI `smg`, the Rust gateway) in front of tokenwire
replicas on the fake engine, speaking vLLM's gRPC engine service to them as
to `vllm serve --grpc`: the official openai SDK through smg's OpenAI front
(chat, streaming, completions), cache-aware routing that sends a
conversation's next turn where its prefix is cached, a paused replica (a
weight update) left out, and a killed one routed around. The replicas
publish their KV-cache events (the fake engine's, as under vLLM's
--kv-events-config): the router subscribes through SubscribeKvEvents and
learns the block size from them. The router tokenizes with a Hugging Face
tokenizer that tokenizes as the fake engine does (tests/fake_tokenizer.py)."""

from __future__ import annotations

import collections.abc
import contextlib
import re
import time

import grpc
import openai
import pytest

from tests import fake_tokenizer
from tests.servers import ThreadServer, fake_serving
from tests.smg_router import Router
from tokenwire.server.engine.fake.engine import REPLIES, FakeEngine
from tokenwire.v1 import control_pb2, control_pb2_grpc

MODEL = "fake-model"
LOG_LEVEL = "info"  # the KV-event subscription is logged at info


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> collections.abc.Iterator[
        tuple[list[FakeEngine], list[ThreadServer], Router]]:
    tmp = tmp_path_factory.mktemp("smg")
    tokenizer = fake_tokenizer.build(tmp / "tokenizer")
    engines = [FakeEngine(max_model_len=512, block_size=16) for _ in range(2)]
    for e in engines:
        e.tokenizer_path = str(tokenizer)
        e.kv.enabled = True  # KV-cache events, as under --kv-events-config
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(fake_serving(
            e, served_model_name=MODEL, enable_control=True, unhealthy_while_paused=True))
            for e in engines]
        router = Router([s.address for s in servers], tokenizer, tmp / "smg.log", model=MODEL,
                        log_level=LOG_LEVEL)
        try:
            router.wait_ready()
            yield engines, servers, router
        finally:
            router.stop()


@pytest.fixture(scope="module")
def client(fleet) -> openai.OpenAI:
    return openai.OpenAI(base_url=fleet[2].url + "/v1", api_key="none", max_retries=0)


def _served(engines: list[FakeEngine]) -> list[int]:
    return [len(e.requests) for e in engines]


def test_chat_unary_and_streamed_through_smg(client) -> None:
    resp = client.chat.completions.create(model=MODEL, max_tokens=12, messages=[
        {"role": "user", "content": "hi"}])
    assert resp.choices[0].message.content == REPLIES[0][:12]
    assert (resp.usage.completion_tokens, resp.choices[0].finish_reason) == (12, "length")
    stream = client.chat.completions.create(
        model=MODEL, max_tokens=40, stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "hi"}])
    text, usage, finish = "", None, None
    for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
        usage = chunk.usage or usage
    assert (text, finish) == (REPLIES[0], "stop")  # every id once: nothing repeated
    assert usage.completion_tokens == len(REPLIES[0].encode()) + 1  # (and the EOS)


def test_completions_through_smg(client) -> None:
    resp = client.completions.create(model=MODEL, prompt="hello", max_tokens=5)
    assert resp.choices[0].text == REPLIES[0][:5]
    assert resp.usage.prompt_tokens == len(b"hello")


def test_a_conversations_next_turn_lands_where_its_prefix_is_cached(fleet, client) -> None:
    engines = fleet[0]
    for n in range(6):
        history = [{"role": "system", "content": f"conversation {n}: " + "context " * 12},
                   {"role": "user", "content": f"question {n}"}]
        first = client.chat.completions.create(model=MODEL, max_tokens=6, messages=history)
        history += [{"role": "assistant", "content": first.choices[0].message.content},
                    {"role": "user", "content": "and then?"}]
        second = client.chat.completions.create(model=MODEL, max_tokens=6, messages=history)
        cached = second.usage.prompt_tokens_details.cached_tokens
        assert cached >= first.usage.prompt_tokens // 16 * 16 - 16, (n, cached)
    assert all(len(e.requests) for e in engines), "both replicas served"


def test_the_router_subscribes_to_every_replicas_kv_events(fleet, client) -> None:
    engines, servers, router = fleet
    client.chat.completions.create(model=MODEL, max_tokens=2, messages=[
        {"role": "user", "content": "blocks to store " + "z " * 20}])
    deadline = time.monotonic() + 10
    while "Learned block_size" not in (log := _log(router)):
        assert time.monotonic() < deadline, log[-3000:]
        time.sleep(0.2)
    assert "does not implement SubscribeKvEvents" not in log
    for server in servers:
        assert f"KV event stream connected worker_url=grpc://{server.address}" in log
    assert "block_size=16" in log.split("Learned block_size", 1)[1].split("\n", 1)[0]
    assert all(e.kv.subscribers >= 1 for e in engines)


def _log(router: Router) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", router.log.read_text(errors="replace"))


def test_a_paused_replica_is_left_out(fleet, client) -> None:
    engines, servers, _ = fleet
    with grpc.insecure_channel(servers[0].address) as ch:
        control = control_pb2_grpc.ControlServiceStub(ch)
        control.Pause(control_pb2.PauseRequest(mode="keep"), timeout=10)
        try:
            time.sleep(3)  # the router's next health checks (every second)
            before = _served(engines)
            for n in range(6):
                resp = client.chat.completions.create(model=MODEL, max_tokens=4, messages=[
                    {"role": "user", "content": f"during the update {n} " + "x " * n}])
                assert resp.choices[0].message.content == REPLIES[0][:4]
            after = _served(engines)
            assert after[0] == before[0] and after[1] == before[1] + 6
        finally:
            control.Resume(control_pb2.ResumeRequest(), timeout=10)


def test_a_killed_replica_is_routed_around(fleet, client) -> None:
    engines, servers, _ = fleet
    servers[1].stop()
    # Until the router's health check (every second) finds it gone: the KV
    # events it had stored still draw requests to it (the stopped replica's
    # subscription ends with the server, which the router does not take for
    # the worker's death).
    time.sleep(2.5)
    before = _served(engines)
    for n in range(6):
        resp = client.chat.completions.create(model=MODEL, max_tokens=4, messages=[
            {"role": "user", "content": f"after the kill {n} " + "y " * n}])
        assert resp.choices[0].message.content == REPLIES[0][:4]
    assert _served(engines)[0] == before[0] + 6
