"""The id the engine sees for each request in flight (issue #32 item 5).

A caller may choose a request's id (`request_id`, SGLang's `rid`, a
session's `start.request_id`), and two callers may choose the same one.
The id stays theirs as a label (responses, sessions and continuations
report it unchanged), but the engine gets an id unique among this serving
process's requests in flight: the caller's own while no other request in
flight holds it (the common case, so vLLM's logs name the caller's id),
else the caller's with "~<n>" appended. Weight bounds (core/weight_bounds.py)
are kept, and a bound's end aborts, by that engine id, so neither touches
another request that shares the caller's id.

ControlService.AbortRequests (admin only) names requests by the ids callers
gave them: `resolve` turns each into every engine id in flight that carries
it as its label (every tenant's request with that id: the call is the
operator's), plus the id itself (an engine id as logged; the engine
ignores one it does not hold).
"""

from __future__ import annotations

from collections.abc import Iterable


class EngineRequestIds:
    """Engine id -> caller's id (label), for the requests in flight."""

    def __init__(self) -> None:
        self._labels: dict[str, str] = {}
        self._suffixes = 0

    def __len__(self) -> int:
        return len(self._labels)

    def claim(self, label: str) -> str:
        """A new engine id for a request the caller calls `label`."""
        engine_id = label
        while engine_id in self._labels:
            self._suffixes += 1
            engine_id = f"{label}~{self._suffixes}"
        self._labels[engine_id] = label
        return engine_id

    def release(self, engine_id: str) -> None:
        self._labels.pop(engine_id, None)

    def label(self, engine_id: str) -> str | None:
        return self._labels.get(engine_id)

    def resolve(self, ids: Iterable[str]) -> list[str]:
        """The engine ids that AbortRequests(ids) names, each once."""
        wanted = dict.fromkeys(ids)
        out = dict.fromkeys(e for e, label in self._labels.items() if label in wanted)
        out.update(wanted)  # each id itself: an engine id, or one the engine ignores
        return list(out)
