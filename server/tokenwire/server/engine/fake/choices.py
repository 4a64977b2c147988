"""The fake engine's progress through one request: each choice's planned
tokens, the text it has shown and how it finishes (EOS, stop ids and
strings, max_tokens), and stream_interval's merging of deltas, shaped like
vLLM's."""

from __future__ import annotations

import dataclasses
from typing import Any

from tokenwire.server.core.domain import ChoiceOutput, GenerationParams


def merge(a: ChoiceOutput, b: ChoiceOutput) -> ChoiceOutput:
    """Two consecutive deltas of one choice as one (like vLLM's DELTA merge)."""
    lps = None if a.logprobs is None else a.logprobs + (b.logprobs or [])
    return ChoiceOutput(a.index, a.token_ids + b.token_ids, a.text + b.text, lps,
                        b.finish_reason, b.stop_reason, b.weight_versions, b.routed_experts)


@dataclasses.dataclass
class FakeChoice:
    """One choice on its way through its planned tokens."""

    index: int
    plan: list[int]
    emitted: int = 0
    sent: str = ""  # text sent so far
    full: str = ""  # all text generated so far
    done: ChoiceOutput | None = None  # the delta that finished it
    spans: list[list[Any]] = dataclasses.field(default_factory=list)  # FakeControl._track

    def token(self, step: int) -> int:
        """The token sampled at `step` (past the plan: its last one again)."""
        return self.plan[step] if step < len(self.plan) else self.plan[-1]

    def ids(self) -> list[int]:
        """The tokens generated so far."""
        return [self.token(j) for j in range(self.emitted)]

    def take(self, p: GenerationParams, tid: int, text: str,
             eos: int) -> tuple[str, str | None, int | str | None]:
        """Token `tid` (its text: `text`) was just emitted: the text the
        choice shows now, its finish reason (None: not finished) and its
        stop reason."""
        finish = None
        stop_reason: int | str | None = None
        if tid == eos and not p.ignore_eos and self.emitted > p.min_tokens:
            finish = "stop"
            text = ""
        elif tid in p.stop_token_ids and self.emitted > p.min_tokens:
            finish, stop_reason, text = "stop", tid, ""
        self.full += text
        visible = self.full
        for s in p.stop:
            cut = self.full.find(s)
            if cut >= 0:
                kept = len(s) if p.include_stop_str_in_output else 0
                visible = self.full[: cut + kept]
                finish, stop_reason = "stop", s
                break
        if finish is None and self.emitted >= p.max_tokens:
            finish = "length"
        # Like vLLM, hold back text that could start a stop string.
        hold = 0 if finish or not p.stop else max(len(s) - 1 for s in p.stop)
        upto = max(len(self.sent), len(visible) - hold)
        shown = visible[len(self.sent):upto]
        self.sent += shown
        return shown, finish, stop_reason


class StreamBatch:
    """stream_interval, like vLLM's: a stream's first deltas at once, then
    every k steps' merged per choice, or at once when a choice finishes."""

    def __init__(self, interval: int):
        self.interval = interval
        self.sent = 0  # outputs sent so far (the caller counts them)
        self._since = 0  # steps since the last output
        self._pending: dict[int, ChoiceOutput] = {}

    def add(self, deltas: list[ChoiceOutput]) -> list[ChoiceOutput] | None:
        """One step's deltas; the merged deltas to send now, or None (held)."""
        for d in deltas:
            held = self._pending.get(d.index)
            self._pending[d.index] = d if held is None else merge(held, d)
        self._since += 1
        if self.sent and self._since < self.interval and not any(d.finished for d in deltas):
            return None
        self._since = 0
        ready = list(self._pending.values())
        self._pending.clear()
        return ready
