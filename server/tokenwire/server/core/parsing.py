"""Parsing generated text into reasoning, content and tool calls: the types
and protocols the chat kind reads (ChatParsers, made by Engine.chat_parsers
from the server's ParserConfig). vLLM's parsers implement them in
engine/vllm/parsers.py, a Hermes + <think> double in engine/fake/parsers.py.
Text only: token ids, logprobs and weight spans go out as the engine gave
them, whatever the parsers do with the text. Nothing here imports vLLM."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol


class Sampling(Protocol):
    """The sampling fields the parsers may change (core/domain.py's
    GenerationParams; not imported: domain's Engine names this module)."""

    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    structured: Any  # a StructuredOutput, or None


@dataclasses.dataclass(frozen=True)
class ParserConfig:
    """The server's parser flags, as vLLM spells them."""

    tool_call_parser: str = ""  # --tool-call-parser ("": none)
    enable_auto_tool_choice: bool = False  # --enable-auto-tool-choice
    reasoning_parser: str = ""  # --reasoning-parser ("": none)


@dataclasses.dataclass
class ParseSpec:
    """What the parsers read from one chat request."""

    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None  # None: not given
    parallel_tool_calls: bool | None = None
    template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class ParsedToolCall:
    id: str
    name: str
    arguments: str  # JSON text


@dataclasses.dataclass
class ParsedMessage:
    """A complete choice's text, parsed. `tool_finish`: a "stop" finish is
    reported as "tool_calls" (vLLM: auto calls made, or tool_choice required)."""

    reasoning: str | None
    content: str | None
    tool_calls: list[ParsedToolCall]
    tool_finish: bool = False


@dataclasses.dataclass
class ToolCallDelta:
    """A streamed piece of a tool call (vLLM's DeltaToolCall): the first
    piece of a call carries its id and name, later ones argument text."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str | None = None


@dataclasses.dataclass
class ParsedDelta:
    reasoning: str | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] = dataclasses.field(default_factory=list)


class ChoiceParser(Protocol):
    """Parses one choice's text as it streams (stateful: one per choice)."""

    def delta(self, text: str, ids: list[int], *, finished: bool) -> ParsedDelta | None:
        """The parsed text of the next delta; None: nothing to release yet
        (text held back, such as a partial tool-call tag)."""
        ...

    @property
    def tool_finish(self) -> bool:
        """A "stop" finish is reported as "tool_calls"."""
        ...


class RequestParsers(Protocol):
    """One chat request's parsing, made by ChatParsers.for_request."""

    def adjust(self, params: Sampling) -> None:
        """What the parsers change in the sampling (vLLM's adjust_request):
        structured outputs for tool_choice "required" or a named function,
        special tokens kept in the text where the format needs them."""
        ...

    def engine_reasoning(self, prompt_ids: list[int]
                         ) -> tuple[bool | None, dict[str, Any] | None]:
        """vLLM's `reasoning_ended` and `reasoning_parser_kwargs` for the
        engine (where structured outputs start, with a reasoning parser)."""
        ...

    def stream_parser(self, prompt_ids: list[int]) -> ChoiceParser: ...

    def parse(self, text: str, ids: list[int], prompt_ids: list[int]) -> ParsedMessage: ...


class ChatParsers(Protocol):
    """The server's configured parsers (--tool-call-parser, --reasoning-parser)."""

    def for_request(self, spec: ParseSpec) -> RequestParsers | None:
        """The parsing of one request; None: nothing to parse (no parser
        configured). Raises InvalidArgument where vLLM answers 400 (a
        tool_choice the flags do not allow)."""
        ...
