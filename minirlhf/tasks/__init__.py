"""Tasks: where prompts come from, how completions are scored, and how a policy is evaluated.

The contract lives here: a `Task` (prompts, a `RewardFn`, a budget, an `Evaluation` (model, tokenizer) -> dict) and
`call_reward`, the one call that checks a reward function's answer. `registry` names the shipped tasks and pairs.

- `arithmetic`: the verifiable-reward task (exact-answer reward) for REINFORCE/RLOO, PPO and GRPO.
- `reviews` + `sentiment`: the preference task (continue a review positively), scored by VADER.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import random
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from minirlhf.data import Evaluation
from minirlhf.errors import UserError

RewardFn = Callable[..., Sequence[float]]  # reward_fn(prompts, completions, **columns) -> one float each


@dataclass(frozen=True)
class Task:
    """What an online trainer (REINFORCE/RLOO, PPO, GRPO) learns from: prompts, a reward, and optionally a
    held-out evaluation. `minirlhf.tasks.custom` builds one from a prompt file and reward functions of your own."""

    name: str
    # (n, rng) -> n training prompts: strings, or rows {"prompt": str, column: value, ...} whose other columns
    # reach the reward function as keyword lists (one value per completion), as in TRL
    train_prompts: Callable[[int, random.Random], list[str] | list[dict[str, Any]]]
    reward_fn: RewardFn  # reward_fn(prompts, completions, **columns) -> one float each
    max_new_tokens: int  # response budget when sampling
    evaluate: Evaluation | None = None  # (model, tokenizer) -> held-out metrics (data.Evaluation); None = none
    # (where, prompt) of every training prompt when the set is finite (a file): each is checked to fit the model's
    # context with max_new_tokens before the first step; () for a task that makes its prompts up
    prompts: Sequence[tuple[str, str]] = ()


class WeightedReward:
    """Several reward functions as one: R(x, y) = Σ_k w_k · R_k(x, y). Each R_k is checked on its own (a bad value
    names the function that returned it), and `parts` keeps each R_k, which the online trainers log as
    `reward/<name>` beside the sum. `terms`: (name, weight, function) each; names are unique."""

    def __init__(self, terms: Sequence[tuple[str, float, RewardFn]]):
        if not terms:
            raise ValueError("a task needs at least one reward function")
        names = [name for name, _, _ in terms]
        if len(set(names)) != len(names):
            raise ValueError(f"reward function names must be unique, got {names}")
        self.terms = tuple((name, float(weight), fn) for name, weight, fn in terms)
        self.__name__ = " + ".join(f"{w:g}*{name}" for name, w, _ in self.terms)

    def parts(self, prompts: list[str], completions: list[str], **columns: Any) -> dict[str, torch.Tensor]:
        """R_k(x, y) of every term, (B,) each, checked (`call_reward`), by name."""
        return {name: call_reward(fn, prompts, completions, **columns) for name, _, fn in self.terms}

    def total(self, parts: dict[str, torch.Tensor]) -> torch.Tensor:
        """Σ_k w_k · R_k from the `parts`."""
        return sum(w * parts[name] for name, w, _ in self.terms)

    def __call__(self, prompts: list[str], completions: list[str], **columns: Any) -> list[float]:
        return self.total(self.parts(prompts, completions, **columns)).tolist()


def reward_name(reward_fn: RewardFn) -> str:
    return getattr(reward_fn, "__name__", type(reward_fn).__name__)


def with_reward(task: Task, name: str, weight: float, reward_fn: RewardFn) -> Task:
    """`task` with one more reward term: R'(x, y) = R(x, y) + weight · reward_fn(x, y), its own terms kept."""
    own = task.reward_fn
    terms = own.terms if isinstance(own, WeightedReward) else ((reward_name(own), 1.0, own),)
    return dataclasses.replace(task, reward_fn=WeightedReward([*terms, (name, weight, reward_fn)]))


def call_reward(reward_fn: RewardFn, prompts: list[str], completions: list[str], **columns: Any) -> torch.Tensor:
    """R(x, y) for a batch, checked: one finite float per completion, or a ValueError naming the function."""
    name = reward_name(reward_fn)
    try:  # copies: a reward that changes its arguments changes nothing of the run's
        rewards = reward_fn(list(prompts), list(completions), **{k: list(v) for k, v in columns.items()})
    except SystemExit as exit_:
        raise UserError(f"reward function {name} called sys.exit({exit_.code!r}): a reward returns one float per "
                        f"completion, it does not end the run") from None
    if rewards is None:
        raise ValueError(f"reward function {name} returned None instead of a list of {len(completions)} floats")
    if isinstance(rewards, torch.Tensor | np.ndarray):
        rewards = rewards.tolist()
    if isinstance(rewards, numbers.Number | str) or not isinstance(rewards, Iterable):
        raise ValueError(f"reward function {name} returned a single {type(rewards).__name__} ({rewards!r}) instead "
                         f"of a list of {len(completions)} floats, one per completion")
    rewards = list(rewards)
    if len(rewards) != len(completions):
        raise ValueError(f"reward function {name} returned {len(rewards)} rewards for {len(completions)} completions")
    for i, r in enumerate(rewards):
        r = r.item() if isinstance(r, torch.Tensor | np.generic) else r  # a numpy or 0-d torch number counts
        # float32 is what the losses compute in: a reward beyond its range (±3.4e38) would become inf there
        if r is None or not isinstance(r, int | float) or not _fits_float32(r):
            raise ValueError(
                f"reward function {name} returned {_short(r)} for completion {i} ({completions[i]!r}); "
                "every reward must be a finite number within float32's range (|R| < 3.4e38)"
            )
        rewards[i] = float(r)
    return torch.tensor(rewards, dtype=torch.float32)


def _fits_float32(value: int | float) -> bool:
    try:
        return math.isfinite(value) and abs(float(value)) <= torch.finfo(torch.float32).max
    except OverflowError:  # an int too large for a float
        return False


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
