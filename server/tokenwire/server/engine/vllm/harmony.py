"""gpt-oss chats rendered as `vllm serve` renders them: not by the HF chat
template but as harmony messages built by vLLM's own harmony code (its
renderer's _make_request_with_harmony: the system preamble, a developer
message with the instructions and tools, the conversation, earlier
analysis dropped) and encoded by openai_harmony. That encoding needs the
o200k_base vocabulary file, which openai_harmony downloads unless
TIKTOKEN_ENCODINGS_BASE names a folder holding it (docs/engine.md).
Parsing is vLLM's HarmonyParser (engine/vllm/parsers.py)."""

from __future__ import annotations

from typing import Any

from tokenwire.server.core.domain import RenderOptions
from tokenwire.server.core.errors import InvalidArgument


def is_harmony(model_config: Any) -> bool:
    """vLLM's test: a gpt_oss model renders and parses harmony."""
    hf_config = getattr(model_config, "hf_config", None)
    return getattr(hf_config, "model_type", None) == "gpt_oss"


def render_harmony(messages: list[dict[str, Any]], options: RenderOptions) -> list[int]:
    """The prompt ids vLLM's chat renderer gives these messages, tools and
    reasoning effort (low, medium or high in the system message; "none" is
    refused, as vLLM's). The template flags do not apply: vLLM's harmony
    path always ends with the assistant's turn to write."""
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.entrypoints.openai.parser.harmony_utils import (
        build_harmony_preamble,
        extract_instructions_from_messages,
        parse_chat_inputs_to_harmony_messages,
        render_for_completion,
    )
    from vllm.exceptions import VLLMValidationError
    from vllm.utils.mistral import mt

    body: dict[str, Any] = {"model": "", "messages": messages}
    if options.tools:
        body["tools"] = options.tools
    try:
        request = ChatCompletionRequest.model_validate(body)
    except ValueError as exc:  # pydantic's ValidationError is one
        raise InvalidArgument(f"messages or tools: {exc}", param="messages",
                              reason="INVALID_FORMAT") from exc
    mt.maybe_serialize_tool_calls(request)  # type: ignore[arg-type]
    instructions, chat_messages = extract_instructions_from_messages(list(request.messages))
    tools = request.tools if options.tools else None
    if options.reasoning_effort == "none":
        raise InvalidArgument("reasoning_effort 'none': harmony (gpt-oss) models reason always; "
                              "use 'low', 'medium' or 'high'", param="reasoning_effort",
                              reason="VALUE_NOT_ALLOWED")
    try:
        harmony = build_harmony_preamble(instructions=instructions, tools=tools,  # type: ignore[arg-type]
                                         reasoning_effort=options.reasoning_effort,
                                         with_custom_tools=tools is not None)
        harmony.extend(parse_chat_inputs_to_harmony_messages(chat_messages))
    except VLLMValidationError as exc:
        raise InvalidArgument(str(exc), param=exc.parameter or "messages",
                              reason="VALUE_NOT_ALLOWED") from exc
    return list(render_for_completion(harmony))
