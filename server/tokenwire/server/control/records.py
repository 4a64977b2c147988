"""What the control plane records and reports: the state GetState returns,
what it knows of the weights served, an update's timings, an open weight
transfer."""

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
class WeightRecord:
    """What the control plane knows of the weights served, kept by the
    weight updates (control/weights.py) and reported by GetState: how many
    updates, the last error, the folder the weights came from and its files,
    and a failed load that may have mixed them."""

    updates: int = 0
    last_error: str = ""
    # The checkpoint folder the weights served now came from ("" when
    # unknown: after a transfer or a failed load).
    path: str = ""
    # What path's files were when it was loaded ("" unknown): a rollback's
    # expected_fingerprint is checked against the folder.
    fingerprint: str = ""
    # The last load failed (its description while so): the weights may be mixed.
    failed_load: str = ""
    failed_load_error: bool = False  # last_error is the failed load's (kept until cleared)

    @property
    def load_failed(self) -> bool:
        return bool(self.failed_load)

    def error(self, message: str) -> None:
        """Remember the last error, unless a failed load's is kept."""
        if not self.failed_load_error:
            self.last_error = message

    def changed(self, path: str, files: str) -> None:
        """The engine now holds other weights, loaded whole from `path` ("":
        not from a folder) whose files had the fingerprint `files`."""
        self.updates += 1
        self.path = path
        self.fingerprint = files
        self.failed_load = ""
        self.failed_load_error = False
        self.last_error = ""

    def failed(self, what: str) -> None:
        """A load failed part-way: the weights may be mixed; its error is
        kept until a load succeeds or a forced Resume clears it."""
        self.path = self.fingerprint = ""
        self.failed_load = what
        self.last_error = what
        self.failed_load_error = True

    def clear_failed_load_error(self) -> None:
        """A forced Resume: the failed load's error is cleared (its label
        stays on the weights until a load succeeds)."""
        self.failed_load_error = False
        self.last_error = ""


@dataclasses.dataclass
class UpdateResult:
    load_ms: float
    paused_ms: float


@dataclasses.dataclass
class Transfer:
    """A weight transfer between StartWeightUpdate and FinishWeightUpdate."""

    paused_by_us: bool  # Start paused generation: Finish resumes it
    failed: bool = False  # a step failed since Start: Finish keeps the failed-load label
