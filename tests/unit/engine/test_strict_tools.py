"""`strict` tools and `--tool-strict-level` (#45 item 1): the constraint
tokenwire gives the engine for a chat body equals the one vLLM 0.32's chat
serving derives from the same JSON (its parser's `adjust_request`), for
every level, tool choice and strictness, with vLLM's hermes parser and the
demo tokenizer. The same answers side by side with vLLM's server:
tests/gateway/test_vllm_side_by_side.py."""

from __future__ import annotations

import json
from typing import Any

import pytest
from google.protobuf import json_format

from tests.unit.inference.parser_cases import demo_tokenizer
from tokenwire.server.core.domain import GenerationParams
from tokenwire.server.core.parsing import ParserConfig, ParseSpec
from tokenwire.server.inference.shared.messages import tools_to_dicts
from tokenwire.v1 import chat_pb2

PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
CHOICES: dict[str, Any] = {
    "auto": "auto", "required": "required",
    "named": {"type": "function", "function": {"name": "get_weather"}}}


@pytest.fixture(scope="module")
def tokenizer():
    return demo_tokenizer()


def _body(strict: bool | None, choice: Any) -> dict[str, Any]:
    fn: dict[str, Any] = {"name": "get_weather", "description": "d", "parameters": PARAMS}
    if strict is not None:
        fn["strict"] = strict
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}],
            "tools": [{"type": "function", "function": fn}], "tool_choice": choice}


def _theirs(tokenizer, level: str, body: dict[str, Any]) -> Any:
    """vLLM's chat serving: its parser's adjust_request on its request model."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.parser import ParserManager

    cls = ParserManager.get_parser(tool_parser_name="hermes", reasoning_parser_name=None,
                                   enable_auto_tools=True, model_name=None, is_harmony=False,
                                   tool_strict_level=level, tokenizer=tokenizer)
    request = ChatCompletionRequest.model_validate(body)
    request = cls(tokenizer, request.tools).adjust_request(request)
    so = request.structured_outputs
    if so is None:
        return None
    if so.structural_tag is not None:
        return ("structural_tag", json.loads(so.structural_tag))
    return ("json", json.loads(so.json) if isinstance(so.json, str) else so.json)


def _ours(tokenizer, level: str, body: dict[str, Any]) -> Any:
    """tokenwire: the proto body's tools as the chat kind hands them on."""
    from tokenwire.server.engine.vllm.parsers import VllmChatParsers

    req = json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())
    parsers = VllmChatParsers(ParserConfig("hermes", True, "", level), tokenizer)
    rp = parsers.for_request(ParseSpec(tools=tools_to_dicts(req.tools),
                                       tool_choice=body["tool_choice"]))
    assert rp is not None
    params = GenerationParams()
    rp.adjust(params)
    s = params.structured
    if s is None:
        return None
    if s.structural_tag is not None:
        tag = s.structural_tag
        return ("structural_tag", json.loads(tag) if isinstance(tag, str) else tag)
    return ("json", s.json_schema)


@pytest.mark.parametrize("choice", list(CHOICES))
@pytest.mark.parametrize("strict", [True, False, None], ids=["strict", "loose", "unset"])
@pytest.mark.parametrize("level", ["auto", "function", "parameter"])
def test_constraint_equals_vllms(tokenizer, level, strict, choice) -> None:
    body = _body(strict, CHOICES[choice])
    assert _ours(tokenizer, level, body) == _theirs(tokenizer, level, body)


def test_strict_pins_the_arguments_to_the_schema(tokenizer) -> None:
    """What the comparison means: strict, a forced call's arguments are the
    tool's parameter schema; loose, they are any JSON."""
    strict = json.dumps(_ours(tokenizer, "auto", _body(True, "required")))
    loose = json.dumps(_ours(tokenizer, "auto", _body(None, "required")))
    assert '"city"' in strict and '"city"' not in loose
    # --tool-strict-level parameter: every tool as if strict.
    assert _ours(tokenizer, "parameter", _body(None, "required")) == \
        _ours(tokenizer, "parameter", _body(True, "required"))


def test_strict_reaches_the_template_as_vllm_renders_it() -> None:
    """vLLM's tool model keeps `strict` when set (its chat template sees it)
    and drops it when unset; tokenwire's tool dicts do the same."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    for strict in (True, False, None):
        body = _body(strict, "auto")
        theirs = [t.model_dump(exclude_none=True)
                  for t in ChatCompletionRequest.model_validate(body).tools or []]
        req = json_format.ParseDict(body, chat_pb2.CreateChatCompletionRequest())
        assert tools_to_dicts(req.tools) == theirs
