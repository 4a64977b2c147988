"""What the control plane records and reports: the state GetState returns,
an update's timings, an open weight transfer."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass
class ControlSnapshot:
    paused: bool
    pause_mode: str
    sleeping: bool
    weight_version: str
    lora_adapters: list[str]
    engine_requests: int
    updates: int
    last_error: str
    weight_path: str
    generation: int
    load_failed: bool
    weight_fingerprint: str = ""  # weight_path's files when loaded (control/fingerprint.py)


@dataclasses.dataclass
class UpdateResult:
    load_ms: float
    paused_ms: float


@dataclasses.dataclass
class Transfer:
    """A weight transfer between StartWeightUpdate and FinishWeightUpdate."""

    paused_by_us: bool  # Start paused generation: Finish resumes it
    failed: bool = False  # a step failed since Start: Finish keeps the failed-load label
