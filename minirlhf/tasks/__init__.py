"""Tasks: where prompts come from, how completions are scored, and how a policy is evaluated.

The contract lives here: a `Task` (prompts, a `RewardFn`, a budget, an `Evaluation` (model, tokenizer) -> dict) and
`call_reward`, the one call that checks a reward function's answer. `registry` names the shipped tasks and pairs.

- `arithmetic`: the verifiable-reward task (exact-answer reward) for REINFORCE/RLOO, PPO and GRPO.
- `reviews` + `sentiment`: the preference task (continue a review positively), scored by VADER.
- `lab`: a task family with knobs (difficulty mix, free length, response cap, several right answers).
- `calculator`: long sums, and a calculator the policy may call (tool use).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import torch

from minirlhf.data import Evaluation
from minirlhf.errors import UserError
from minirlhf.sampling import Tool

RewardFn = Callable[..., Sequence[float]]  # reward_fn(prompts, completions, **columns) -> one float each
REWARD_ARGUMENTS = ("prompts", "completions")  # a reward's own arguments: no prompt column may take their names


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
    # the models its reward reads (a learned reward model), by name: a run records their weights' fingerprints and
    # refuses a resume whose task brings other weights
    models: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # the knobs a shipped task was made with, NAME=VALUE each (`registry.TASK_OPTIONS`): a run records them beside
    # the name, so that the name rebuilds this task on resume; () for a task at its defaults or without knobs
    options: tuple[str, ...] = ()
    # an environment the policy may call mid-answer (`sampling.Tool`): sampling feeds it each call and appends its
    # answer, which the policy reads but is never trained on; None = none
    tool: Tool | None = None


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


def draw_prompts(task: Task, n: int, rng: random.Random) -> list[str] | list[dict[str, Any]]:
    """`task.train_prompts(n, rng)`, checked: exactly n prompts, all non-empty strings, or all rows {"prompt": str,
    column: value, ...} with the same columns, none named like a reward's own arguments. Anything else is a
    ValueError naming the task and what it returned."""
    drawn = task.train_prompts(n, rng)
    where = f"task {task.name!r}: train_prompts({n}, rng)"
    if not isinstance(drawn, list | tuple):
        raise UserError(f"{where} returned a {type(drawn).__name__}; it must return a list of {n} prompts")
    if len(drawn) != n:
        raise UserError(f"{where} returned {len(drawn)} prompts; it must return exactly {n}")
    drawn = list(drawn)
    rows = bool(drawn) and isinstance(drawn[0], dict)
    for i, item in enumerate(drawn):
        prompt = item.get("prompt") if rows and isinstance(item, dict) else item
        if rows != isinstance(item, dict) or not isinstance(prompt, str) or not prompt.strip():
            what = "rows {'prompt': str, ...}" if rows else "non-empty strings"
            raise UserError(f"{where} returned {_short(item)} (a {type(item).__name__}) as prompt {i}; every prompt "
                            f"must be one of the same kind: {what}")
    if rows:
        columns = set(drawn[0])
        taken = sorted(columns & set(REWARD_ARGUMENTS))
        if taken:
            raise UserError(f"{where}: column {taken[0]!r} has the name of a reward function's own argument "
                            f"({', '.join(REWARD_ARGUMENTS)}): rename the column")
        for i, row in enumerate(drawn):
            if set(row) != columns:
                raise UserError(f"{where}: prompt {i} has the columns {sorted(row)}, prompt 0 {sorted(columns)}; "
                                "every row needs the same columns (the rewards get one list per column)")
    return drawn


def reward_name(reward_fn: RewardFn) -> str:
    return getattr(reward_fn, "__name__", type(reward_fn).__name__)


def with_reward(task: Task, name: str, weight: float, reward_fn: RewardFn) -> Task:
    """`task` with one more reward term: R'(x, y) = R(x, y) + weight · reward_fn(x, y), its own terms kept."""
    own = task.reward_fn
    terms = own.terms if isinstance(own, WeightedReward) else ((reward_name(own), 1.0, own),)
    return dataclasses.replace(task, reward_fn=WeightedReward([*terms, (name, weight, reward_fn)]))


def call_reward(reward_fn: RewardFn, prompts: list[str], completions: list[str], **columns: Any) -> torch.Tensor:
    """R(x, y) for a batch, checked: one finite float per completion, or a ValueError naming the function.

    What may cross: a list or a tuple of numbers, or a 1-D numpy array or torch tensor, one value per completion,
    in the completions' order. A number is real: an int, a float, a Fraction, a Decimal, a real numpy scalar or a
    0-d tensor; a bool counts as 1.0 or 0.0 (a correctness check written `answer == target`). Anything else is
    refused, naming the function and the type: a dict or a set (their keys or their order would become the
    rewards), a generator, a string, nested lists, a complex number, a tensor or array of another shape."""
    name = reward_name(reward_fn)
    try:  # copies: a reward that changes its arguments changes nothing of the run's
        rewards = reward_fn(list(prompts), list(completions), **{k: list(v) for k, v in columns.items()})
    except SystemExit as exit_:
        raise UserError(f"reward function {name} called sys.exit({exit_.code!r}): a reward returns one float per "
                        f"completion, it does not end the run") from None
    wanted = f"a list of {len(completions)} floats, one per completion"
    if rewards is None:
        raise ValueError(f"reward function {name} returned None instead of {wanted}")
    if isinstance(rewards, torch.Tensor | np.ndarray):
        if rewards.ndim != 1:
            raise ValueError(f"reward function {name} returned a {type(rewards).__name__} of shape "
                             f"{tuple(rewards.shape)} instead of {wanted} (a 1-D array or tensor)")
        if isinstance(rewards, torch.Tensor) and rewards.is_meta:
            raise ValueError(f"reward function {name} returned a tensor on the meta device, which holds no values, "
                             f"instead of {wanted}")
        if np.ma.isMaskedArray(rewards) and np.ma.getmaskarray(rewards).any():
            masked = np.flatnonzero(np.ma.getmaskarray(rewards)).tolist()
            raise ValueError(f"reward function {name} returned a masked array with completions {_short(masked)} "
                             f"masked: a masked value is no reward; fill it (rewards.filled(0.0)) or score it")
        rewards = (rewards.to_dense() if isinstance(rewards, torch.Tensor) and rewards.is_sparse else rewards).tolist()
    elif isinstance(rewards, numbers.Number):
        raise ValueError(f"reward function {name} returned a single {type(rewards).__name__} ({rewards!r}) instead "
                         f"of {wanted}")
    elif not isinstance(rewards, list | tuple):
        raise ValueError(f"reward function {name} returned a {type(rewards).__name__} ({_short(rewards)}) instead "
                         f"of {wanted}: only a list, a tuple, a 1-D numpy array or a 1-D torch tensor keeps the "
                         "completions' order")
    rewards = list(rewards)
    if len(rewards) != len(completions):
        raise ValueError(f"reward function {name} returned {len(rewards)} rewards for {len(completions)} completions")
    for i, r in enumerate(rewards):
        if isinstance(r, torch.Tensor | np.ndarray) and r.ndim == 0:  # a 0-d tensor or array counts as its number
            r = r.item()
        r = r.item() if isinstance(r, np.generic) else r  # a numpy scalar counts as its number
        # float32 is what the losses compute in: a reward beyond its range (±3.4e38) would become inf there
        if not isinstance(r, numbers.Real | Decimal) or not _fits_float32(r):
            raise ValueError(
                f"reward function {name} returned {_short(r)}{_kind(r)} for completion {i} "
                f"({completions[i]!r}); every reward must be a finite number within float32's range (|R| < 3.4e38)"
            )
        rewards[i] = float(r)
    return torch.tensor(rewards, dtype=torch.float32)


def _fits_float32(value: numbers.Real | Decimal) -> bool:
    try:
        return math.isfinite(value) and abs(float(value)) <= torch.finfo(torch.float32).max
    except (OverflowError, ValueError):  # an int too large for a float; a signalling Decimal NaN
        return False


def _kind(value: Any) -> str:
    """" (a list)" after a value that is no number and not None: the type says what went wrong."""
    return "" if value is None or isinstance(value, int | float) else f" (a {type(value).__name__})"


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else f"{text[:20]}...({len(text)} characters)"
