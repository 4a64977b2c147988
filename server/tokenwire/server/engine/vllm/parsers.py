"""vLLM's tool-call and reasoning parsers behind the domain's ChatParsers
(core/domain.py). vLLM's ParserManager composes --tool-call-parser and
--reasoning-parser into its unified Parser, driven here as vLLM's chat
serving drives it: `parse` for a whole choice, `parse_delta` per streamed
delta; with its request shaping (`adjust_request`: structured outputs for
tool_choice "required" or a named function, special tokens kept in the
text where a format needs them), its tool-call ids, its finish reasons and
its parallel_tool_calls filter. Text only: token ids are read, never
changed or held back (the chat kind sends them as they arrive).
"""

from __future__ import annotations

import json
from typing import Any

from tokenwire.server.core.domain import GenerationParams, StructuredOutput
from tokenwire.server.core.errors import InvalidArgument
from tokenwire.server.core.parsing import (
    ParsedDelta,
    ParsedMessage,
    ParsedToolCall,
    ParserConfig,
    ParseSpec,
    ToolCallDelta,
)


def tool_parser_names() -> list[str]:
    """Every --tool-call-parser name vLLM registers (plugins included)."""
    from vllm.tool_parsers import ToolParserManager

    return sorted(ToolParserManager.list_registered())


def reasoning_parser_names() -> list[str]:
    """Every --reasoning-parser name vLLM registers (plugins included)."""
    from vllm.reasoning import ReasoningParserManager

    return sorted(ReasoningParserManager.list_registered())


def import_plugins(tool_parser_plugin: str, reasoning_parser_plugin: str) -> None:
    """Register the parsers of --tool-parser-plugin / --reasoning-parser-plugin
    (as `vllm serve` does, before the names are checked)."""
    if tool_parser_plugin:
        from vllm.tool_parsers import ToolParserManager

        ToolParserManager.import_tool_parser(tool_parser_plugin)
    if reasoning_parser_plugin:
        from vllm.reasoning import ReasoningParserManager

        ReasoningParserManager.import_reasoning_parser(reasoning_parser_plugin)


def check_names(config: ParserConfig) -> str | None:
    """Why the flags cannot start the server (vLLM's checks), or None."""
    if config.enable_auto_tool_choice and not config.tool_call_parser:
        return "--enable-auto-tool-choice requires --tool-call-parser"
    if config.tool_call_parser and config.tool_call_parser not in tool_parser_names():
        return (f"invalid tool call parser: {config.tool_call_parser} (choose from "
                f"{', '.join(tool_parser_names())}, or a name --tool-parser-plugin registers)")
    if config.reasoning_parser and config.reasoning_parser not in reasoning_parser_names():
        return (f"invalid reasoning parser: {config.reasoning_parser} (choose from "
                f"{', '.join(reasoning_parser_names())}, or a name --reasoning-parser-plugin "
                "registers)")
    return None


# An earlier turn's tool call as vLLM's history count reads it (counted only).
_HISTORY_CALL = {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}


class VllmChatParsers:
    """The configured parsers over the engine's tokenizer (one per server)."""

    def __init__(self, config: ParserConfig, tokenizer: Any, model_config: Any = None):
        from vllm.parser import ParserManager
        from vllm.renderers.chat_utils import get_tool_call_id_type

        self.config = config
        self.tokenizer = tokenizer
        self.model_config = model_config
        hf_config = getattr(model_config, "hf_config", None)
        self.harmony = getattr(hf_config, "model_type", None) == "gpt_oss"  # HarmonyParser
        self.parser_cls = ParserManager.get_parser(
            tool_parser_name=config.tool_call_parser or None,
            reasoning_parser_name=config.reasoning_parser or None,
            enable_auto_tools=config.enable_auto_tool_choice,
            model_name=getattr(model_config, "model", None),
            is_harmony=self.harmony,
            tool_strict_level=config.tool_strict_level,
            tokenizer=tokenizer,
        )
        # vLLM parses tool calls only with --enable-auto-tool-choice and a parser.
        self.tool_parsing = (self.parser_cls is not None
                             and self.parser_cls.tool_parser_cls is not None)
        # Kimi models' tool-call ids ("functions.NAME:IDX", IDX counting the
        # conversation's calls) where vLLM gives them (get_tool_call_id_type).
        self.kimi_ids = (model_config is not None
                         and get_tool_call_id_type(model_config) == "kimi_k2")

    def for_request(self, spec: ParseSpec) -> VllmRequestParsers | None:
        choice = spec.tool_choice
        if choice is None and spec.tools:
            choice = "auto"  # vLLM's default when tools are given
        if not self.tool_parsing and choice not in (None, "none"):
            # vLLM's answers (renderers/online_renderer.py), word for word.
            if choice == "auto":
                raise InvalidArgument(
                    '"auto" tool choice requires --enable-auto-tool-choice and '
                    "--tool-call-parser to be set", param="tool_choice",
                    reason="FEATURE_DISABLED")
            desc = (f'function "{choice["function"]["name"]}"' if isinstance(choice, dict)
                    else f'"{choice}"')
            raise InvalidArgument(f"tool_choice={desc} requires --tool-call-parser to be set",
                                  param="tool_choice", reason="FEATURE_DISABLED")
        if self.parser_cls is None:
            return None
        return VllmRequestParsers(self, spec)


class VllmRequestParsers:
    """One request: vLLM's ChatCompletionRequest as the parsers read it."""

    def __init__(self, parsers: VllmChatParsers, spec: ParseSpec):
        from vllm.entrypoints.openai.chat_completion.protocol import (
            ChatCompletionNamedToolChoiceParam,
            ChatCompletionRequest,
        )

        self.parsers = parsers
        self.harmony = parsers.harmony  # (the Responses front builds vLLM's harmony items)
        body: dict[str, Any] = {"model": "", "messages": []}
        if spec.tools:
            body["tools"] = spec.tools
        if spec.tool_choice is not None:
            body["tool_choice"] = spec.tool_choice
        if spec.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = spec.parallel_tool_calls
        if spec.template_kwargs:
            body["chat_template_kwargs"] = spec.template_kwargs
        if not spec.include_reasoning:
            body["include_reasoning"] = False
        if spec.history_tool_calls and parsers.kimi_ids:
            # vLLM counts the earlier turns' calls from request.messages
            # (count_history_tool_calls), the only field its parsers read
            # there: the count, as calls of one earlier assistant message.
            body["messages"] = [{"role": "assistant",
                                 "tool_calls": [_HISTORY_CALL] * spec.history_tool_calls}]
        try:
            self.request = ChatCompletionRequest.model_validate(body)
        except ValueError as exc:  # pydantic's ValidationError is one
            raise InvalidArgument(f"tools or tool_choice: {exc}", param="tools",
                                  reason="INVALID_FORMAT") from exc
        self.template_kwargs = spec.template_kwargs
        self.named = isinstance(self.request.tool_choice, ChatCompletionNamedToolChoiceParam)
        self.required = self.request.tool_choice == "required"
        self.single_call = self.request.parallel_tool_calls is False

    def new_parser(self) -> Any:
        p = self.parsers
        assert p.parser_cls is not None
        return p.parser_cls(p.tokenizer, self.request.tools,  # type: ignore[arg-type]
                            chat_template_kwargs=self.template_kwargs or None,
                            model_config=p.model_config)

    def adjust(self, params: GenerationParams) -> None:
        p = self.parsers
        assert p.parser_cls is not None
        request = self.request
        if not (p.parser_cls.always_adjust_request or p.parser_cls.reasoning_parser_cls
                or request.tool_choice != "none"):
            return
        request = request.model_copy(update={
            "skip_special_tokens": params.skip_special_tokens,
            "spaces_between_special_tokens": params.spaces_between_special_tokens,
        })
        request = self.new_parser().adjust_request(request)
        self.request = request  # resolve_reasoning_ended reads what adjust_request set
        params.skip_special_tokens = bool(request.skip_special_tokens)
        params.spaces_between_special_tokens = bool(request.spaces_between_special_tokens)
        so = request.structured_outputs
        if so is None:
            return
        if so.json is not None:  # "required" or a named function: JSON of the call(s)
            schema = json.loads(so.json) if isinstance(so.json, str) else so.json
            params.structured = StructuredOutput(json_schema=schema)
        elif so.structural_tag is not None:  # VLLM_ENFORCE_STRICT_TOOL_CALLING
            params.structured = StructuredOutput(structural_tag=so.structural_tag)
        elif so.json_object:
            params.structured = StructuredOutput(json_object=True)

    def engine_reasoning(self, prompt_ids: list[int]
                         ) -> tuple[bool | None, dict[str, Any] | None]:
        """As vLLM's chat serving's _engine_reasoning_kwargs."""
        parser = self.new_parser()
        if parser.reasoning_parser is None:
            return self.request.resolve_reasoning_ended(parser, prompt_ids), None
        kwargs = {"chat_template_kwargs": dict(self.template_kwargs)}
        return self.request.resolve_reasoning_ended(parser, prompt_ids), kwargs

    def stream_parser(self, prompt_ids: list[int]) -> VllmStreamParser:
        return VllmStreamParser(self, self.new_parser(), prompt_ids)

    def parse(self, text: str, ids: list[int], prompt_ids: list[int]) -> ParsedMessage:
        """As vLLM's chat_completion_full_generator shapes the message."""
        from vllm.renderers.chat_utils import make_tool_call_id

        parser = self.new_parser()
        parser.set_prompt_token_ids(prompt_ids)
        auto = self.parsers.tool_parsing
        request = self.request
        reasoning, content, calls = parser.parse(text, request, enable_auto_tools=auto,
                                                 model_output_token_ids=ids)
        tool_calls: list[Any] = []
        auto_called = False
        if self.named or self.required:
            content, tool_calls = content or "", list(calls or [])
        elif request.tools and request.tool_choice == "auto" and auto:
            tool_calls = list(calls or [])
            auto_called = bool(tool_calls)
        if self.single_call:
            tool_calls = tool_calls[:1]
        return ParsedMessage(
            reasoning, content,
            [ParsedToolCall(tc.id or make_tool_call_id(), tc.name, tc.arguments)
             for tc in tool_calls],
            tool_finish=auto_called or self.required,
        )


    def count_reasoning_tokens(self, ids: list[int]) -> int | None:
        """vLLM's count (its chat serving's, over a choice's generated ids);
        None without a reasoning parser (no completion_tokens_details)."""
        p = self.parsers
        if p.parser_cls is None or p.parser_cls.reasoning_parser_cls is None:
            return None
        return int(self.new_parser().count_reasoning_tokens(tuple(ids)))


class VllmStreamParser:
    """One choice's stream: vLLM's Parser.parse_delta per delta."""

    def __init__(self, owner: VllmRequestParsers, parser: Any, prompt_ids: list[int]):
        self._owner = owner
        self._parser = parser
        self._request = owner.request
        self._prompt_ids = prompt_ids
        self._tools_streamed = False

    @property
    def tool_finish(self) -> bool:
        return self._tools_streamed and not self._owner.named

    def delta(self, text: str, ids: list[int], *, finished: bool) -> ParsedDelta | None:
        dm = self._parser.parse_delta(delta_text=text, delta_token_ids=list(ids),
                                      request=self._request, prompt_token_ids=self._prompt_ids,
                                      finished=finished)
        if dm is None:
            return None
        calls = dm.tool_calls or []
        if calls:
            self._tools_streamed = True
            if self._owner.single_call:
                calls = [tc for tc in calls if tc.index == 0]
        return ParsedDelta(
            dm.reasoning, dm.content,
            [ToolCallDelta(tc.index, tc.id,
                           tc.function.name if tc.function is not None else None,
                           tc.function.arguments if tc.function is not None else None)
             for tc in calls],
        )
