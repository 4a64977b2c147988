"""The pieces of GRPO and of the bookkeeping that need no model: samples,
group-normalised advantages, the clipped surrogate loss, version spans to
per-token lags, and the train/inference mismatch."""

from __future__ import annotations

import collections
import dataclasses
import statistics

import torch


@dataclasses.dataclass
class Sample:
    """One trajectory: every id of the sequence, which of them tokenwire
    sampled (the loss positions), tokenwire's logprob and weight version of
    each sampled id, and the reward."""

    group: int
    ids: list[int] = dataclasses.field(default_factory=list)
    sampled: list[bool] = dataclasses.field(default_factory=list)
    logprobs: list[float] = dataclasses.field(default_factory=list)  # 0.0 where not sampled
    versions: list[str] = dataclasses.field(default_factory=list)  # "" where not sampled
    texts: list[str] = dataclasses.field(default_factory=list)
    finished: list[bool] = dataclasses.field(default_factory=list)
    reward: float = 0.0
    advantage: float = 0.0

    def extend(self, ids: list[int], *, sampled: bool, logprobs: list[float] | None = None,
               versions: list[str] | None = None) -> None:
        self.ids += ids
        self.sampled += [sampled] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.versions += versions if versions is not None else [""] * len(ids)


def span_versions(spans: list[tuple[str, int, int]], n: int) -> list[str]:
    """Per completion token, the version of the span covering it ('' if none)."""
    out = [""] * n
    for version, start, end in spans:
        out[start:end] = [version] * (end - start)
    return out


def version_number(version: str) -> int:
    """Versions are 's<step>' (the trainer names them)."""
    return int(version.removeprefix("s")) if version.startswith("s") else -1


def group_advantages(samples: list[Sample], eps: float = 1e-4) -> None:
    """(reward - group mean) / (group std + eps), in place; 0 for a group
    whose samples all scored the same (no signal)."""
    groups: dict[int, list[Sample]] = collections.defaultdict(list)
    for s in samples:
        groups[s.group].append(s)
    for members in groups.values():
        rewards = [s.reward for s in members]
        mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
        for s in members:
            s.advantage = (s.reward - mean) / (std + eps) if std > 0 else 0.0


def clipped_loss(new_lp: torch.Tensor, old_lp: torch.Tensor, adv: torch.Tensor,
                 clip: float) -> torch.Tensor:
    """PPO's clipped surrogate per token, averaged over tokens (DAPO's token
    mean): old_lp are the behaviour logprobs tokenwire returned."""
    ratio = torch.exp(new_lp - old_lp)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv)
    return -surrogate.mean()


@dataclasses.dataclass
class TokenSelection:
    """Which sampled tokens train, and the lag of each against the trainer."""

    keep: list[list[bool]]
    lags: collections.Counter[int]
    dropped: int


def select_tokens(samples: list[Sample], trainer_version: int, max_lag: int) -> TokenSelection:
    """Keep sampled tokens whose version is at most `max_lag` behind the
    trainer's; count the lag of every sampled token and the tokens dropped
    (also those of an unknown or newer version: a bookkeeping bug)."""
    lags: collections.Counter[int] = collections.Counter()
    keep, dropped = [], 0
    for s in samples:
        row = []
        for sampled, version in zip(s.sampled, s.versions, strict=True):
            ok = False
            if sampled:
                lag = trainer_version - version_number(version)
                lags[lag] += 1
                ok = 0 <= lag <= max_lag and version_number(version) >= 0
                dropped += not ok
            row.append(ok)
        keep.append(row)
    return TokenSelection(keep, lags, dropped)


def mismatch(trainer_lp: list[float], engine_lp: list[float]) -> dict[str, float | None]:
    """Mean and max |trainer logprob - tokenwire logprob| in nats (None
    without tokens)."""
    diffs = [abs(a - b) for a, b in zip(trainer_lp, engine_lp, strict=True)]
    if not diffs:
        return {"mean": None, "max": None, "tokens": 0}
    return {"mean": statistics.fmean(diffs), "max": max(diffs), "tokens": len(diffs)}
