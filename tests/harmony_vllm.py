"""What vLLM itself makes of a gpt-oss (harmony) request, called in-process
for the harmony tests to compare tokenwire with: the prompt ids of its chat
renderer (_make_request_with_harmony), its HarmonyParser's parse of output
ids (ParserManager's parser for `--tool-call-parser openai
--reasoning-parser openai_gptoss`), and the Responses output items its
Responses server builds for gpt-oss (HarmonyContext over the output ids,
then harmony_to_response_output per harmony message, the status as
responses_full_generator sets it). Needs openai_harmony's vocabulary
(tests/harmony_vocab.py)."""

from __future__ import annotations

import types
from typing import Any

# A gpt-oss model's vLLM model config, as the parsers read it.
GPT_OSS = types.SimpleNamespace(hf_config=types.SimpleNamespace(model_type="gpt_oss"),
                                model="gpt-oss")


def harmony_ids(text: str) -> list[int]:
    """Harmony text (special tokens spelled out) as o200k_harmony ids."""
    from vllm.entrypoints.openai.parser.harmony_utils import get_encoding

    return list(get_encoding().encode(text, allowed_special="all"))


def vllm_chat_prompt(messages: list[dict[str, Any]], tools: Any, **fields: Any) -> list[int]:
    """vLLM's chat renderer's own harmony path over vLLM's request (`fields`:
    more of its body, e.g. reasoning_effort)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.renderers.online_renderer import OnlineRenderer

    body: dict[str, Any] = {"model": "", "messages": [dict(m) for m in messages], **fields}
    if tools:
        body["tools"] = tools
    request = ChatCompletionRequest.model_validate(body)
    renderer = types.SimpleNamespace(supports_browsing=False, supports_code_interpreter=False,
                                     renderer=None)
    _, [engine_input] = OnlineRenderer._make_request_with_harmony(
        renderer, request, tools is not None)  # type: ignore[arg-type]
    return list(engine_input["prompt_token_ids"])


def vllm_harmony_parser(tokenizer: Any) -> Any:
    """A fresh HarmonyParser as vLLM's servers build it for gpt-oss."""
    from vllm.parser.parser_manager import ParserManager

    parser_cls = ParserManager.get_parser(
        tool_parser_name="openai", reasoning_parser_name="openai_gptoss",
        enable_auto_tools=True, is_harmony=True)
    assert parser_cls is not None and parser_cls.__name__ == "HarmonyParser"
    return parser_cls(tokenizer, None)


def vllm_parse(tokenizer: Any, ids: list[int]) -> tuple[str | None, str | None,
                                                         list[tuple[str, str]]]:
    """vLLM's chat parse of generated ids: reasoning, content, (name, arguments)."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest

    request = ChatCompletionRequest.model_validate({"model": "", "messages": []})
    reasoning, content, calls = vllm_harmony_parser(tokenizer).parse(
        "", request, enable_auto_tools=True, model_output_token_ids=ids)
    return reasoning, content, [(c.name, c.arguments) for c in calls or ()]


def vllm_response_items(tokenizer: Any, ids: list[int], finish_reason: str,
                        tool_names: frozenset[str] = frozenset()
                        ) -> tuple[list[dict[str, Any]], str]:
    """The output items and status vLLM's Responses server gives a gpt-oss
    turn that generated `ids` (one engine output, finished): items as dicts
    (OpenAI's models dumped)."""
    from vllm.entrypoints.openai.responses.context import HarmonyContext
    from vllm.entrypoints.openai.responses.harmony import harmony_to_response_output

    context = HarmonyContext([], [], tool_names, response_parser=vllm_harmony_parser(tokenizer))
    completion = types.SimpleNamespace(token_ids=list(ids), finish_reason=finish_reason)
    context.append_output(types.SimpleNamespace(  # type: ignore[arg-type]
        outputs=[completion], finished=True, prompt_token_ids=[1], num_cached_tokens=0,
        num_cache_creation_tokens=0, kv_transfer_params=None, ec_transfer_params=None))
    messages = context.messages[context.num_init_messages:]
    items = []
    for i, msg in enumerate(messages):
        last = i == len(messages) - 1
        items.extend(harmony_to_response_output(
            msg, tool_names, incomplete=last and context.last_append_flush_status))
    status = "completed"
    if not items or finish_reason == "length":
        status = "incomplete"
    return [item.model_dump() for item in items], status


def vllm_responses_prompt(body: dict[str, Any], max_model_len: int = 2048) -> list[int]:
    """The prompt ids vLLM's Responses server renders for gpt-oss
    (its renderer's _render_responses_with_harmony, no earlier response)."""
    from vllm.entrypoints.openai.parser.harmony_utils import render_for_completion
    from vllm.entrypoints.openai.responses.protocol import ResponsesRequest
    from vllm.renderers.online_renderer import OnlineRenderer

    request = ResponsesRequest.model_validate({"model": "", **body})
    owner = types.SimpleNamespace(
        adjust_harmony_request=lambda request: None,
        model_config=types.SimpleNamespace(max_model_len=max_model_len),
        render_responses_harmony_messages=lambda messages, **_: {
            "prompt_token_ids": render_for_completion(messages)},
    )
    owner._get_harmony_builtin_tool_descriptions = (  # (no tool server: none)
        lambda tools, types_, server: OnlineRenderer._get_harmony_builtin_tool_descriptions(
            owner, tools, types_, server))  # type: ignore[arg-type]
    result = OnlineRenderer._render_responses_with_harmony(
        owner, request, previous_messages=None,  # type: ignore[arg-type]
        previous_response_outputs=None, tool_server=None)
    return list(result.engine_input["prompt_token_ids"])  # type: ignore[union-attr]
