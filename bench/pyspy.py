"""Sampling profiles of a serving process with py-spy (the `bench` extra),
for `python -m bench.frontend --profile DIR` and `make profile`.

py-spy samples the running process from outside (`--nonblocking`: it never
pauses the target, so the profile does not slow what it measures) and
writes collapsed stacks, one line per distinct stack with its sample count.
`summarize` reads them back: the share of samples each function is on the
stack (inclusive) and at the top of it (self), so tokenwire's own code can
be told from grpc.aio's and the event loop's.
"""

from __future__ import annotations

import collections
import dataclasses
import pathlib
import shutil
import subprocess
import sys


def available() -> str | None:
    """The py-spy executable, next to this interpreter or on PATH."""
    here = pathlib.Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


def record(pid: int, seconds: float, out: pathlib.Path, rate: int = 250,
           native: bool = False) -> subprocess.Popen[bytes]:
    """Start sampling `pid` for `seconds` (all threads, idle samples left
    out) into `out` as collapsed stacks; the caller waits on the result.
    `native`: also the C/C++/Cython frames (grpc's core, upb, uvloop); py-spy
    then pauses the process for each sample, so the shares are right but
    the process runs slower while sampled."""
    exe = available()
    if exe is None:
        raise RuntimeError("py-spy is not installed: pip install -e '.[bench]'")
    out.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [exe, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
         "--rate", str(rate), "--format", "raw", "--threads", "-o", str(out),
         *(["--native"] if native else ["--nonblocking"])],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )


def _frames(stack: str) -> list[str]:
    # "thread (tid);func (file:line);func (file:line)": drop the line numbers
    # so a function counts once however many lines of it were sampled.
    out = []
    for frame in stack.split(";")[1:]:
        name, _, where = frame.partition(" (")
        path = where.rsplit(":", 1)[0]
        out.append(f"{name} ({_short(path)})")
    return out


def _short(path: str) -> str:
    """A library's path from its package down; tokenwire's from `tokenwire/`
    (py-spy already prints the standard library's paths short)."""
    _, sep, rest = path.partition("site-packages/")
    if sep:
        return rest
    i = path.find("tokenwire/")
    return path[i:] if i >= 0 else path


@dataclasses.dataclass
class Shares:
    """Sample counts of one profile: in all, with tokenwire's code on the
    stack, and per function on the stack (inclusive) and at its top (self)."""

    total: int = 0
    ours: int = 0
    inclusive: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)
    own: collections.Counter[str] = dataclasses.field(default_factory=collections.Counter)


def shares(path: pathlib.Path) -> Shares:
    out = Shares()
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = _frames(stack)
        out.total += count
        if any("tokenwire/" in f for f in frames):
            out.ours += count
        for f in set(frames):
            out.inclusive[f] += count
        if frames:
            out.own[frames[-1]] += count
    return out


def summarize(path: pathlib.Path, top: int = 25) -> str:
    """The functions with the most samples, as percentages of all samples."""
    s = shares(path)
    if not s.total:
        return f"{path}: no samples"
    pct = 100 / s.total
    lines = [f"{path.name}: {s.total} samples; tokenwire code on the stack in {s.ours * pct:.1f} %",
             f"{'incl %':>7} {'self %':>7}  function"]
    for f, n in s.inclusive.most_common(top):
        lines.append(f"{n * pct:7.1f} {s.own[f] * pct:7.1f}  {f}")
    lines.append(f"{'self %':>7}  function (most self time)")
    for f, n in s.own.most_common(top):
        lines.append(f"{n * pct:7.1f}  {f}")
    return "\n".join(lines)


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        print(summarize(pathlib.Path(arg)))
