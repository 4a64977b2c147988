"""When `tokenwire up` starts a replica again after it exited (its engine
died, or the process was killed): the restart policy, without I/O.

Bounded exponential backoff: the first restart waits `first_delay` (1 s),
each next one twice the last, at most `max_delay` (30 s). A replica that
was SERVING for `stable_after` (60 s) before it exited starts the series
over (its next restart waits 1 s again). A replica that exits, or is not
SERVING within the start timeout, `max_failed_starts` (5) restarts in a
row without ever reaching SERVING is given up (a broken model or flag, not
a crash): the fleet goes on without it, and `tokenwire up` exits when no
replica is left. supervisor.py runs it.
"""

from __future__ import annotations

import dataclasses
import signal


@dataclasses.dataclass(frozen=True)
class RestartPolicy:
    first_delay: float = 1.0
    max_delay: float = 30.0
    stable_after: float = 60.0  # SERVING this long: the next restart waits first_delay again
    max_failed_starts: int = 5  # restarts in a row that never reached SERVING: give up


class Backoff:
    """One replica's restarts: the wait before the next, or None to give up."""

    def __init__(self, policy: RestartPolicy | None = None) -> None:
        self.policy = policy or RestartPolicy()
        self.restarts = 0  # how many times it was started again
        self.failed_starts = 0  # restarts in a row that never reached SERVING
        self._next = self.policy.first_delay

    def exited(self, served_for: float | None) -> float | None:
        """The replica exited after `served_for` seconds SERVING (None: it
        never was, since its last start): seconds to wait before starting it
        again, or None when it is given up."""
        if served_for is None:
            self.failed_starts += 1
            if self.failed_starts >= self.policy.max_failed_starts:
                return None
        else:
            self.failed_starts = 0
            if served_for >= self.policy.stable_after:
                self._next = self.policy.first_delay
        wait = self._next
        self._next = min(self._next * 2, self.policy.max_delay)
        self.restarts += 1
        return wait


def describe_exit(returncode: int) -> str:
    """A Popen return code in words: "exit status 1", "killed by SIGKILL"."""
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"
