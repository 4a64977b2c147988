"""reasoning_tokens as vLLM counts them: engine/vllm/parsers.py's
count_reasoning_tokens is vLLM's reasoning parser's own count over the
generated ids (what its chat serving prints in completion_tokens_details),
on the demo model's tokenizer; None without a reasoning parser."""

from __future__ import annotations

import pytest

from tests.unit.inference.parser_cases import demo_tokenizer
from tokenwire.server.core.parsing import HiddenReasoning, ParserConfig, ParseSpec

TEXT = "<think>The user wants a greeting, kindly.</think>Hello there!"


@pytest.fixture(scope="module")
def tokenizer():
    return demo_tokenizer()


def test_count_is_vllms_parsers(tokenizer) -> None:
    from vllm.reasoning import ReasoningParserManager

    from tokenwire.server.engine.vllm.parsers import VllmChatParsers

    ids = tokenizer.encode(TEXT, add_special_tokens=False)
    rp = VllmChatParsers(ParserConfig(reasoning_parser="qwen3"), tokenizer).for_request(
        ParseSpec())
    assert rp is not None
    vllm_parser = ReasoningParserManager.get_reasoning_parser("qwen3")(tokenizer)
    expected = vllm_parser.count_reasoning_tokens(tuple(ids))
    assert rp.count_reasoning_tokens(ids) == expected
    assert HiddenReasoning(rp).count_reasoning_tokens(ids) == expected  # generated all the same
    tools = VllmChatParsers(ParserConfig("hermes", True), tokenizer).for_request(ParseSpec())
    assert tools is not None and tools.count_reasoning_tokens(ids) is None
