"""Turn-template rendering off the event loop (issue #32 item 9): a Session
continuation's next messages and a speculative prefill's template probe
render where a request's own rendering runs (inference/offload.py: the
prompt thread for large tools), under the same queue limit, instead of on
the event loop with no limit."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import grpc
import pytest

from tests.rpc import chat_request
from tests.servers import fake_serving
from tests.session_rpc import RawSession, start_chat
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.inference.offload import OFFLOAD_CHARS
from tokenwire.server.inference.turns import PLACEHOLDER
from tokenwire.v1 import models_pb2, service_pb2_grpc

WINDOW = 100_000
HINT = {"agent_hints": {"speculative_prefill": True}}
SMALL_TOOL = {"type": "function", "function": {"name": "get_weather"}}


def big_tools(name: str) -> list[dict]:
    """Legal tools over the off-loop threshold (the fake renders their names)."""
    return [{"type": "function", "function": {"name": f"{name}{i}", "description": "d" * 1000}}
            for i in range(OFFLOAD_CHARS // 1000 + 1)]


class ThreadEngine(FakeEngine):
    """Records the thread of every rendering (and whether it probed a turn
    template); a message "BLOCK" holds its rendering until `gate` opens."""

    def __init__(self) -> None:
        super().__init__(max_model_len=WINDOW)
        self.renders: list[tuple[str, bool]] = []
        self.gate = threading.Event()
        self.blocked = threading.Event()

    def render_chat(self, messages, options):
        probe = messages[: len(PLACEHOLDER)] == PLACEHOLDER
        self.renders.append((threading.current_thread().name, probe))
        if any(m.get("content") == "BLOCK" for m in messages):
            self.blocked.set()
            self.gate.wait(30)
        return super().render_chat(messages, options)

    def probes_since(self, since: int) -> list[str]:
        return [thread for thread, probe in self.renders[since:] if probe]


@pytest.fixture(scope="module")
def server():
    engine = ThreadEngine()
    # tools need a tool-call parser (as in vLLM: --enable-auto-tool-choice)
    with fake_serving(engine, max_model_len=WINDOW, max_offload_queue=1,
                      tool_call_parser="hermes", enable_auto_tool_choice=True) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch), engine


def _idle(stub) -> None:
    """Until no engine request or background prefill runs."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        stats = stub.GetStats(models_pb2.GetStatsRequest(), timeout=5)
        if stats.engine_requests == 0 and stats.speculative_prefills == 0:
            return
        time.sleep(0.02)
    raise AssertionError("the server did not go idle")


def _prefills(engine: ThreadEngine, since: int) -> list:
    return [r for r in engine.requests[since:] if r.request_id.startswith("prefill-")]


def test_a_continuation_with_large_tools_renders_off_the_event_loop(server) -> None:
    stub, engine = server
    s = RawSession(stub)
    s.send(start_chat("first", max_tokens=2))
    assert s.until_terminal("first")[-1].WhichOneof("event") == "done"
    since = len(engine.renders)
    s.send(start_chat("next", max_tokens=2, tools=big_tools("cont"), continuation={
        "previous_request_id": "first", "messages": [{"role": "user", "content": "more"}]}))
    last = s.until_terminal("next")[-1]
    s.close()
    assert last.WhichOneof("event") == "done", last
    assert last.done.suffix_token_ids
    probes = engine.probes_since(since)
    assert probes and all(t.startswith("tokenwire-prompts") for t in probes), probes


def test_a_prefill_with_large_tools_probes_off_the_event_loop(server) -> None:
    stub, engine = server
    since, requests = len(engine.renders), len(engine.requests)
    resp = stub.CreateChatCompletion(chat_request(
        tools=big_tools("pre"), nvext=HINT, return_token_ids=True), timeout=10)
    _idle(stub)
    [prefill] = _prefills(engine, requests)
    assert prefill.prompt_token_ids[:len(resp.prompt_token_ids)] == list(resp.prompt_token_ids)
    probes = engine.probes_since(since)
    assert probes and all(t.startswith("tokenwire-prompts") for t in probes), probes


@pytest.fixture
def busy_worker(server):
    """The prompt thread held by a large request (the queue limit is 1)."""
    stub, engine = server
    engine.gate.clear()
    engine.blocked.clear()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        held = pool.submit(stub.CreateChatCompletion, chat_request(
            messages=[{"role": "user", "content": "BLOCK"}], tools=big_tools("busy"),
            max_tokens=2), timeout=30)
        assert engine.blocked.wait(10)
        try:
            yield
        finally:
            engine.gate.set()
        assert held.result(30).choices


def test_a_continuation_meets_the_offload_queue_limit(server, busy_worker) -> None:
    stub, _ = server
    s = RawSession(stub)
    s.send(start_chat("first", max_tokens=2))
    assert s.until_terminal("first")[-1].WhichOneof("event") == "done"
    # Large next messages (the request itself is small: it plans inline).
    more = "m" * (OFFLOAD_CHARS + 1)
    s.send(start_chat("next", max_tokens=2, continuation={
        "previous_request_id": "first", "messages": [{"role": "user", "content": more}]}))
    last = s.until_terminal("next")[-1]
    s.close()
    assert last.WhichOneof("event") == "error", last
    assert (last.error.code, last.error.reason) == (
        grpc.StatusCode.RESOURCE_EXHAUSTED.value[0], "OFFLOAD_QUEUE_FULL")


def test_a_prefill_meets_the_offload_queue_limit(server, busy_worker) -> None:
    stub, engine = server
    requests = len(engine.requests)
    # A small request plans inline; its prefill's probe (tools) waits for the
    # prompt thread, whose queue is full: the advisory prefill is skipped.
    resp = stub.CreateChatCompletion(chat_request(tools=[SMALL_TOOL], nvext=HINT), timeout=10)
    assert resp.choices
    _idle(stub)
    assert _prefills(engine, requests) == []


def test_a_continuation_with_its_own_template_renders_on_the_template_thread() -> None:
    engine = ThreadEngine()
    with fake_serving(engine, max_model_len=WINDOW, trust_request_chat_template=True) as srv, \
            grpc.insecure_channel(srv.address) as ch:
        s = RawSession(service_pb2_grpc.TokenwireServiceStub(ch))
        s.send(start_chat("first", max_tokens=2))
        assert s.until_terminal("first")[-1].WhichOneof("event") == "done"
        since = len(engine.renders)
        s.send(start_chat("next", max_tokens=2, chat_template="{{ messages }}", continuation={
            "previous_request_id": "first", "messages": [{"role": "user", "content": "more"}]}))
        last = s.until_terminal("next")[-1]
        s.close()
    assert last.WhichOneof("event") == "done", last
    probes = engine.probes_since(since)
    assert probes and all(t.startswith("tokenwire-templates") for t in probes), probes
