"""What the capstone's training step returns (`minirlhf.course.capstone` checks it against the reference step).

A module of its own so that the worked solution (`solutions.my_step`) can build one without importing the checker.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class StepOutput:
    completions: list[str]  # (B,) the sampled answers, B = len(prompts) · group_size, grouped by prompt
    rewards: torch.Tensor  # (B,)
    advantages: torch.Tensor  # (B,)
    loss: torch.Tensor  # the loss that was minimised (a scalar), detached: a value to log
