"""CPU groups: the engine processes are the descendants titled VLLM::... (e.g.
VLLM::EngineCore; other children count nowhere); the idle wait returns once CPU is low."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from bench import systems

TITLED = "import setproctitle, time; setproctitle.setproctitle('VLLM::EngineCore'); time.sleep(60)"


def test_engine_cores_are_the_titled_children_only() -> None:
    pytest.importorskip("setproctitle")
    core = subprocess.Popen([sys.executable, "-c", TITLED])
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 10
        while not psutil.Process(core.pid).cmdline()[0].startswith("VLLM::"):  # retitled
            assert time.monotonic() < deadline
            time.sleep(0.05)
        cores, others = systems.engine_cores(os.getpid())
        # Only this test's two children: in the whole suite the session's
        # real engine (its own VLLM:: processes) is a child of pytest too.
        mine = {core.pid, helper.pid}
        assert [p.pid for p in cores if p.pid in mine] == [core.pid]
        assert any(o.startswith(f"{helper.pid} ") for o in others)
        groups = systems.ProcGroups.of(
            {"serving": [os.getpid()], "engine": [core.pid], "proxy": []}
        )
        cpu = groups.cpu()
        assert (
            set(cpu) == {"serving", "engine", "proxy", "machine"}
            and cpu["proxy"] == 0.0
            and cpu["serving"] > 0
        )
        groups.sample()
        assert groups.peak_rss > 0
        assert groups.describe()["engine"][0].startswith(f"{core.pid} ")
    finally:
        for p in (core, helper):
            p.kill()
            p.wait()


def test_wait_idle_returns_when_the_processes_are_idle() -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        waited, timed_out = systems.wait_idle([psutil.Process(sleeper.pid)], every=0.2, timeout=5)
        assert not timed_out and waited < 2
    finally:
        sleeper.kill()
        sleeper.wait()
