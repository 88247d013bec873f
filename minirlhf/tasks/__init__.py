"""Tasks: where prompts come from, how completions are scored, and how a policy is evaluated.

- `arithmetic`: the verifiable-reward task (exact-answer reward) for REINFORCE/RLOO, PPO and GRPO.
- `reviews` + `sentiment`: the preference task (continue a review positively), scored by VADER.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Task:
    """What an online trainer needs from a task."""

    name: str
    train_prompts: Callable[[int, random.Random], list[str]]  # (n, rng) -> n training prompts
    reward_fn: Callable[..., Sequence[float]]  # reward_fn(prompts, completions, **columns) -> floats
    evaluate: Callable[..., dict[str, float]]  # (model, tokenizer) -> held-out metrics
    max_new_tokens: int  # response budget when sampling
