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
    # --tool-strict-level: vLLM's floor for tool-call structural tags (auto,
    # function, parameter); the vLLM parsers read it, the fake ignores it.
    tool_strict_level: str = "auto"


@dataclasses.dataclass
class ParseSpec:
    """What the parsers read from one chat request."""

    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None  # None: not given
    parallel_tool_calls: bool | None = None
    template_kwargs: dict[str, Any] = dataclasses.field(default_factory=dict)
    include_reasoning: bool = True  # vLLM's request field (false: reasoning text left out)
    # Tool calls of the conversation's earlier assistant turns: vLLM's kimi
    # ids ("functions.NAME:IDX") count on from them (parser/utils.py).
    history_tool_calls: int = 0


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

    def count_reasoning_tokens(self, ids: list[int]) -> int | None:
        """The generated ids inside the reasoning section, as the reasoning
        parser counts them (vLLM's count_reasoning_tokens); None: no
        reasoning parser (vLLM then prints no completion_tokens_details)."""
        ...


class ChatParsers(Protocol):
    """The server's configured parsers (--tool-call-parser, --reasoning-parser)."""

    def for_request(self, spec: ParseSpec) -> RequestParsers | None:
        """The parsing of one request; None: nothing to parse (no parser
        configured). Raises InvalidArgument where vLLM answers 400 (a
        tool_choice the flags do not allow)."""
        ...


class _HiddenReasoningChoice:
    """A choice's stream parser with its reasoning text dropped: a delta of
    reasoning alone becomes None (nothing released, as vLLM's parse_delta)."""

    def __init__(self, inner: ChoiceParser):
        self._inner = inner

    def delta(self, text: str, ids: list[int], *, finished: bool) -> ParsedDelta | None:
        out = self._inner.delta(text, ids, finished=finished)
        if out is None or out.reasoning is None:
            return out
        if out.content is None and not out.tool_calls:
            return None
        return dataclasses.replace(out, reasoning=None)

    @property
    def tool_finish(self) -> bool:
        return self._inner.tool_finish


class HiddenReasoning:
    """A request's parsing with `include_reasoning: false` (vLLM's request
    field): the reasoning is generated and parsed but its text is left out
    of messages and deltas, and structured outputs apply from the first
    generated token (vLLM's resolve_reasoning_ended). Text only, as all
    parsing: token ids and logprobs still go out when asked (vLLM drops
    them with the reasoning; tokenwire's contract is every sampled id)."""

    def __init__(self, inner: RequestParsers):
        self._inner = inner

    def adjust(self, params: Sampling) -> None:
        self._inner.adjust(params)

    def engine_reasoning(self, prompt_ids: list[int]
                         ) -> tuple[bool | None, dict[str, Any] | None]:
        return True, self._inner.engine_reasoning(prompt_ids)[1]

    def stream_parser(self, prompt_ids: list[int]) -> ChoiceParser:
        return _HiddenReasoningChoice(self._inner.stream_parser(prompt_ids))

    def parse(self, text: str, ids: list[int], prompt_ids: list[int]) -> ParsedMessage:
        return dataclasses.replace(self._inner.parse(text, ids, prompt_ids), reasoning=None)

    def count_reasoning_tokens(self, ids: list[int]) -> int | None:
        return self._inner.count_reasoning_tokens(ids)  # (generated, counted: text only hidden)
