"""The task: single-digit sums, answered with the number alone.

Why this task: a verifiable reward the 135M demo model can visibly move in
a few minutes on 2 CPU cores. At temperature 1 the model answers a small
sum correctly and briefly only about one time in six; the rest is chatter,
wrong sums or an answer buried in a sentence. Both halves of the reward
(answer right, stop right after it) are things the model can already do
sometimes, so a group of 8 samples usually holds both good and bad answers
and the group-relative advantage has a signal from step 1 — and because the
good answer is short, each rollout costs few tokens to sample and to train.

The multi-turn variant asks a second question on top of the first answer
("Now add c."), so turn 2's prompt is turn 1's prompt + completion ids + the
next-turn suffix, and the reward checks both answers.
"""

from __future__ import annotations

import dataclasses
import random
import re

SYSTEM = "Answer in one short sentence."
_INT = re.compile(r"-?\d+")


@dataclasses.dataclass(frozen=True)
class Problem:
    """One prompt of the task: the user turns and the answer after each."""

    questions: tuple[str, ...]
    answers: tuple[int, ...]


def make_problem(rng: random.Random, turns: int = 1) -> Problem:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    questions, answers = [f"What is {a} + {b}?"], [a + b]
    for _ in range(turns - 1):
        c = rng.randint(1, 9)
        questions.append(f"Now add {c}.")
        answers.append(answers[-1] + c)
    return Problem(tuple(questions), tuple(answers))


def turn_reward(text: str, answer: int, finished: bool) -> float:
    """1.0 for a reply whose last number is the answer and that ended (the
    end-of-turn id within the token budget), 0.5 for the right last number
    in a reply cut off by the budget, 0 otherwise."""
    numbers = _INT.findall(text)
    if not numbers or int(numbers[-1]) != answer:
        return 0.0
    return 1.0 if finished else 0.5


def reward(texts: list[str], finished: list[bool], problem: Problem) -> float:
    """The mean of the turns' rewards."""
    scores = [
        turn_reward(t, a, f) for t, a, f in zip(texts, problem.answers, finished, strict=True)
    ]
    return sum(scores) / len(scores)
