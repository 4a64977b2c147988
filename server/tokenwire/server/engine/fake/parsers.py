"""The fake engine's parsers (a test double of engine/vllm/parsers.py):
Hermes-style tool calls (`<tool_call>{"name": ..., "arguments": ...}</tool_call>`)
and `<think>…</think>` reasoning, unary and streamed, shaped like vLLM's
(ids "chatcmpl-tool-…", finish "tool_calls", the 400s without the flags).
Any --tool-call-parser / --reasoning-parser name turns them on; text only."""

from __future__ import annotations

import json
import uuid
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

OPEN, CLOSE = "<tool_call>", "</tool_call>"
THINK, UNTHINK = "<think>", "</think>"


def _call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


def _block(body: str) -> ParsedToolCall | None:
    try:
        data = json.loads(body.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    args = data.get("arguments", data.get("parameters", {}))
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ParsedToolCall(_call_id(), data["name"], arguments)


def _partial(text: str, token: str) -> int:
    """Length of the longest tail of text that is a proper prefix of token."""
    for n in range(min(len(token) - 1, len(text)), 0, -1):
        if text.endswith(token[:n]):
            return n
    return 0


def split_reasoning(text: str) -> tuple[str | None, str]:
    stripped = text.lstrip()
    if not stripped.startswith(THINK):
        return None, text
    body = stripped[len(THINK):]
    cut = body.find(UNTHINK)
    if cut < 0:  # cut off while thinking
        return body, ""
    return body[:cut], body[cut + len(UNTHINK):].lstrip("\n")


def split_calls(text: str) -> tuple[str, list[ParsedToolCall]]:
    content: list[str] = []
    calls: list[ParsedToolCall] = []
    rest = text
    while True:
        start, end = rest.find(OPEN), rest.find(CLOSE, max(rest.find(OPEN), 0))
        if start < 0 or end < 0:
            content.append(rest)
            break
        call = _block(rest[start + len(OPEN):end])
        content.append(rest[:end + len(CLOSE)] if call is None else rest[:start])
        if call is not None:
            calls.append(call)
        rest = rest[end + len(CLOSE):]
    return "".join(content), calls


class FakeChatParsers:
    def __init__(self, config: ParserConfig):
        self.config = config
        self.tools = bool(config.enable_auto_tool_choice and config.tool_call_parser)
        self.reasoning = bool(config.reasoning_parser)

    def for_request(self, spec: ParseSpec) -> FakeRequestParsers | None:
        choice = spec.tool_choice
        if choice is None and spec.tools:
            choice = "auto"
        if not self.tools and choice not in (None, "none"):
            raise InvalidArgument(
                '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                "to be set" if choice == "auto" else "tool_choice requires --tool-call-parser",
                param="tool_choice", reason="FEATURE_DISABLED")
        if not (self.tools or self.reasoning):
            return None
        return FakeRequestParsers(self, spec, choice)


class FakeRequestParsers:
    def __init__(self, parsers: FakeChatParsers, spec: ParseSpec, choice: Any):
        self.reasoning = parsers.reasoning
        self.tools = parsers.tools and choice not in (None, "none")
        self.named = choice["function"]["name"] if isinstance(choice, dict) else None
        self.required = choice == "required"
        self.single = spec.parallel_tool_calls is False
        self.spec = spec

    def adjust(self, params: GenerationParams) -> None:
        if self.named is not None:  # like vLLM: the function's arguments as JSON
            tool = next(t for t in self.spec.tools or [] if t["function"]["name"] == self.named)
            params.structured = StructuredOutput(
                json_schema=tool["function"].get("parameters") or {"type": "object"})

    def engine_reasoning(self, prompt_ids: list[int]
                         ) -> tuple[bool | None, dict[str, Any] | None]:
        return None, None

    def stream_parser(self, prompt_ids: list[int]) -> FakeStreamParser:
        return FakeStreamParser(self)

    def parse(self, text: str, ids: list[int], prompt_ids: list[int]) -> ParsedMessage:
        reasoning, content = split_reasoning(text) if self.reasoning else (None, text)
        if not self.tools:
            return ParsedMessage(reasoning, content, [])
        if self.named is not None:
            calls = [ParsedToolCall(_call_id(), self.named, content)] if content.strip() else []
            return ParsedMessage(reasoning, "", calls)
        rest, calls = split_calls(content)
        if self.single:
            calls = calls[:1]
        if calls:
            return ParsedMessage(reasoning, rest.strip() or None, calls, tool_finish=True)
        return ParsedMessage(reasoning, content, [], tool_finish=self.required)


    def count_reasoning_tokens(self, ids: list[int]) -> int | None:
        """The byte tokens between <think> and </think> (to the end when cut
        off), markers excluded, as vLLM's start/end counting; None without
        a reasoning parser."""
        if not self.reasoning:
            return None
        text = bytes(t - 3 for t in ids if 3 <= t < 259)
        start = text.find(THINK.encode())
        if start < 0:
            return 0
        start += len(THINK)
        end = text.find(UNTHINK.encode(), start)
        return (len(text) if end < 0 else end) - start


class FakeStreamParser:
    def __init__(self, owner: FakeRequestParsers):
        self.owner = owner
        self.state = "undecided" if owner.reasoning else "content"
        self.buf = ""
        self.calls = 0
        self._skip_newlines = False

    @property
    def tool_finish(self) -> bool:
        return self.calls > 0 and self.owner.named is None

    def delta(self, text: str, ids: list[int], *, finished: bool) -> ParsedDelta | None:
        self.buf += text
        out = ParsedDelta()
        if self.state == "undecided":
            head = self.buf.lstrip()
            if head.startswith(THINK):
                self.state, self.buf = "reasoning", head[len(THINK):]
            elif THINK.startswith(head) and not finished:
                return None
            else:
                self.state = "content"
        if self.state == "reasoning":
            cut = self.buf.find(UNTHINK)
            if cut < 0:
                keep = 0 if finished else _partial(self.buf, UNTHINK)
                cut = len(self.buf) - keep
                out.reasoning, self.buf = self.buf[:cut], self.buf[cut:]
            else:
                out.reasoning, self.buf = self.buf[:cut], self.buf[cut + len(UNTHINK):]
                self.state, self._skip_newlines = "content", True
        if self.state == "content":
            if self._skip_newlines:
                self.buf = self.buf.lstrip("\n")
                self._skip_newlines = not self.buf
            out.content = self._content(finished, out.tool_calls)
        if not out.reasoning and not out.content and not out.tool_calls:
            return None
        return out

    def _content(self, finished: bool, calls: list[ToolCallDelta]) -> str:
        if not self.owner.tools:
            whole, self.buf = self.buf, ""
            return whole
        if self.owner.named is not None:  # the whole output is the arguments
            if finished and self.buf.strip():
                calls.append(ToolCallDelta(0, _call_id(), self.owner.named, self.buf))
                self.buf, self.calls = "", 1
            return ""
        text: list[str] = []
        while self.buf:
            start = self.buf.find(OPEN)
            if start < 0:
                keep = 0 if finished else _partial(self.buf, OPEN)
                text.append(self.buf[:len(self.buf) - keep])
                self.buf = self.buf[len(self.buf) - keep:]
                break
            text.append(self.buf[:start])
            end = self.buf.find(CLOSE, start)
            if end < 0:
                if finished:
                    text.append(self.buf)
                    self.buf = ""
                else:
                    self.buf = self.buf[start:]
                break
            call = _block(self.buf[start + len(OPEN):end])
            if call is None:
                text.append(self.buf[start:end + len(CLOSE)])
            elif not (self.owner.single and self.calls):
                calls.append(ToolCallDelta(self.calls, call.id, call.name, call.arguments))
                self.calls += 1
            self.buf = self.buf[end + len(CLOSE):]
        return "".join(text)
