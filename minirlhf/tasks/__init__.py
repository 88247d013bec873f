"""Tasks: where prompts come from, how completions are scored, and how a policy is evaluated.

- `arithmetic`: the verifiable-reward task (exact-answer reward) for REINFORCE/RLOO, PPO and GRPO.
- `reviews` + `sentiment`: the preference task (continue a review positively), scored by VADER.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Task:
    """What an online trainer (REINFORCE/RLOO, PPO, GRPO) learns from: prompts, a reward, and optionally a
    held-out evaluation. `minirlhf.tasks.user` builds one from a prompt file and reward functions of your own."""

    name: str
    # (n, rng) -> n training prompts: strings, or rows {"prompt": str, column: value, ...} whose other columns
    # reach the reward function as keyword lists (one value per completion), as in TRL
    train_prompts: Callable[[int, random.Random], list[str] | list[dict[str, Any]]]
    reward_fn: Callable[..., Sequence[float]]  # reward_fn(prompts, completions, **columns) -> one float each
    max_new_tokens: int  # response budget when sampling
    evaluate: Callable[..., dict[str, float]] | None = None  # (model, tokenizer) -> held-out metrics; None = none
    # (where, prompt) of every training prompt when the set is finite (a file): each is checked to fit the model's
    # context with max_new_tokens before the first step; () for a task that makes its prompts up
    prompts: Sequence[tuple[str, str]] = ()
