"""The RL loop on tokenwire: rollouts -> rewards -> GRPO step -> push the
weights -> probe that they went through. Synchronous (sample, then train)
or asynchronous (step t+1's rollouts run while step t trains, and the
update lands in keep mode under them)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from examples.rl import grpo, task
from examples.rl.policy import Policy
from examples.rl.rollout import Sampling, rollout
from tokenwire.client import AsyncClient


@dataclasses.dataclass
class Config:
    model: Path
    steps: int = 20
    prompts: int = 4  # problems per step; each sampled group_size times
    group_size: int = 8
    max_tokens: int = 12
    temperature: float = 1.0
    lr: float = 2e-5
    clip: float = 0.2
    train_layers: int = 0  # 0: every transformer layer
    turns: int = 1  # 2: the multi-turn variant
    mode: str = "sync"  # or "async"
    # tokens further behind the trainer are dropped (default 0 sync, 1 async)
    max_lag: int | None = None
    probe_tokens: int = 8
    seed: int = 0

    @property
    def lag_bound(self) -> int:
        return self.max_lag if self.max_lag is not None else int(self.mode == "async")


class Pusher(Protocol):
    async def push(self, policy: Policy, version: str) -> dict[str, float]: ...


def version(step: int) -> str:
    return f"s{step}"


def problems(cfg: Config, step: int) -> list[task.Problem]:
    rng = random.Random(cfg.seed * 1_000_003 + step)
    return [task.make_problem(rng, cfg.turns) for _ in range(cfg.prompts)]


async def probe(clients: list[AsyncClient], policy: Policy, prompt: list[int],
                n: int) -> dict[str, Any]:
    """Greedy ids from tokenwire (each replica, in the fleet variant) and
    from the trainer's model on the same ids."""
    ours = await asyncio.to_thread(policy.greedy, prompt, n)
    replicas = []
    for client in clients:
        resp = await client.generate(token_ids=prompt, timeout=300,
                                     sampling_params={"temperature": 0.0, "max_tokens": n})
        choice = resp.choices[0]
        replicas.append({"target": client.target, "tokenwire": list(choice.token_ids),
                         "versions": sorted({s.version for s in choice.weight_versions})})
    return {"tokenwire": replicas[0]["tokenwire"], "trainer": ours,
            "match": all(r["tokenwire"] == ours for r in replicas),
            "versions": sorted({v for r in replicas for v in r["versions"]}),
            **({"replicas": replicas} if len(replicas) > 1 else {})}


def _train(policy: Policy, samples: list[grpo.Sample], trainer_version: int,
           max_lag: int) -> dict[str, Any]:
    grpo.group_advantages(samples)
    selection = grpo.select_tokens(samples, trainer_version, max_lag)
    # Tokens sampled one version back: the trainer's logprobs with the weights
    # it held then (asynchronous mode keeps them for this).
    previous = policy.previous_logprobs(samples) if selection.lags.get(1) else None
    out = policy.step(samples, selection, keep_previous=max_lag > 0)
    current: list[list[float]] = out["trainer_logprobs"]
    # Exactness: the trainer's logprob of every sampled id, from the weights
    # of the version that sampled it, against tokenwire's logprob of that id.
    ours, theirs = [], []
    for i, s in enumerate(samples):
        engine = [
            (lp, v) for lp, v, on in zip(s.logprobs, s.versions, s.sampled, strict=True) if on
        ]
        for j, (their, v) in enumerate(engine):
            lag = trainer_version - grpo.version_number(v)
            mine = current[i] if lag == 0 else previous[i] if lag == 1 and previous else None
            if mine is not None:
                ours.append(mine[j])
                theirs.append(their)
    return {"loss": out["loss"], "mismatch": grpo.mismatch(ours, theirs),
            "lags": dict(sorted(selection.lags.items())), "dropped": selection.dropped}


def _summary(cfg: Config, t: int, samples: list[grpo.Sample], trained: dict[str, Any],
             pushed: dict[str, float], probed: dict[str, Any],
             times: dict[str, float]) -> dict[str, Any]:
    rewards = [s.reward for s in samples]
    versions = collections.Counter(
        v for s in samples for v, on in zip(s.versions, s.sampled, strict=True) if on
    )
    return {
        "step": t, "trained_on": version(t), "pushed": version(t + 1),
        "reward": {"mean": statistics.fmean(rewards), "std": statistics.pstdev(rewards),
                   "min": min(rewards), "max": max(rewards)},
        "groups_with_signal": len({s.group for s in samples if s.advantage != 0}),
        "tokens_sampled": sum(versions.values()), "token_versions": dict(sorted(versions.items())),
        "spans_split": sum(len({v for v, on in zip(s.versions, s.sampled, strict=True) if on}) > 1
                           for s in samples),
        **trained, "update": pushed, "probe": probed, "seconds": times,
        "example": {"texts": samples[0].texts, "reward": samples[0].reward},
    }


async def run(client: AsyncClient, cfg: Config, policy: Policy, pusher: Pusher, *,
              reward_fn: Callable[[grpo.Sample, task.Problem], float] | None = None,
              on_step: Callable[[dict[str, Any]], None] | None = None,
              replicas: list[AsyncClient] | None = None) -> dict[str, Any]:
    """cfg.steps GRPO steps. The server must serve the policy's weights as
    version s0 when this starts (the initial probe checks the ids agree).
    `replicas`: clients of each replica of a fleet (probed one by one);
    rollouts go through `client` (the gateway)."""
    probed_clients = replicas or [client]
    sampling = Sampling(cfg.group_size, cfg.max_tokens, cfg.temperature, seed=cfg.seed)
    eos = policy.eos
    probe_prompt = list((await client.tokenize(messages=[
        {"role": "system", "content": task.SYSTEM},
        {"role": "user", "content": problems(cfg, 10**6)[0].questions[0]}])).tokens)
    log: dict[str, Any] = {"config": {k: str(v) if isinstance(v, Path) else v
                                      for k, v in dataclasses.asdict(cfg).items()},
                           "lag_bound": cfg.lag_bound, "probe_prompt": probe_prompt,
                           "trainable_parameters": policy.trainable, "tied_embeddings": policy.tied,
                           "initial_probe": await probe(probed_clients, policy, probe_prompt,
                                                        cfg.probe_tokens),
                           "steps": []}

    async def collect(step: int) -> tuple[list[grpo.Sample], float]:
        t0 = time.perf_counter()
        samples = await rollout(client, problems(cfg, step), sampling, eos, reward_fn)
        return samples, time.perf_counter() - t0

    started = time.perf_counter()
    pending = asyncio.create_task(collect(0))
    try:
        for t in range(cfg.steps):
            samples, rollout_s = await pending
            if cfg.mode == "async" and t + 1 < cfg.steps:
                pending = asyncio.create_task(collect(t + 1))  # runs while step t trains
            t0 = time.perf_counter()
            trained = await asyncio.to_thread(_train, policy, samples, t, cfg.lag_bound)
            t1 = time.perf_counter()
            pushed = await pusher.push(policy, version(t + 1))
            t2 = time.perf_counter()
            probed = await probe(probed_clients, policy, probe_prompt, cfg.probe_tokens)
            if cfg.mode == "sync" and t + 1 < cfg.steps:
                pending = asyncio.create_task(collect(t + 1))
            record = _summary(cfg, t, samples, trained, pushed, probed,
                              {"rollout": rollout_s, "train": t1 - t0, "push": t2 - t1,
                               "wall": time.perf_counter() - started})
            log["steps"].append(record)
            if on_step:
                on_step(record)
    finally:
        if not pending.done():
            pending.cancel()
    log["wall_seconds"] = time.perf_counter() - started
    return log


class Progress:
    """A tqdm bar with the reward on a TTY, one plain line per step otherwise."""

    def __init__(self, total: int, stream=sys.stderr):
        self.stream = stream
        self.bar = None
        if stream.isatty():
            from tqdm import tqdm
            self.bar = tqdm(total=total, file=stream, unit="step", desc="GRPO")

    def __call__(self, r: dict[str, Any]) -> None:
        fields = {
            "reward": f"{r['reward']['mean']:.2f}±{r['reward']['std']:.2f}",
            "|Δlp|max": "n/a" if r["mismatch"]["max"] is None else f"{r['mismatch']['max']:.1e}",
            "lags": r["lags"],
            "probe": "ok" if r["probe"]["match"] else "DIFFERS",
            "update_ms": round(r["update"].get("update_ms", 0)),
        }
        if self.bar is not None:
            self.bar.set_postfix(fields, refresh=False)
            self.bar.update(1)
        else:
            print(f"step {r['step'] + 1}: " + " ".join(f"{k}={v}" for k, v in fields.items()),
                  file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
