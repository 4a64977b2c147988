"""Cheap limits before expensive work (issue #11 item 2): a prompt too long
by its length alone is refused before any rendering or tokenizing; id lists
are measured before they are walked; Tokenize/Detokenize are capped; a
request's own (trusted) template renders off the event loop under a time
bound while other calls go on."""

from __future__ import annotations

import concurrent.futures
import threading
import time

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, error_info
from tests.servers import fake_serving
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.v1 import generate_pb2, service_pb2_grpc, tokenize_pb2

HUGE = "x" * 3_000_000


class CountingEngine(FakeEngine):
    """Counts tokenizer work; renders a request template named SLOW slowly."""

    def __init__(self) -> None:
        super().__init__(max_model_len=512)
        self.rendered = 0
        self.encoded = 0
        self.slow_started = threading.Event()
        self.slow_done = threading.Event()
        self.threads: list[str] = []  # the thread of each rendering

    def render_chat(self, messages, options):
        self.rendered += 1
        self.threads.append(threading.current_thread().name)
        messages = messages * int(options.template_kwargs.get("repeat", 1))  # an expanding template
        if options.chat_template == "SLOW":
            self.slow_started.set()
            time.sleep(3)  # a template that runs long (on its worker thread)
            self.slow_done.set()
        return super().render_chat(messages, options)

    def encode(self, text, add_special_tokens):
        self.encoded += 1
        return super().encode(text, add_special_tokens)


@pytest.fixture(scope="module")
def server():
    engine = CountingEngine()
    with fake_serving(engine, trust_request_chat_template=True,
                      request_template_timeout_seconds=0.5) as srv:
        yield srv, engine


@pytest.fixture
def stub(server):
    with grpc.insecure_channel(server[0].address, options=[
            ("grpc.max_send_message_length", 64 << 20)]) as ch:
        yield service_pb2_grpc.TokenwireServiceStub(ch)


def _refused(call, *args):
    with pytest.raises(grpc.RpcError) as info:
        call(*args, timeout=30)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value.details()
    return error_info(info.value)


def test_a_huge_prompt_is_refused_before_any_tokenizer_work(server, stub) -> None:
    engine = server[1]
    before = (engine.rendered, engine.encoded)
    info = _refused(stub.CreateChatCompletion,
                    chat_request(messages=[{"role": "user", "content": HUGE}]))
    assert (info.reason, info.metadata["param"]) == ("PROMPT_TOO_LONG", "messages")
    info = _refused(stub.Tokenize, tokenize_pb2.TokenizeRequest(prompt=HUGE))
    assert (info.reason, info.metadata["param"]) == ("PROMPT_TOO_LONG", "prompt")
    assert (engine.rendered, engine.encoded) == before, "nothing was rendered or tokenized"


def test_id_lists_are_measured_before_they_are_walked(stub) -> None:
    ids = [5] * 600 + [10**6]  # too long, and the last id is not in the vocabulary
    info = _refused(stub.CreateChatCompletion, chat_request(nvext={"token_data": ids}))
    assert info.reason == "PROMPT_TOO_LONG"
    info = _refused(stub.Generate,
                    json_format.ParseDict({"token_ids": ids}, generate_pb2.GenerateRequest()))
    assert info.reason == "PROMPT_TOO_LONG"
    info = _refused(stub.Detokenize, tokenize_pb2.DetokenizeRequest(tokens=ids))
    assert (info.reason, info.metadata["param"]) == ("TOO_MANY_ITEMS", "tokens")


def test_a_slow_request_template_times_out_while_other_calls_go_on(server, stub) -> None:
    engine = server[1]
    slow = chat_request(chat_template="SLOW", max_tokens=2)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(_refused, stub.CreateChatCompletion, slow)
        assert engine.slow_started.wait(10)
        # The template is still rendering, and the server answers others.
        ok = stub.CreateChatCompletion(chat_request(max_tokens=2), timeout=10)
        assert ok.choices[0].finish_reason == "length" and not engine.slow_done.is_set()
        info = pending.result(30)
    assert (info.reason, info.metadata["param"]) == ("TEMPLATE_TIMEOUT", "chat_template")
    engine.slow_done.wait(10)


# -- every rendered field counts (issue #23 item 5) -------------------------

BIG = 3_000_000  # characters: far beyond the fixture's window (512 tokens)
TOOL = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}}}}


def _big_tools() -> list[dict]:
    schema = {"type": "object",
              "properties": {"city": {"type": "string", "description": "x" * BIG}}}
    return [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]


@pytest.mark.parametrize(("fields", "param"), [
    ({"tools": _big_tools()}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "description": "d" * BIG}}]},
     "tools"),
    ({"chat_template_kwargs": {"notes": "n" * BIG}}, "chat_template_kwargs"),
    ({"messages": [{"role": "user", "content": "hi"}, {
        "role": "assistant", "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {
            "name": "get_weather",
            "arguments": "{\"city\": \"" + "p" * BIG + "\"}"}}]}]}, "messages"),
    ({"messages": [{"role": "assistant", "content": "ok", "reasoning_content": "r" * BIG}]},
     "messages"),
    ({"messages": [{"role": "user", "content": "hi", "name": "n" * BIG}]}, "messages"),
])
def test_every_rendered_field_counts_before_rendering(server, stub, fields, param) -> None:
    engine = server[1]
    before = (engine.rendered, engine.encoded)
    info = _refused(stub.CreateChatCompletion, chat_request(**fields))
    assert (info.reason, info.metadata["param"]) == ("PROMPT_TOO_LONG", param)
    tokenize = json_format.ParseDict(
        {"messages": fields.get("messages", [{"role": "user", "content": "hi"}]),
         **{k: v for k, v in fields.items() if k != "messages"}}, tokenize_pb2.TokenizeRequest())
    info = _refused(stub.Tokenize, tokenize)
    assert (info.reason, info.metadata["param"]) == ("PROMPT_TOO_LONG", param)
    assert (engine.rendered, engine.encoded) == before, "nothing was rendered or tokenized"


def test_a_rendered_text_beyond_the_window_is_never_tokenized(server, stub) -> None:
    """A template that renders much more than its inputs (here: each
    message ten times) is stopped before the tokenizer, whatever template."""
    engine = server[1]
    before = engine.encoded
    req = chat_request(messages=[{"role": "user", "content": "w" * 1000}],
                       chat_template_kwargs={"repeat": 10})
    info = _refused(stub.CreateChatCompletion, req)
    assert (info.reason, info.metadata["param"]) == ("PROMPT_TOO_LONG", "messages")
    assert engine.encoded == before, "the over-long text was not tokenized"


async def test_large_legal_tools_are_prepared_off_the_event_loop() -> None:
    from tokenwire.server.core.domain import Caller
    from tokenwire.server.core.serving_state import ServingState
    from tokenwire.server.inference.fronts import CHAT
    from tokenwire.server.inference.offload import OFFLOAD_CHARS
    from tokenwire.server.runtime.app import build_data_plane
    from tokenwire.server.security.tenancy import Tenancy

    engine = CountingEngine()
    engine._max_model_len = 100_000
    settings = ServerSettings(engine="fake", max_model_len=100_000, tool_call_parser="hermes",
                              enable_auto_tool_choice=True)
    plane = build_data_plane(engine, settings, ServingState(), Tenancy())
    tools = [{"type": "function", "function": {"name": f"tool{i}", "description": "d" * 1000}}
             for i in range(OFFLOAD_CHARS // 1000 + 1)]
    try:
        plan = await CHAT.plan(plane, chat_request(tools=tools), caller=Caller(), stream=False)
        assert plan.parsing is not None
        assert engine.threads[-1] != threading.current_thread().name
        small = await CHAT.plan(plane, chat_request(tools=[TOOL]), caller=Caller(),
                                stream=False)
        assert small.parsing is not None and engine.threads[-1] == threading.current_thread().name
    finally:
        plane.offload.shutdown()


def test_continuation_messages_count_before_rendering(server, stub) -> None:
    from tests.session_rpc import RawSession, start_chat

    engine = server[1]
    s = RawSession(stub)
    s.send(start_chat("first", max_tokens=2))
    assert s.until_terminal("first")[-1].WhichOneof("event") == "done"
    before = (engine.rendered, engine.encoded)
    s.send(start_chat("next", continuation={"previous_request_id": "first", "messages": [
        {"role": "tool", "content": "ok", "tool_call_id": "t" * BIG}]}))
    last = s.until_terminal("next")[-1]
    assert (last.error.reason, last.error.param) == ("PROMPT_TOO_LONG", "continuation.messages")
    assert (engine.rendered, engine.encoded) == before, "nothing was rendered or tokenized"
    s.close()
