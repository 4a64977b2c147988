"""Turn templates: what a chat template renders after an assistant
completion, probed once per rendering configuration (FakeEngine: ChatML)."""

from __future__ import annotations

from typing import Any

import pytest

from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.engine.fake.engine import IM_END, IM_START, FakeEngine
from tokenwire.server.inference.turns import TurnTemplate, TurnTemplates

ENGINE = FakeEngine(max_model_len=512)
NL = ENGINE.encode("\n", add_special_tokens=False)[0]


def test_after_skips_the_end_of_turn_id_the_completion_already_has() -> None:
    t = TurnTemplate(closed=(1, 2, 3), close_ids=(IM_END, NL))
    assert t.after([40, 41]) == [IM_END, NL]
    assert t.after([40, IM_END]) == [NL]
    assert t.after([]) == [IM_END, NL]


def test_chatml_probe_and_suffix_match_a_full_render() -> None:
    turns = TurnTemplates(ENGINE)
    opts = RenderOptions()
    assert turns.get(opts).close_ids == (IM_END, NL)
    completion = ENGINE.encode("Sure.", add_special_tokens=False)
    nxt = [{"role": "user", "content": "And then?"}]
    suffix = turns.suffix(opts, completion, nxt)
    # prompt + completion + suffix == the whole conversation rendered at once
    history = [{"role": "user", "content": "Hi"}]
    prompt = ENGINE.render_chat(history, opts)
    whole = ENGINE.render_chat([*history, {"role": "assistant", "content": "Sure."}, *nxt], opts)
    assert prompt + completion + suffix == whole
    assert suffix[:2] == [IM_END, NL] and suffix[2] == IM_START


def test_templates_are_probed_once_per_configuration() -> None:
    calls: list[RenderOptions] = []

    class Counting(FakeEngine):
        def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
            calls.append(options)
            return super().render_chat(messages, options)

    turns = TurnTemplates(Counting(max_model_len=512))
    a = turns.get(RenderOptions())
    assert len(calls) == 2  # closed and open placeholder
    assert turns.get(RenderOptions(add_generation_prompt=False)) is a  # flags are not the key
    assert len(calls) == 2
    turns.get(RenderOptions(template_kwargs={"x": 1}))
    assert len(calls) == 4


def test_a_template_that_is_not_incremental_is_refused_with_the_field() -> None:
    class Rewriting(FakeEngine):  # closing the turn rewrites what came before
        def render_chat(self, messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
            ids = super().render_chat(messages, options)
            return ids if options.continue_final_message else [7, *ids]

    with pytest.raises(InvalidArgument) as exc:
        TurnTemplates(Rewriting(max_model_len=512)).get(RenderOptions())
    assert exc.value.param == "continuation.messages"
    assert "continuation.suffix_token_ids" in exc.value.message


def test_cache_keys_are_digests_of_bounded_size() -> None:
    """The cache keeps 64 configurations: keyed by a digest, not the text of
    their tools (which may be megabytes) (issue #32 item 9)."""
    def tools(description: str) -> RenderOptions:
        return RenderOptions(tools=[{"type": "function", "function": {
            "name": "f", "description": description}}])

    big = TurnTemplates.key(tools("d" * 1_000_000))
    assert len(big) == len(TurnTemplates.key(RenderOptions())) == 64
    assert big == TurnTemplates.key(tools("d" * 1_000_000))  # the same configuration
    assert big != TurnTemplates.key(tools("d" * 999_999 + "e"))
    assert TurnTemplates.key(RenderOptions(chat_template="T" * 100_000)) != TurnTemplates.key(
        RenderOptions(chat_template="T" * 100_001))
