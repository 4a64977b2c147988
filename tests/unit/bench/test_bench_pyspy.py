"""The py-spy summary reads collapsed stacks into the right shares."""

from __future__ import annotations

import pathlib

from bench.pyspy import shares, summarize


def test_inclusive_self_and_own_code_shares(tmp_path: pathlib.Path) -> None:
    stacks = tmp_path / "p.collapsed"
    stacks.write_text(
        "thread (1): MainThread;run (asyncio/runners.py:118);"
        "handler (/x/server/tokenwire/server/s.py:10) 3\n"
        "thread (1): MainThread;run (asyncio/runners.py:118);"
        "handler (/x/server/tokenwire/server/s.py:12) 1\n"
        "thread (1): MainThread;run (asyncio/runners.py:119) 4\n"
        "thread (2): Thread-1;poll (threading.py:1) 2\n"
    )
    s = shares(stacks)
    assert (s.total, s.ours) == (10, 4)  # the handler's two lines count as one function
    assert s.inclusive["run (asyncio/runners.py)"] == 8
    assert s.own["run (asyncio/runners.py)"] == 4
    assert (
        s.inclusive["handler (tokenwire/server/s.py)"]
        == s.own["handler (tokenwire/server/s.py)"]
        == 4
    )
    assert s.own["poll (threading.py)"] == 2
    text = summarize(stacks)
    assert text.splitlines()[0] == "p.collapsed: 10 samples; tokenwire code on the stack in 40.0 %"
    assert "   80.0    40.0  run (asyncio/runners.py)" in text


def test_empty_profile(tmp_path: pathlib.Path) -> None:
    stacks = tmp_path / "e.collapsed"
    stacks.write_text("")
    assert summarize(stacks).endswith("no samples")
