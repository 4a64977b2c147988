"""Splitting reasoning text from the answer: `<think>…</think>` style.

Used when the server runs with --reasoning-parser. A choice whose text
starts with the start marker is reasoning until the end marker; everything
after is content. Only text is split; token ids are never held back.
"""

from __future__ import annotations

from tokenwire.server.inference.tool_calls import partial_suffix


def split_text(text: str, markers: tuple[str, str]) -> tuple[str | None, str]:
    """(reasoning or None, content) of a complete text."""
    start, end = markers
    stripped = text.lstrip()
    if not stripped.startswith(start):
        return None, text
    body = stripped[len(start) :]
    cut = body.find(end)
    if cut < 0:  # cut off while thinking
        return body, ""
    return body[:cut], body[cut + len(end) :].lstrip("\n")


class ReasoningStream:
    """Incremental split: feed text deltas, get (reasoning delta, content delta)."""

    def __init__(self, markers: tuple[str, str]):
        self.start, self.end = markers
        self.state = "undecided"  # -> "reasoning" -> "content"
        self.buf = ""
        self._skip_newlines = False

    def feed(self, text: str) -> tuple[str, str]:
        self.buf += text
        reasoning, content = "", ""
        if self.state == "undecided":
            head = self.buf.lstrip()
            if head.startswith(self.start):
                self.state = "reasoning"
                self.buf = head[len(self.start) :]
            elif self.start.startswith(head):
                return "", ""  # could still become the start marker
            else:
                self.state = "content"
        if self.state == "reasoning":
            cut = self.buf.find(self.end)
            if cut >= 0:
                reasoning = self.buf[:cut]
                self.buf = self.buf[cut + len(self.end) :]
                self.state = "content"
                self._skip_newlines = True
            else:
                keep = partial_suffix(self.buf, self.end)
                reasoning = self.buf[: len(self.buf) - keep]
                self.buf = self.buf[len(self.buf) - keep :]
                return reasoning, ""
        if self.state == "content":
            if self._skip_newlines:
                self.buf = self.buf.lstrip("\n")
                self._skip_newlines = not self.buf
            content, self.buf = self.buf, ""
        return reasoning, content

    def flush(self) -> tuple[str, str]:
        rest, self.buf = self.buf, ""
        if self.state == "reasoning":
            return rest, ""
        return "", rest

