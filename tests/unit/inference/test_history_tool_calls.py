"""The chat plan hands the parsers the number of tool calls the earlier
assistant turns made (vLLM's count_chat_history_tool_calls over the
request's messages: Kimi models' ids go on from it)."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core.domain import Caller
from tokenwire.server.core.parsing import ParserConfig, ParseSpec
from tokenwire.server.core.settings import ServerSettings
from tokenwire.server.engine.fake.engine import FakeEngine
from tokenwire.server.engine.fake.parsers import FakeChatParsers
from tokenwire.server.inference.chat.request import build_chat_plan
from tokenwire.v1 import chat_pb2


class _Recording(FakeChatParsers):
    def __init__(self, config: ParserConfig):
        super().__init__(config)
        self.specs: list[ParseSpec] = []

    def for_request(self, spec: ParseSpec) -> Any:
        self.specs.append(spec)
        return super().for_request(spec)


class _Engine(FakeEngine):
    def __init__(self) -> None:
        super().__init__(max_model_len=512)
        self.recording = _Recording(ParserConfig("hermes", True, ""))

    def chat_parsers(self, config: ParserConfig) -> Any:
        return self.recording


def _call(call_id: str) -> chat_pb2.ToolCall:
    return chat_pb2.ToolCall(id=call_id, type="function", function=chat_pb2.FunctionCall(
        name="get_weather", arguments='{"city": "Paris"}'))


def _spec(messages: list[chat_pb2.ChatMessage]) -> ParseSpec:
    engine = _Engine()
    req = chat_pb2.CreateChatCompletionRequest(model="fake", messages=messages)
    build_chat_plan(req, engine, ServerSettings(engine="fake", tool_call_parser="hermes",
                                                enable_auto_tool_choice=True),
                    served_model="fake", caller=Caller(), stream=False)
    [spec] = engine.recording.specs
    return spec


def _text(role: str, text: str, **kw: Any) -> chat_pb2.ChatMessage:
    m = chat_pb2.ChatMessage(role=role, **kw)
    m.content.string_value = text
    return m


def test_the_earlier_turns_calls_are_counted() -> None:
    messages = [
        _text("user", "weather?"),
        chat_pb2.ChatMessage(role="assistant", tool_calls=[_call("a"), _call("b")]),
        _text("tool", "sun", tool_call_id="a"),
        _text("tool", "rain", tool_call_id="b"),
        _text("assistant", "Sun, then rain."),
        _text("user", "and tomorrow?"),
        chat_pb2.ChatMessage(role="assistant", tool_calls=[_call("c")]),
        _text("tool", "snow", tool_call_id="c"),
    ]
    assert _spec(messages).history_tool_calls == 3


def test_a_first_turn_counts_none() -> None:
    assert _spec([_text("user", "hi")]).history_tool_calls == 0
