"""vLLM 0.32's own server and tokenwire (serve + Envoy) side by side on the
demo model with `make run`'s parser flags (#45): the same REST bodies posted
to both, their answers compared.

Strict tools (item 1): with `strict: true` and a forced call (`tool_choice`
"required" or a named function) vLLM constrains the arguments with the
tool's parameter schema (its parser's structural tag); without `strict` it
constrains only the call's envelope. tokenwire gives the engine the same
constraint, so greedy answers are equal, on chat (unary and streamed), the
Responses API and the Messages API.
"""

from __future__ import annotations

import collections.abc
import json
from typing import Any

import httpx
import pytest

from bench.vllm_side import Pair, side_by_side
from tests.conftest import TESTS

pytestmark = pytest.mark.gateway

DEMO = TESTS.parent / ".models" / "SmolLM2-135M-Instruct"
ENGINE = ["--served-model-name", "m", "--enable-auto-tool-choice", "--tool-call-parser",
          "hermes", "--max-model-len", "2048", "--block-size", "32"]
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
          "additionalProperties": False}
ASK = [{"role": "user", "content": "What is the weather in Paris? Use the tool."}]
STRICTNESS = {"strict": {"strict": True}, "not strict": {"strict": False}, "unset": {}}


@pytest.fixture(scope="module")
def pair() -> collections.abc.Iterator[Pair]:
    if not (DEMO / "config.json").exists():
        pytest.skip("make model")
    with side_by_side(str(DEMO), ENGINE, kv_bytes=128 << 20,
                      log_name="test-vllm-side-by-side.log") as p:
        yield p


def _both(pair: Pair, path: str, body: dict[str, Any]) -> tuple[Any, Any]:
    body = {"model": "m", **body}
    a = httpx.post(f"{pair.vllm}{path}", json=body, timeout=300)
    b = httpx.post(f"{pair.tokenwire}{path}", json=body, timeout=300)
    assert (a.status_code, b.status_code) == (200, 200), (a.text[:400], b.text[:400])
    if body.get("stream"):
        return _sse(a.text), _sse(b.text)
    return a.json(), b.json()


def _sse(text: str) -> list[dict[str, Any]]:
    events = []
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[len("data: "):]))
    return events


def _chat_calls(answer: Any) -> list[tuple[str, str]]:
    if isinstance(answer, dict):  # unary
        calls = answer["choices"][0]["message"].get("tool_calls") or []
        return [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
    merged: dict[int, list[str]] = {}
    for chunk in answer:
        for choice in chunk.get("choices") or []:
            for tc in (choice.get("delta") or {}).get("tool_calls") or []:
                call = merged.setdefault(tc["index"], ["", ""])
                fn = tc.get("function") or {}
                call[0] += fn.get("name") or ""
                call[1] += fn.get("arguments") or ""
    return [(name, args) for _, (name, args) in sorted(merged.items())]


def _chat_tools(strictness: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": {
        "name": "get_weather", "description": "The weather in a city.", "parameters": PARAMS,
        **strictness}}]


CHOICES = {"required": "required",
           "named": {"type": "function", "function": {"name": "get_weather"}}}


@pytest.mark.parametrize(("strictness", "choice", "stream"), [
    ("strict", "required", False), ("strict", "named", False), ("strict", "required", True),
    ("not strict", "named", False), ("unset", "required", False), ("unset", "named", True)])
def test_chat_tool_arguments_equal_vllms(pair, strictness, choice, stream) -> None:
    body = {"messages": ASK, "tools": _chat_tools(STRICTNESS[strictness]),
            "tool_choice": CHOICES[choice], "temperature": 0, "max_tokens": 64,
            "stream": stream}
    theirs, ours = _both(pair, "/v1/chat/completions", body)
    assert _chat_calls(ours) == _chat_calls(theirs)
    calls = _chat_calls(ours)
    assert calls and calls[0][0] == "get_weather"
    if strictness == "strict":  # the schema's object, as vLLM makes it
        assert set(json.loads(calls[0][1])) == {"city"}
    if not stream:
        assert ours["usage"]["prompt_tokens"] == theirs["usage"]["prompt_tokens"]


@pytest.mark.parametrize("strictness", ["strict", "unset"])
def test_responses_tool_arguments_equal_vllms(pair, strictness) -> None:
    tools = [{"type": "function", "name": "get_weather", "description": "The weather in a city.",
              "parameters": PARAMS, **STRICTNESS[strictness]}]
    body = {"input": ASK[0]["content"], "tools": tools, "tool_choice": "required",
            "temperature": 0, "max_output_tokens": 64}
    theirs, ours = _both(pair, "/v1/responses", body)

    def calls(answer: dict[str, Any]) -> list[tuple[str, str]]:
        return [(o["name"], o["arguments"]) for o in answer["output"]
                if o["type"] == "function_call"]

    assert calls(ours) == calls(theirs) and calls(ours)
    if strictness == "strict":
        assert set(json.loads(calls(ours)[0][1])) == {"city"}


def test_messages_strict_tool_input_equals_vllms(pair) -> None:
    """vLLM's Anthropic front passes a tool's `strict` to the chat it runs."""
    tools = [{"name": "get_weather", "description": "The weather in a city.",
              "input_schema": PARAMS, "strict": True}]
    body = {"messages": ASK, "tools": tools, "tool_choice": {"type": "any"},
            "temperature": 0, "max_tokens": 64}
    theirs, ours = _both(pair, "/v1/messages", body)

    def uses(answer: dict[str, Any]) -> list[tuple[str, Any]]:
        return [(b["name"], b["input"]) for b in answer["content"] if b["type"] == "tool_use"]

    assert uses(ours) == uses(theirs)
    assert uses(ours) and set(uses(ours)[0][1]) == {"city"}


def test_messages_loose_tool_input_is_an_object(pair) -> None:
    """Not strict, the demo model's arguments are the JSON string "Paris":
    vLLM's Anthropic front then fails the whole answer with a 400 (a
    tool_use `input` must be an object); tokenwire answers the call with
    an empty `input` and keeps the ids (a deliberate difference, in
    docs/agents.md)."""
    tools = [{"name": "get_weather", "description": "The weather in a city.",
              "input_schema": PARAMS}]
    body = {"model": "m", "messages": ASK, "tools": tools, "tool_choice": {"type": "any"},
            "temperature": 0, "max_tokens": 64}
    theirs = httpx.post(f"{pair.vllm}/v1/messages", json=body, timeout=300)
    ours = httpx.post(f"{pair.tokenwire}/v1/messages", json=body, timeout=300)
    assert theirs.status_code == 400 and "input" in theirs.text
    assert ours.status_code == 200, ours.text
    uses = [b for b in ours.json()["content"] if b["type"] == "tool_use"]
    assert uses and uses[0]["name"] == "get_weather" and uses[0]["input"] == {}


# The keys (item 4, docs/contract.md "vLLM's response keys"): tokenwire
# leaves out only keys vLLM prints null (outside the contract, or an unset
# list field the REST JSON does not print as null), and adds only its
# documented extensions.
EXTENSIONS = {"choices[].weight_versions", "usage.prompt_tokens_details",
              "usage.prompt_tokens_details.cached_tokens",
              "choices[].logprobs.content[].token_id", "choices[].logprobs.token_ids",
              "choices[].logprobs.content[].top_logprobs[].token_id",
              "stop_sequence", "usage.cache_read_input_tokens"}  # (Anthropic prints both)
KEY_BODIES: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", {"messages": ASK, "max_tokens": 5}),
    "chat with ids": ("/v1/chat/completions", {
        "messages": ASK, "max_tokens": 5, "return_token_ids": True, "logprobs": True,
        "top_logprobs": 1, "prompt_logprobs": 1}),
    "chat streamed": ("/v1/chat/completions", {
        "messages": ASK, "max_tokens": 5, "stream": True,
        "stream_options": {"include_usage": True}}),
    "completion": ("/v1/completions", {"prompt": "Hello", "max_tokens": 5}),
    "completion with ids": ("/v1/completions", {
        "prompt": "Hello", "max_tokens": 5, "return_token_ids": True, "logprobs": 1,
        "prompt_logprobs": 1}),
    "completion streamed": ("/v1/completions", {
        "prompt": "Hello", "max_tokens": 5, "stream": True,
        "stream_options": {"include_usage": True}}),
    "messages": ("/v1/messages", {"messages": ASK, "max_tokens": 5}),
}


def _keys(value: Any, prefix: str = "") -> dict[str, Any]:
    """key path -> value, through objects and the first item of lists of objects."""
    out: dict[str, Any] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out[prefix + k] = v
            out.update(_keys(v, prefix + k + "."))
    elif isinstance(value, list) and value and isinstance(value[0], dict):
        out.update(_keys(value[0], prefix[:-1] + "[]."))
    return out


@pytest.mark.parametrize("name", list(KEY_BODIES))
def test_keys_differ_from_vllms_only_as_documented(pair, name) -> None:
    path, body = KEY_BODIES[name]
    theirs, ours = _both(pair, path, {**body, "temperature": 0})
    if body.get("stream"):  # the union over the stream's events
        theirs = {k: None for e in theirs for k in _keys(e)} | \
            {k: v for e in theirs for k, v in _keys(e).items() if v is not None}
        ours = {k: None for e in ours for k in _keys(e)}
    else:
        theirs, ours = _keys(theirs), _keys(ours)
    missing = {k: v for k, v in theirs.items() if k not in ours}
    # (a streamed key vLLM sets on one event and nulls on others counts as set)
    assert {k: v for k, v in missing.items() if v is not None} == {}, missing
    added = {k for k in set(ours) - set(theirs)
             if not any(k == e or k.startswith(e + ".") or k.startswith(e + "[].")
                        for e in EXTENSIONS)}
    assert added == set()


ECHO_ASK = [{"role": "user", "content": "Name a color."},
            {"role": "assistant", "content": "My favourite color is"}]


def _deltas(events: list[dict[str, Any]]) -> list[str | None]:
    return [(c.get("delta") or {}).get("content") for e in events for c in e.get("choices") or []]


@pytest.mark.parametrize("stream", [False, True])
def test_chat_echo_equals_vllms(pair, stream) -> None:
    """vLLM's chat `echo`: the continued message's text before the reply
    (unary: in the content, with the prompt's logprobs; streamed: the chunk
    after the role chunk)."""
    body = {"messages": ECHO_ASK, "add_generation_prompt": False,
            "continue_final_message": True, "echo": True, "temperature": 0, "max_tokens": 8,
            "stream": stream}
    theirs, ours = _both(pair, "/v1/chat/completions", body)
    if stream:
        assert "".join(d or "" for d in _deltas(ours)) == "".join(d or "" for d in _deltas(theirs))
        assert _deltas(ours)[:2] == _deltas(theirs)[:2] == ["", "My favourite color is"]
        return
    content = ours["choices"][0]["message"]["content"]
    assert content == theirs["choices"][0]["message"]["content"]
    assert content.startswith("My favourite color is")
    assert len(ours["prompt_logprobs"]) == len(theirs["prompt_logprobs"]) > 1


def test_reasoning_effort_equals_vllms(pair) -> None:
    """Chat's reasoning_effort: the same prompt and greedy ids as vLLM's
    server; a value outside vLLM's set is a 400 naming it on both."""
    body = {"messages": ASK, "reasoning_effort": "low", "max_tokens": 5, "temperature": 0,
            "return_token_ids": True}
    theirs, ours = _both(pair, "/v1/chat/completions", body)
    assert ours["prompt_token_ids"] == theirs["prompt_token_ids"]
    assert ours["choices"][0]["token_ids"] == theirs["choices"][0]["token_ids"]
    bad = {"model": "m", **body, "reasoning_effort": "extreme"}
    for url in (pair.vllm, pair.tokenwire):
        answer = httpx.post(f"{url}/v1/chat/completions", json=bad, timeout=300)
        assert answer.status_code == 400 and "reasoning_effort" in answer.text, answer.text


def test_text_parts_render_as_vllms(pair) -> None:
    """A message's text parts are joined as vLLM's chat parser joins them
    (by newlines, for a template taking string content): the same prompt ids."""
    parts = [{"type": "text", "text": "Name a color."}, {"type": "text", "text": "One word."}]
    body = {"messages": [{"role": "user", "content": parts}], "max_tokens": 1,
            "temperature": 0, "return_token_ids": True}
    theirs, ours = _both(pair, "/v1/chat/completions", body)
    assert ours["prompt_token_ids"] == theirs["prompt_token_ids"]


def test_token_in_chat_is_constrained_the_same(pair) -> None:
    """Token-in chat (nvext.token_data) with a strict tool: the same
    constraint, so the same greedy call as the messages it was rendered from."""
    body = {"model": "m", "messages": ASK, "tools": _chat_tools({"strict": True}),
            "tool_choice": "required", "temperature": 0, "max_tokens": 64,
            "return_token_ids": True}
    first = httpx.post(f"{pair.tokenwire}/v1/chat/completions", json=body, timeout=300).json()
    ids = first["prompt_token_ids"]
    again = httpx.post(f"{pair.tokenwire}/v1/chat/completions", timeout=300, json={
        **body, "messages": [], "nvext": {"token_data": ids}}).json()
    assert again["prompt_token_ids"] == ids
    assert _chat_calls(again) == _chat_calls(first)
    assert set(json.loads(_chat_calls(again)[0][1])) == {"city"}
