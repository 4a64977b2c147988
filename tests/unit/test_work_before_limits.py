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
from tests.servers import ThreadServer
from tokenwire.server.fake_engine import FakeEngine
from tokenwire.server.settings import ServerSettings
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

    def render_chat(self, messages, options):
        self.rendered += 1
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
    srv = ThreadServer(ServerSettings(engine="fake", port=0, max_model_len=512,
                                      trust_request_chat_template=True,
                                      request_template_timeout_seconds=0.5), engine).start()
    yield srv, engine
    srv.stop()


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
    info = _refused(stub.CreateChatCompletion, chat_request(messages=[{"role": "user", "content": HUGE}]))
    assert (info.reason, info.metadata["param"]) == ("PROMPT_TOO_LONG", "messages")
    info = _refused(stub.Tokenize, tokenize_pb2.TokenizeRequest(prompt=HUGE))
    assert (info.reason, info.metadata["param"]) == ("PROMPT_TOO_LONG", "prompt")
    assert (engine.rendered, engine.encoded) == before, "nothing was rendered or tokenized"


def test_id_lists_are_measured_before_they_are_walked(stub) -> None:
    ids = [5] * 600 + [10**6]  # too long, and the last id is not in the vocabulary
    info = _refused(stub.CreateChatCompletion, chat_request(nvext={"token_data": ids}))
    assert info.reason == "PROMPT_TOO_LONG"
    info = _refused(stub.Generate, json_format.ParseDict({"token_ids": ids}, generate_pb2.GenerateRequest()))
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
