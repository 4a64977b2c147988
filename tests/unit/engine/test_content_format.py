"""--chat-template-content-format (vLLM's flag) in TokenizerOps: `auto`
asks the adapter's detection (vLLM's: does the template loop over
`message.content`?) once per template, so a template that only reads
content parts gets text contents as parts and a string template gets
strings; `string` and `openai` force the form."""

from __future__ import annotations

import pathlib

import pytest

from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.engine.tokenizer_ops import ChatTemplateDefaults, TokenizerOps

DEMO = pathlib.Path(__file__).resolve().parents[3] / ".models" / "SmolLM2-135M-Instruct"
PARTS_ONLY = ("{% for m in messages %}<{{ m['role'] }}>{% for p in m['content'] %}"
              "{{ p['text'] }}{% endfor %}</{{ m['role'] }}>{% endfor %}")
MESSAGES = [{"role": "user", "content": "Hello there"}]


def vllm_detect(template: str | None, tools: object) -> str:
    from vllm.renderers.hf import _detect_content_format

    assert template is not None
    return str(_detect_content_format(template, default="string"))


@pytest.fixture(scope="module")
def tokenizer():
    if not (DEMO / "tokenizer.json").exists():
        pytest.skip("make model")
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(DEMO)


def ops(tokenizer, fmt: str, template: str, calls: list | None = None) -> TokenizerOps:
    def detect(t: str | None, tools: object) -> str:
        if calls is not None:
            calls.append(t)
        return vllm_detect(t, tools)

    return TokenizerOps(tokenizer, ChatTemplateDefaults(template=template, content_format=fmt),
                        detect_format=detect)


def text(tokenizer, ids: list[int]) -> str:
    return tokenizer.decode(ids)


def test_auto_detects_a_parts_template(tokenizer) -> None:
    calls: list = []
    auto = ops(tokenizer, "auto", PARTS_ONLY, calls)
    assert text(tokenizer, auto.render_chat(MESSAGES, RenderOptions())) == (
        "<user>Hello there</user>")
    auto.render_chat(MESSAGES, RenderOptions())
    assert calls == [PARTS_ONLY]  # detected once
    forced = ops(tokenizer, "openai", PARTS_ONLY)
    assert forced.render_chat(MESSAGES, RenderOptions()) == auto.render_chat(
        MESSAGES, RenderOptions())
    # string: the template walks the string's characters and loses the text
    as_string = ops(tokenizer, "string", PARTS_ONLY).render_chat(MESSAGES, RenderOptions())
    assert text(tokenizer, as_string) == "<user></user>"


def test_auto_keeps_strings_for_a_string_template(tokenizer) -> None:
    string_template = tokenizer.chat_template
    auto = ops(tokenizer, "auto", string_template)
    assert auto.content_format(string_template, None) == "string"
    assert auto.render_chat(MESSAGES, RenderOptions()) == ops(
        tokenizer, "string", string_template).render_chat(MESSAGES, RenderOptions())
