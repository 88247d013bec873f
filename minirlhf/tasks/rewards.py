"""Reward functions that any task can add to its own, in TRL's shape: reward(prompts, completions, **columns).

- `soft_overlong_punishment`: DAPO's length penalty for answers that run into the token budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from minirlhf.checks import check_count, check_interval


def soft_overlong_punishment(
    max_completion_len: int, soft_punish_cache: int, tokenizer: Any = None
) -> Callable[..., list[float]]:
    """DAPO's soft overlong punishment (Yu et al., 2025, Eq. 13), as TRL's `get_soft_overlong_punishment` builds it.
    With L_max = ``max_completion_len``, L_cache = ``soft_punish_cache`` and |y| the completion's length in tokens:

        R_length(y) = 0                                  |y| <= L_max - L_cache
                      ((L_max - L_cache) - |y|) / L_cache     L_max - L_cache < |y| <= L_max
                      -1                                 L_max < |y|

    It falls linearly from 0 to -1 over the last L_cache tokens of the budget, so a long answer learns to finish
    before it is cut off, and never rewards being short. Add it to a task's reward (weights as for any reward).

    |y| counts the tokens of `completion_ids` when the caller passes them (TRL does: there the ids end with the EOS
    token when the answer finished), else the tokens `tokenizer` gives the completion text (no EOS: the text has
    none), so a finished answer counts one token fewer than in TRL.
    """
    check_count("max_completion_len", max_completion_len)
    check_count("soft_punish_cache", soft_punish_cache, minimum=0)
    check_interval("soft_punish_cache", soft_punish_cache, 0, max_completion_len, why="max_completion_len")
    free = max_completion_len - soft_punish_cache  # L_max - L_cache: the lengths that cost nothing

    def soft_overlong_punishment_reward(
        prompts: Sequence[str], completions: Sequence[str], completion_ids: Sequence[Sequence[int]] | None = None,
        **columns: Any,
    ) -> list[float]:
        if completion_ids is None:
            if tokenizer is None:
                raise ValueError("soft_overlong_punishment needs completion_ids from the caller or a tokenizer "
                                 "given to soft_overlong_punishment(..., tokenizer=...) to count tokens")
            completion_ids = [tokenizer(c, add_special_tokens=False)["input_ids"] for c in completions]
        if len(completion_ids) != len(completions):
            raise ValueError(f"{len(completion_ids)} completion_ids for {len(completions)} completions")
        rewards = []
        for ids in completion_ids:
            length = len(ids)  # |y|
            if length <= free:
                rewards.append(0.0)
            elif length <= max_completion_len:
                rewards.append((free - length) / soft_punish_cache)
            else:
                rewards.append(-1.0)
        return rewards

    return soft_overlong_punishment_reward
