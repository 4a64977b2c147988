"""vLLM's own parsers behind engine/vllm/parsers.py, driven directly with the
demo model's tokenizer: several families' formats, unary and streamed at
awkward boundaries (inside a tag, inside the JSON), vLLM's call shapes."""

from __future__ import annotations

import json

import pytest

from tests.unit.inference.parser_cases import HERMES, MODEL, TOOLS, demo_tokenizer
from tokenwire.server.core.domain import GenerationParams
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.parsing import ParserConfig, ParseSpec

KIMI = ("<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|>'
        "<|tool_calls_section_end|>")


@pytest.fixture(scope="module")
def tokenizer():
    return demo_tokenizer()


def _parsers(tokenizer, tool: str, reasoning: str = "", auto: bool = True):
    from tokenwire.server.engine.vllm.parsers import VllmChatParsers

    return VllmChatParsers(ParserConfig(tool, auto, reasoning), tokenizer)


def _stream(rp, tokenizer, text: str, step: int):
    """Feed `text` as the engine would: `step` tokens per delta."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    parser = rp.stream_parser([1, 2, 3])
    reasoning, content, calls = "", "", {}
    for k in range(0, len(ids), step):
        chunk = ids[k : k + step]
        d = parser.delta(tokenizer.decode(chunk), chunk, finished=k + step >= len(ids))
        if d is None:
            continue
        reasoning += d.reasoning or ""
        content += d.content or ""
        for tc in d.tool_calls:
            call = calls.setdefault(tc.index, {"id": None, "name": None, "arguments": ""})
            if tc.id is not None:
                assert call["id"] is None  # the id comes once, on the call's first piece
                call["id"] = tc.id
            if tc.name is not None:
                call["name"] = tc.name
            call["arguments"] += tc.arguments or ""
    return reasoning, content, calls, parser.tool_finish


@pytest.mark.parametrize("step", [1, 2, 3, 5, 1000])
def test_hermes_with_qwen3_reasoning(tokenizer, step) -> None:
    rp = _parsers(tokenizer, "hermes", "qwen3").for_request(ParseSpec(tools=TOOLS))
    ids = tokenizer.encode(HERMES, add_special_tokens=False)
    m = rp.parse(HERMES, ids, [1, 2, 3])
    assert (m.reasoning, m.content, m.tool_finish) == ("Paris, then.", "Sure.", True)
    [call] = m.tool_calls
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.id.startswith("chatcmpl-tool-")
    reasoning, content, calls, finish = _stream(rp, tokenizer, HERMES, step)
    assert (reasoning, content.strip(), finish) == ("Paris, then.", "Sure.", True)
    assert list(calls) == [0] and calls[0]["name"] == "get_weather"
    assert calls[0]["id"].startswith("chatcmpl-tool-")
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


@pytest.mark.parametrize("step", [1, 4, 1000])
def test_kimi_k2_calls_and_ids(tokenizer, step) -> None:
    rp = _parsers(tokenizer, "kimi_k2").for_request(ParseSpec(tools=TOOLS))
    m = rp.parse(KIMI, [], [])
    assert [(c.id, c.name, json.loads(c.arguments)) for c in m.tool_calls] == [
        ("functions.get_weather:0", "get_weather", {"city": "Paris"})]
    _, _, calls, finish = _stream(rp, tokenizer, KIMI, step)
    assert finish and calls[0]["id"] == "functions.get_weather:0"
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris"}


def test_parallel_tool_calls_false_keeps_the_first(tokenizer) -> None:
    two = HERMES + '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    spec = ParseSpec(tools=TOOLS, parallel_tool_calls=False)
    rp = _parsers(tokenizer, "hermes", "qwen3").for_request(spec)
    assert [json.loads(c.arguments)["city"] for c in rp.parse(two, [], []).tool_calls] == [
        "Paris"]
    _, _, calls, _ = _stream(rp, tokenizer, two, 2)
    assert list(calls) == [0]
    rp = _parsers(tokenizer, "hermes", "qwen3").for_request(ParseSpec(tools=TOOLS))
    assert len(rp.parse(two, [], []).tool_calls) == 2


def test_required_and_named_are_constrained_as_vllm_does(tokenizer) -> None:
    """vLLM 0.32 constrains hermes' "required" and named calls with a
    structural tag of its own format (then parses that format)."""
    ps = _parsers(tokenizer, "hermes")
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
        params = GenerationParams()
        rp = ps.for_request(ParseSpec(tools=TOOLS, tool_choice=choice))
        rp.adjust(params)
        tag = params.structured.structural_tag
        assert "<tool_call>" in tag and "get_weather" in tag and json.loads(tag), choice
        m = rp.parse(call, [], [])
        assert [(c.name, json.loads(c.arguments)) for c in m.tool_calls] == [
            ("get_weather", {"city": "Paris"})], choice
        assert m.tool_finish == (choice == "required")  # vLLM: a named call finishes "stop"
    params = GenerationParams()
    ps.for_request(ParseSpec(tools=TOOLS, tool_choice="none")).adjust(params)
    assert params.structured is None


def test_without_auto_tool_choice_tools_are_refused(tokenizer) -> None:
    ps = _parsers(tokenizer, "hermes", "qwen3", auto=False)
    with pytest.raises(InvalidArgument) as err:
        ps.for_request(ParseSpec(tools=TOOLS))
    assert "--enable-auto-tool-choice" in err.value.message
    rp = ps.for_request(ParseSpec(tools=TOOLS, tool_choice="none"))  # reasoning only
    m = rp.parse(HERMES, [], [])
    assert m.reasoning == "Paris, then." and "<tool_call>" in m.content and not m.tool_calls


def test_unknown_names_are_listed() -> None:
    from tokenwire.server.engine.vllm.parsers import check_names

    why = check_names(ParserConfig("nope", True, ""))
    assert why is not None and "hermes" in why and "llama3_json" in why and "mistral" in why
    assert "deepseek_r1" in (check_names(ParserConfig(reasoning_parser="nope")) or "")
    assert check_names(ParserConfig("", True, "")) is not None
    assert check_names(ParserConfig("hermes", True, "qwen3")) is None


def test_a_plugin_registers_a_parser_name(tmp_path, tokenizer) -> None:
    """--tool-parser-plugin FILE: its names are accepted, as `vllm serve` does."""
    from tokenwire.server.engine.vllm.parsers import check_names, import_plugins

    plugin = tmp_path / "my_parser.py"
    plugin.write_text(
        "from vllm.tool_parsers import ToolParserManager\n"
        "from vllm.tool_parsers.hermes_tool_parser import Hermes2ProToolParser\n\n\n"
        "@ToolParserManager.register_module('tw_plugin_hermes')\n"
        "class MyParser(Hermes2ProToolParser):\n"
        "    pass\n")
    assert check_names(ParserConfig("tw_plugin_hermes", True, "")) is not None
    import_plugins(str(plugin), "")
    assert check_names(ParserConfig("tw_plugin_hermes", True, "")) is None
    rp = _parsers(tokenizer, "tw_plugin_hermes").for_request(ParseSpec(tools=TOOLS))
    assert [c.name for c in rp.parse(HERMES, [], []).tool_calls] == ["get_weather"]


def _ds(name: str) -> str:
    """A DeepSeek marker: full-width bars around the name, U+2581 for spaces."""
    return "<\uff5c" + name.replace(" ", "\u2581") + "\uff5c>"


DS = {k: _ds(k) for k in ("tool calls begin", "tool calls end", "tool call begin",
                          "tool call end", "tool sep")}
FAMILY_TOKENS = ["<think>", "</think>", "<|python_tag|>", "[TOOL_CALLS]", "[ARGS]", *DS.values()]
FAMILIES = {  # (tool parser, reasoning parser): what the family's model writes
    ("llama3_json", ""): '{"name": "get_weather", "parameters": {"city": "Paris"}}',
    ("mistral", ""): '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
    ("deepseek_v3", "deepseek_r1"): (
        f"<think>hm</think>Ok.{DS['tool calls begin']}{DS['tool call begin']}function"
        f'{DS["tool sep"]}get_weather\n```json\n{{"city": "Paris"}}\n```'
        f"{DS['tool call end']}{DS['tool calls end']}"),
}


@pytest.fixture(scope="module")
def family_tokenizer(tokenizer, tmp_path_factory):
    """The demo tokenizer with the families' special tokens added (the
    parsers check their markers are in the vocabulary)."""
    import shutil

    from transformers import AutoTokenizer
    from vllm.tokenizers import get_tokenizer

    folder = tmp_path_factory.mktemp("family-tokenizer")
    hf = AutoTokenizer.from_pretrained(str(MODEL))
    hf.add_special_tokens({"additional_special_tokens": FAMILY_TOKENS})
    hf.save_pretrained(str(folder))
    shutil.copy(MODEL / "config.json", folder / "config.json")
    return get_tokenizer(str(folder))


# Token by token, and 3 tokens a delta (stream_interval 3): splits inside the
# markers and the JSON. (vLLM's legacy llama3_json and deepseek_r1 parsers
# miss a call or keep <think> when a delta holds the whole output or starts
# with the marker and its text; they get the deltas vLLM's server would give.)
@pytest.mark.parametrize("step", [1, 3])
@pytest.mark.parametrize("names", list(FAMILIES))
def test_families_unary_and_streamed(family_tokenizer, names, step) -> None:
    text = FAMILIES[names]
    rp = _parsers(family_tokenizer, *names).for_request(ParseSpec(tools=TOOLS))
    ids = family_tokenizer.encode(text, add_special_tokens=False)
    m = rp.parse(text, ids, [1, 2, 3])
    assert [(c.name, json.loads(c.arguments)) for c in m.tool_calls] == [
        ("get_weather", {"city": "Paris"})]
    assert m.tool_calls[0].id and m.tool_finish
    if names[1]:
        assert (m.reasoning, m.content) == ("hm", "Ok.")
    reasoning, content, calls, finish = _stream(rp, family_tokenizer, text, step)
    assert finish and list(calls) == [0] and calls[0]["name"] == "get_weather"
    assert calls[0]["id"] and json.loads(calls[0]["arguments"]) == {"city": "Paris"}
    if names[1]:
        assert (reasoning, content) == ("hm", "Ok.")


def _kimi_model():
    """A model config as vLLM reads it for its tool-call id type (kimi_k2)."""
    import types

    return types.SimpleNamespace(hf_config=types.SimpleNamespace(model_type="kimi_k2"),
                                 model="kimi")


NAMED = {"type": "function", "function": {"name": "get_weather"}}
REQUIRED_TWO = ('[{"name": "get_weather", "parameters": {"city": "Paris"}}, '
                '{"name": "get_weather", "parameters": {"city": "Rome"}}]')


@pytest.mark.parametrize("step", [1, 1000])
@pytest.mark.parametrize("history", [0, 3])
def test_kimi_ids_count_the_earlier_turns_calls(tokenizer, history, step) -> None:
    """A Kimi model's ids ("functions.NAME:IDX") go on from the calls of the
    conversation's earlier assistant turns, as vLLM's chat serving numbers
    them (here with a parser whose named / required calls get vLLM's ids)."""
    from tokenwire.server.engine.vllm.parsers import VllmChatParsers

    ps = VllmChatParsers(ParserConfig("pythonic", True, ""), tokenizer, _kimi_model())
    cases = ((NAMED, '{"city": "Paris"}', [history]),
             ("required", REQUIRED_TWO, [history, history + 1]))
    for choice, text, idx in cases:
        rp = ps.for_request(ParseSpec(tools=TOOLS, tool_choice=choice, history_tool_calls=history))
        rp.adjust(GenerationParams())
        want = [f"functions.get_weather:{i}" for i in idx]
        assert [c.id for c in rp.parse(text, [], []).tool_calls] == want, choice
        _, _, calls, _ = _stream(rp, tokenizer, text, step)
        assert [calls[i]["id"] for i in sorted(calls)] == want, choice


def test_kimi_ids_equal_vllms_own_count_of_the_messages(tokenizer) -> None:
    """vLLM's parser over vLLM's request holding the real conversation gives
    the ids tokenwire gives from the count alone (unary and streamed)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager

    from tokenwire.server.engine.vllm.parsers import VllmChatParsers

    call = {"type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "tool_calls": [dict(call, id="functions.get_weather:0"),
                                             dict(call, id="functions.get_weather:1")]},
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "sun"},
        {"role": "tool", "tool_call_id": "functions.get_weather:1", "content": "rain"},
        {"role": "assistant", "content": "Sun, then rain."},
        {"role": "user", "content": "and Paris?"},
    ]
    model = _kimi_model()
    request = ChatCompletionRequest.model_validate(
        {"model": "", "messages": messages, "tools": TOOLS, "tool_choice": NAMED})
    cls = ParserManager.get_parser(tool_parser_name="pythonic", enable_auto_tools=True,
                                   model_name="kimi", tokenizer=tokenizer)
    vllm_parser = cls(tokenizer, request.tools, model_config=model)
    request = vllm_parser.adjust_request(request)
    _, _, vllm_calls = vllm_parser.parse('{"city": "Paris"}', request, enable_auto_tools=True)
    rp = VllmChatParsers(ParserConfig("pythonic", True, ""), tokenizer, model).for_request(
        ParseSpec(tools=TOOLS, tool_choice=NAMED, history_tool_calls=2))
    rp.adjust(GenerationParams())
    ours = rp.parse('{"city": "Paris"}', [], [])
    assert [c.id for c in ours.tool_calls] == [c.id for c in vllm_calls] == [
        "functions.get_weather:2"]


def test_other_models_ids_stay_random(tokenizer) -> None:
    """Without a Kimi model the history count changes nothing (vLLM's random ids)."""
    rp = _parsers(tokenizer, "pythonic").for_request(
        ParseSpec(tools=TOOLS, tool_choice=NAMED, history_tool_calls=4))
    rp.adjust(GenerationParams())
    [call] = rp.parse('{"city": "Paris"}', [], []).tool_calls
    assert call.id.startswith("chatcmpl-tool-")
