"""vLLM's `include_reasoning` request field (chat, Responses) and its
`--exclude-tools-when-tool-choice-none` / `--tool-strict-level` server
flags: on the fake engine (whose parser double splits <think>...</think>),
and vLLM's own parsers driven with the demo model's tokenizer."""

from __future__ import annotations

import json
from typing import Any

import grpc
import pytest
from google.protobuf import json_format

from tests.rpc import chat_request, stream_ids
from tests.servers import fake_serving
from tests.unit.inference.parser_cases import HERMES, TOOLS, demo_tokenizer
from tokenwire.server.core.domain import GenerationParams
from tokenwire.server.core.parsing import HiddenReasoning, ParserConfig, ParseSpec
from tokenwire.server.runtime.cli import parse_settings
from tokenwire.v1 import responses_pb2, service_pb2_grpc

THINK = [{"role": "user", "content": "Think first. Then greet me."}]


@pytest.fixture(scope="module")
def tokenizer():
    return demo_tokenizer()


# -- include_reasoning on the fake engine ---------------------------------

def test_include_reasoning_false_leaves_the_reasoning_out(fake_stub) -> None:
    shown = fake_stub.CreateChatCompletion(
        chat_request(messages=THINK, return_token_ids=True), timeout=10)
    assert shown.choices[0].message.reasoning_content == "The user wants a greeting."
    req = chat_request(messages=THINK, return_token_ids=True, include_reasoning=False,
                       logprobs=True)
    hidden = fake_stub.CreateChatCompletion(req, timeout=10)
    m = hidden.choices[0].message
    assert not m.HasField("reasoning_content") and m.content == "Hello!"
    # the reasoning is generated and counted; its ids and logprobs still come
    assert list(hidden.choices[0].token_ids) == list(shown.choices[0].token_ids)
    assert len(hidden.choices[0].logprobs.content) == len(hidden.choices[0].token_ids)
    assert hidden.usage.completion_tokens == shown.usage.completion_tokens
    chunks = list(fake_stub.StreamChatCompletion(req, timeout=10))
    assert not any(ch.delta.HasField("reasoning_content") for c in chunks for ch in c.choices)
    assert "".join(ch.delta.content for c in chunks for ch in c.choices) == "Hello!"
    assert stream_ids(chunks)[0] == list(shown.choices[0].token_ids)
    # true is the default
    again = fake_stub.CreateChatCompletion(
        chat_request(messages=THINK, include_reasoning=True), timeout=10)
    assert again.choices[0].message.reasoning_content == "The user wants a greeting."


def test_include_reasoning_false_on_responses(fake_stub) -> None:
    def create(**body: Any) -> responses_pb2.CreateResponseResponse:
        req = json_format.ParseDict({"input": "Think first.", **body},
                                    responses_pb2.CreateResponseRequest())
        return fake_stub.CreateResponse(req, timeout=10)

    assert [o.type for o in create().output] == ["reasoning", "message"]
    out = create(include_reasoning=False).output
    assert [o.type for o in out] == ["message"]
    assert out[0].content[0].text.strip() == "Hello!"


def test_hidden_reasoning_starts_constraints_at_the_first_token() -> None:
    from tokenwire.server.engine.fake.parsers import FakeChatParsers

    rp = FakeChatParsers(ParserConfig(reasoning_parser="qwen3")).for_request(ParseSpec())
    assert rp is not None and rp.engine_reasoning([1, 2])[0] is None
    assert HiddenReasoning(rp).engine_reasoning([1, 2])[0] is True


# -- --exclude-tools-when-tool-choice-none --------------------------------

def _prompt(stub, **body: Any) -> list[int]:
    resp = stub.CreateChatCompletion(chat_request(return_token_ids=True, max_tokens=1, **body),
                                     timeout=10)
    return list(resp.prompt_token_ids)


@pytest.mark.parametrize("exclude", [False, True])
def test_tools_left_out_of_the_template_when_tool_choice_is_none(exclude: bool) -> None:
    with fake_serving(exclude_tools_when_tool_choice_none=exclude, tool_call_parser="hermes",
                      enable_auto_tool_choice=True) as server:
        with grpc.insecure_channel(server.address) as ch:
            stub = service_pb2_grpc.TokenwireServiceStub(ch)
            bare = _prompt(stub)
            with_tools = _prompt(stub, tools=TOOLS)
            none = _prompt(stub, tools=TOOLS, tool_choice="none")
            auto = _prompt(stub, tools=TOOLS, tool_choice="auto")
    assert with_tools != bare and auto == with_tools
    assert none == (bare if exclude else with_tools)


def test_flags_parse_as_vllm_spells_them() -> None:
    s = parse_settings(["--engine", "fake", "--exclude-tools-when-tool-choice-none",
                        "--tool-strict-level", "parameter"])
    assert s.exclude_tools_when_tool_choice_none and s.tool_strict_level == "parameter"
    assert s.parser_config().tool_strict_level == "parameter"
    d = parse_settings(["--engine", "fake"])
    assert not d.exclude_tools_when_tool_choice_none and d.tool_strict_level == "auto"
    with pytest.raises(SystemExit):
        parse_settings(["--engine", "fake", "--tool-strict-level", "everything"])


# -- vLLM's parsers -------------------------------------------------------

def _vllm(tokenizer, level: str = "auto"):
    from tokenwire.server.engine.vllm.parsers import VllmChatParsers

    return VllmChatParsers(ParserConfig("hermes", True, "qwen3", level), tokenizer)


@pytest.mark.parametrize("step", [1, 3, 1000])
def test_vllm_parsers_with_reasoning_hidden(tokenizer, step) -> None:
    spec = ParseSpec(tools=TOOLS, include_reasoning=False)
    rp = HiddenReasoning(_vllm(tokenizer).for_request(spec))
    ids = tokenizer.encode(HERMES, add_special_tokens=False)
    m = rp.parse(HERMES, ids, [1, 2, 3])
    assert (m.reasoning, m.content, m.tool_finish) == (None, "Sure.", True)
    assert [json.loads(c.arguments) for c in m.tool_calls] == [{"city": "Paris"}]
    parser = rp.stream_parser([1, 2, 3])
    content, args = "", ""
    for k in range(0, len(ids), step):
        chunk = ids[k:k + step]
        d = parser.delta(tokenizer.decode(chunk), chunk, finished=k + step >= len(ids))
        if d is not None:
            assert d.reasoning is None
            content += d.content or ""
            args += "".join(tc.arguments or "" for tc in d.tool_calls)
    assert content.strip() == "Sure." and json.loads(args) == {"city": "Paris"}
    # vLLM's resolve_reasoning_ended: constraints from the first generated token
    shown = _vllm(tokenizer).for_request(ParseSpec(tools=TOOLS))
    assert shown.engine_reasoning([1, 2, 3])[0] is False
    assert rp.engine_reasoning([1, 2, 3])[0] is True


def test_vllm_tool_strict_level_constrains_auto(tokenizer) -> None:
    """--tool-strict-level function: vLLM constrains the call envelope of
    tool_choice auto too (a structural tag the engine enforces); auto alone
    leaves it free."""
    free, strict = GenerationParams(), GenerationParams()
    _vllm(tokenizer).for_request(ParseSpec(tools=TOOLS, tool_choice="auto")).adjust(free)
    _vllm(tokenizer, "function").for_request(
        ParseSpec(tools=TOOLS, tool_choice="auto")).adjust(strict)
    assert free.structured is None
    tag = json.loads(strict.structured.structural_tag)
    assert "<tool_call>" in json.dumps(tag) and "get_weather" in json.dumps(tag)

