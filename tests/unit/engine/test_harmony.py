"""gpt-oss's harmony path on vLLM's own harmony code, without a model:
tokenwire's rendering (engine/vllm/harmony.py) equals vLLM's chat renderer's
(_make_request_with_harmony) token for token, and vLLM's HarmonyParser behind
engine/vllm/parsers.py reads harmony output ids into reasoning, content and
tool calls, unary and streamed. Needs the o200k_base vocabulary offline
(tests/harmony_vocab.py): skipped, saying why, without it."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.harmony_vllm import GPT_OSS, vllm_chat_prompt
from tests.harmony_vocab import use_harmony_vocab
from tests.unit.inference.parser_cases import TOOLS, demo_tokenizer
from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.core.parsing import ParserConfig, ParseSpec

pytestmark = pytest.mark.skipif(use_harmony_vocab() is not None,
                                reason=use_harmony_vocab() or "")

CALL = {"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
CONVERSATION: list[dict[str, Any]] = [
    {"role": "system", "content": "Answer briefly."},
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "reasoning_content": "Look it up.",
     "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "assistant", "content": "Sunny.", "reasoning_content": "Say it."},
    {"role": "user", "content": "And tomorrow?"},
]


@pytest.fixture(autouse=True)
def _pinned_date(monkeypatch):
    monkeypatch.setenv("VLLM_SYSTEM_START_DATE", "2026-01-02")


def _encoding():
    from vllm.entrypoints.openai.parser.harmony_utils import get_encoding

    return get_encoding()


@pytest.mark.parametrize("tools", [None, TOOLS])
def test_rendering_equalsvllm_chat_prompt(tools) -> None:
    from tokenwire.server.engine.vllm.harmony import render_harmony

    ours = render_harmony([dict(m) for m in CONVERSATION], RenderOptions(tools=tools))
    assert ours == vllm_chat_prompt([dict(m) for m in CONVERSATION], tools)
    text = _encoding().decode(ours)
    assert text.startswith("<|start|>system<|message|>") and "2026-01-02" in text
    assert text.endswith("<|start|>assistant")
    assert "Answer briefly." in text and "And tomorrow?" in text
    assert ("namespace functions" in text) == (tools is not None)  # the tools declared
    assert "to=functions.get_weather" in text and "sunny" in text  # the earlier call, answered
    assert "Look it up." not in text  # analysis before the last final answer: dropped


@pytest.mark.parametrize("effort", ["low", "medium", "high"])
def test_reasoning_effort_is_in_the_system_message_as_vllm_writes_it(effort) -> None:
    from tokenwire.server.engine.vllm.harmony import render_harmony

    ours = render_harmony([dict(m) for m in CONVERSATION],
                          RenderOptions(tools=TOOLS, reasoning_effort=effort))
    assert ours == vllm_chat_prompt([dict(m) for m in CONVERSATION], TOOLS,
                                    reasoning_effort=effort)
    system = _encoding().decode(ours).split("<|end|>")[0]
    assert f"Reasoning: {effort}" in system
    unset = render_harmony([dict(m) for m in CONVERSATION], RenderOptions(tools=TOOLS))
    assert (ours == unset) == (effort == "medium")  # unset: harmony's default, medium


@pytest.mark.parametrize("effort", ["none", "minimal", "max"])
def test_an_effort_harmony_lacks_is_invalid_argument_as_in_vllm(effort) -> None:
    from vllm.exceptions import VLLMValidationError

    from tokenwire.server.core.errors import InvalidArgument
    from tokenwire.server.engine.vllm.harmony import render_harmony

    with pytest.raises(InvalidArgument) as err:
        render_harmony([{"role": "user", "content": "hi"}], RenderOptions(reasoning_effort=effort))
    assert err.value.param == "reasoning_effort" and effort in str(err.value)
    with pytest.raises(VLLMValidationError):  # vLLM refuses the same ones
        vllm_chat_prompt([{"role": "user", "content": "hi"}], None, reasoning_effort=effort)


def test_a_bad_tool_type_is_invalid_argument() -> None:
    from tokenwire.server.core.errors import InvalidArgument
    from tokenwire.server.engine.vllm.harmony import render_harmony

    with pytest.raises(InvalidArgument) as err:
        render_harmony([{"role": "user", "content": "hi"}],
                       RenderOptions(tools=[{"type": "nope", "function": {"name": "x"}}]))
    assert err.value.param in ("messages", "tools")


OUTPUT = ("<|channel|>analysis<|message|>Need the weather.<|end|>"
          "<|start|>assistant<|channel|>commentary to=functions.get_weather "
          '<|constrain|>json<|message|>{"city": "Paris"}<|call|>')
FINAL = ("<|channel|>analysis<|message|>Easy.<|end|>"
         "<|start|>assistant<|channel|>final<|message|>Hello there.<|return|>")


def _parsers(tools: bool = True):
    from tokenwire.server.engine.vllm.parsers import VllmChatParsers

    return VllmChatParsers(ParserConfig("openai" if tools else "", tools, "openai_gptoss"),
                           demo_tokenizer(), GPT_OSS)


def _ids(text: str) -> list[int]:
    return list(_encoding().encode(text, allowed_special="all"))


def _stream(rp, ids: list[int], step: int):
    parser = rp.stream_parser([1, 2, 3])
    reasoning, content, calls = "", "", {}
    for k in range(0, len(ids), step):
        chunk = ids[k:k + step]
        d = parser.delta("", chunk, finished=k + step >= len(ids))
        if d is None:
            continue
        reasoning += d.reasoning or ""
        content += d.content or ""
        for tc in d.tool_calls:
            call = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            call["id"] = call["id"] or tc.id
            call["name"] = call["name"] or tc.name
            call["arguments"] += tc.arguments or ""
    return reasoning, content, calls, parser.tool_finish


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_harmony_output_parsed_unary_and_streamed(step) -> None:
    rp = _parsers().for_request(ParseSpec(tools=TOOLS))
    assert type(rp.new_parser()).__name__ == "HarmonyParser"
    ids = _ids(OUTPUT)
    m = rp.parse("", ids, [1, 2, 3])
    assert (m.reasoning, m.content, m.tool_finish) == ("Need the weather.", None, True)
    [call] = m.tool_calls
    assert (call.name, json.loads(call.arguments)) == ("get_weather", {"city": "Paris"})
    assert call.id.startswith("chatcmpl-tool-")
    reasoning, content, calls, finish = _stream(rp, ids, step)
    assert (reasoning, content, finish) == ("Need the weather.", "", True)
    assert list(calls) == [0] and calls[0]["name"] == "get_weather"
    assert calls[0]["id"].startswith("chatcmpl-tool-")
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("step", [1, 1000])
def test_harmony_final_answer(step) -> None:
    rp = _parsers().for_request(ParseSpec(tools=TOOLS))
    ids = _ids(FINAL)
    m = rp.parse("", ids, [1, 2, 3])
    assert (m.reasoning, m.content, m.tool_calls, m.tool_finish) == (
        "Easy.", "Hello there.", [], False)
    assert _stream(rp, ids, step) == ("Easy.", "Hello there.", {}, False)
    assert rp.count_reasoning_tokens(ids) == len(_ids("Easy."))
