"""`tokenwire up`'s restart policy (gateway/restarts.py): bounded
exponential backoff, reset by a stable run, given up after starts in a row
that never reached SERVING."""

from __future__ import annotations

import signal

from tokenwire.gateway.restarts import Backoff, RestartPolicy, describe_exit


def test_waits_double_up_to_the_cap() -> None:
    backoff = Backoff()
    waits = [backoff.exited(served_for=2.0) for _ in range(8)]  # crashes soon after SERVING
    assert waits == [1, 2, 4, 8, 16, 30, 30, 30]
    assert backoff.restarts == 8 and backoff.failed_starts == 0  # it came up each time


def test_a_stable_run_starts_the_series_over() -> None:
    backoff = Backoff()
    assert [backoff.exited(5.0) for _ in range(4)] == [1, 2, 4, 8]
    assert backoff.exited(RestartPolicy().stable_after) == 1
    assert backoff.exited(5.0) == 2


def test_gives_up_after_starts_in_a_row_that_never_came_up() -> None:
    backoff = Backoff()
    assert backoff.exited(3600.0) == 1  # the engine died after an hour
    waits = [backoff.exited(None) for _ in range(5)]  # then it never comes up again
    assert waits == [2, 4, 8, 16, None]
    assert backoff.failed_starts == 5


def test_one_start_that_came_up_resets_the_count() -> None:
    backoff = Backoff(RestartPolicy(max_failed_starts=3))
    assert backoff.exited(None) == 1 and backoff.exited(None) == 2
    assert backoff.exited(1.0) == 4  # came up (briefly): not a failed start
    assert backoff.exited(None) == 8 and backoff.exited(None) == 16
    assert backoff.exited(None) is None


def test_exits_in_words() -> None:
    assert describe_exit(1) == "exit status 1"
    assert describe_exit(0) == "exit status 0"
    assert describe_exit(-signal.SIGKILL) == "killed by SIGKILL"
    assert describe_exit(-200) == "killed by signal 200"
