"""Tool-call parsing of generated text, Hermes style:

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

(the format of Hermes, Qwen 2.5/3 and SmolLM3 chat templates). Only text
is parsed; token ids are never held back or changed. Used when the request
has tools and tool_choice is not "none".
"""

from __future__ import annotations

import dataclasses
import json
import uuid

OPEN, CLOSE = "<tool_call>", "</tool_call>"


@dataclasses.dataclass
class ParsedCall:
    id: str
    name: str
    arguments: str  # JSON text


def _parse_block(body: str) -> ParsedCall | None:
    try:
        data = json.loads(body.strip())
    except json.JSONDecodeError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        return None
    args = data.get("arguments", data.get("parameters", {}))
    arguments = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False)
    return ParsedCall(f"call_{uuid.uuid4().hex[:24]}", data["name"], arguments)


def parse_text(text: str) -> tuple[str, list[ParsedCall]]:
    """Split complete text into content and tool calls. Malformed blocks stay
    in the content."""
    content: list[str] = []
    calls: list[ParsedCall] = []
    rest = text
    while True:
        start = rest.find(OPEN)
        if start < 0:
            content.append(rest)
            break
        end = rest.find(CLOSE, start)
        if end < 0:
            content.append(rest)
            break
        call = _parse_block(rest[start + len(OPEN) : end])
        if call is None:
            content.append(rest[: end + len(CLOSE)])
        else:
            content.append(rest[:start])
            calls.append(call)
        rest = rest[end + len(CLOSE) :]
    return "".join(content).strip() if calls else "".join(content), calls


class StreamParser:
    """Incremental version: feed text deltas, get (content delta, calls)."""

    def __init__(self) -> None:
        self._buf = ""
        self.calls = 0

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        self._buf += text
        out: list[str] = []
        calls: list[ParsedCall] = []
        while self._buf:
            start = self._buf.find(OPEN)
            if start < 0:
                # Hold back a tail that could be the start of OPEN.
                keep = partial_suffix(self._buf, OPEN)
                out.append(self._buf[: len(self._buf) - keep])
                self._buf = self._buf[len(self._buf) - keep :]
                break
            out.append(self._buf[:start])
            end = self._buf.find(CLOSE, start)
            if end < 0:
                self._buf = self._buf[start:]
                break
            call = _parse_block(self._buf[start + len(OPEN) : end])
            if call is None:
                out.append(self._buf[start : end + len(CLOSE)])
            else:
                calls.append(call)
            self._buf = self._buf[end + len(CLOSE) :]
        self.calls += len(calls)
        return "".join(out), calls

    def flush(self) -> str:
        """At the end of the choice: whatever is held back is content."""
        rest, self._buf = self._buf, ""
        return rest


def partial_suffix(text: str, token: str) -> int:
    """Length of the longest tail of text that is a proper prefix of token."""
    for n in range(min(len(token) - 1, len(text)), 0, -1):
        if text.endswith(token[:n]):
            return n
    return 0
