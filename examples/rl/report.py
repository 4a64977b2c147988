"""The run's JSON log and its figure: reward per step with its spread, the
train/inference mismatch per step, the version-lag histogram and the
update pause per step."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any


def write(log: dict[str, Any], out: Path, name: str) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(log, indent=1) + "\n")
    return path, plot(log, out / f"{name}.png")


def lag_histogram(log: dict[str, Any]) -> dict[int, int]:
    total: collections.Counter[int] = collections.Counter()
    for r in log["steps"]:
        total.update({int(k): v for k, v in r["lags"].items()})
    return dict(sorted(total.items()))


def overall_mismatch(log: dict[str, Any]) -> dict[str, float | None]:
    """Token-weighted mean and the max over the run."""
    m = [r["mismatch"] for r in log["steps"] if r["mismatch"]["tokens"]]
    tokens = sum(x["tokens"] for x in m)
    if not tokens:
        return {"mean": None, "max": None, "tokens": 0}
    return {"mean": sum(x["mean"] * x["tokens"] for x in m) / tokens,
            "max": max(x["max"] for x in m), "tokens": tokens}


def plot(log: dict[str, Any], png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = log["steps"]
    x = [r["step"] + 1 for r in steps]
    mean = [r["reward"]["mean"] for r in steps]
    std = [r["reward"]["std"] for r in steps]
    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    cfg = log["config"]
    fig.suptitle(f"GRPO through tokenwire — {Path(cfg['model']).name}, {cfg['mode']} mode, "
                 f"{cfg['prompts']}x{cfg['group_size']} rollouts/step, {log['wall_seconds']:.0f} s")
    a = ax[0][0]
    a.plot(x, mean, marker="o", label="mean")
    a.fill_between(x, [m - s for m, s in zip(mean, std, strict=True)],
                   [m + s for m, s in zip(mean, std, strict=True)], alpha=0.25, label="± std")
    a.set(title="reward per step", xlabel="step", ylabel="reward", ylim=(-0.05, 1.05))
    a.legend(loc="lower right")
    a = ax[0][1]
    measured = [(r["step"] + 1, r["mismatch"]) for r in steps if r["mismatch"]["tokens"]]
    a.semilogy([m[0] for m in measured], [max(m[1]["mean"], 1e-9) for m in measured], marker="o",
               label="mean")
    a.semilogy([m[0] for m in measured], [max(m[1]["max"], 1e-9) for m in measured], marker="^",
               label="max")
    a.set(title="|trainer logprob - tokenwire logprob| per sampled token", xlabel="step",
          ylabel="nats")
    a.legend()
    a = ax[1][0]
    hist = lag_histogram(log)
    a.bar([str(k) for k in hist], list(hist.values()))
    a.set(title=f"version lag of trained tokens (bound {log['lag_bound']}; "
                f"dropped {sum(r['dropped'] for r in steps)})",
          xlabel="trainer version - sampling version", ylabel="tokens")
    a = ax[1][1]
    a.bar(x, [r["update"].get("paused_ms", 0) for r in steps], label="paused (server)")
    a.plot(x, [r["update"].get("update_ms", 0) for r in steps], "k.-", label="update call")
    a.set(title="weight update per step", xlabel="step", ylabel="ms")
    a.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png
