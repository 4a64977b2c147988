"""Rollouts through tokenwire: token-in Generate, G samples per prompt, the
sampled ids with their logprobs and weight-version spans. Multi-turn: the
next turn's prompt is the previous prompt + completion ids + the next-turn
suffix tokenwire renders (Tokenize with next_turn), never re-tokenized."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from examples.rl.grpo import Sample, span_versions
from examples.rl.task import SYSTEM, Problem, reward
from tokenwire.client import AsyncClient


@dataclasses.dataclass(frozen=True)
class Sampling:
    group_size: int = 8
    max_tokens: int = 12
    temperature: float = 1.0
    seed: int | None = None

    def params(self, n: int, seed: int | None) -> dict[str, object]:
        # top_p 1 and no top_k: the engine's processed logprobs are then
        # exactly log_softmax(logits / temperature), what the trainer computes.
        params: dict[str, object] = {"n": n, "temperature": self.temperature, "top_p": 1.0,
                                     "top_k": 0, "max_tokens": self.max_tokens, "logprobs": 0}
        if seed is not None:
            params["seed"] = seed
        return params


async def _generate(client: AsyncClient, prompt: list[int], params: dict[str, object]):
    resp = await client.generate(token_ids=prompt, sampling_params=params, return_token_ids=True,
                                 timeout=600)
    if list(resp.prompt_token_ids) != prompt:  # token-in: the engine ran exactly our ids
        raise RuntimeError(f"request {resp.request_id} ran other prompt ids than were sent")
    return list(resp.choices)


def _record(sample: Sample, choice, eos: int) -> list[int]:
    ids = list(choice.token_ids)
    lps = [c.logprob for c in choice.logprobs.content]
    spans = [(s.version, s.start, s.end) for s in choice.weight_versions]
    sample.extend(ids, sampled=True, logprobs=lps, versions=span_versions(spans, len(ids)))
    sample.finished.append(bool(ids) and ids[-1] == eos)
    return ids


RewardFn = Callable[[Sample, Problem], float]


def task_reward(sample: Sample, problem: Problem) -> float:
    return reward(sample.texts, sample.finished, problem)


async def rollout_group(client: AsyncClient, problem: Problem, group: int, sampling: Sampling,
                        eos: int, reward_fn: RewardFn = task_reward) -> list[Sample]:
    """G trajectories of one problem (every turn of it)."""
    first = await client.tokenize(messages=[{"role": "system", "content": SYSTEM},
                                            {"role": "user", "content": problem.questions[0]}])
    prompt = list(first.tokens)
    seed = None if sampling.seed is None else sampling.seed + 1000 * group
    choices = await _generate(client, prompt, sampling.params(sampling.group_size, seed))
    samples = []
    for choice in choices:
        s = Sample(group=group)
        s.extend(prompt, sampled=False)
        samples.append(s)
        _record(s, choice, eos)

    async def next_turns(i: int, s: Sample) -> None:
        for t, question in enumerate(problem.questions[1:], start=1):
            suffix = await client.tokenize(messages=[{"role": "user", "content": question}],
                                           next_turn=True,
                                           previous_completion_ids=_completions(s)[-1])
            s.extend(list(suffix.tokens), sampled=False)
            turn_seed = None if seed is None else seed + 100 * t + i
            (choice,) = await _generate(client, list(s.ids), sampling.params(1, turn_seed))
            _record(s, choice, eos)

    await asyncio.gather(*(next_turns(i, s) for i, s in enumerate(samples)))
    for s in samples:
        # The text of each turn without its end-of-turn id (the reward reads it).
        s.texts = [await client.detokenize(c[:-1] if done else c)
                   for c, done in zip(_completions(s), s.finished, strict=True)]
        s.reward = reward_fn(s, problem)
    return samples


def _completions(s: Sample) -> list[list[int]]:
    """The sampled runs of ids, one per turn."""
    runs: list[list[int]] = []
    prev = False
    for i, sampled in zip(s.ids, s.sampled, strict=True):
        if sampled and not prev:
            runs.append([])
        if sampled:
            runs[-1].append(i)
        prev = sampled
    return runs


async def rollout(client: AsyncClient, problems: list[Problem], sampling: Sampling,
                  eos: int, reward_fn: RewardFn | None = None) -> list[Sample]:
    groups = await asyncio.gather(*(
        rollout_group(client, p, g, sampling, eos, reward_fn or task_reward)
        for g, p in enumerate(problems)))
    return [s for g in groups for s in g]
