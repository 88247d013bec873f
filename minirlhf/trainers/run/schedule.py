"""What a run changes from step to step by rule, not by gradient: the learning rate (`scheduled_lr`) and the KL
coefficient β of the adaptive controller (`adaptive_kl_beta`). Both are pure functions of numbers the run keeps
(the step; β and the batch's KL), so that a resumed run continues them exactly."""

from __future__ import annotations

import math

LR_SCHEDULES = ("constant", "linear", "cosine")


def scheduled_lr(step: int, steps: int, lr: float, schedule: str = "constant", warmup_steps: int = 0) -> float:
    """The learning rate of step `step` (0-based) of `steps`: a linear warmup over the first W = warmup_steps
    steps, then the schedule's decay over the rest:

        η_t = η · (t + 1) / W                                  t < W        (warmup: η/W, 2η/W, .., η)
        η_t = η · d(p),   p = (t - W) / (steps - W) ∈ [0, 1)   t ≥ W
              d(p) = 1 (constant),  1 - p (linear),  ½ (1 + cos(π p)) (cosine)

    The first step after warmup runs at η; the decay approaches 0 at the end without reaching it."""
    if step < warmup_steps:
        return lr * (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, steps - warmup_steps)
    if schedule == "linear":
        return lr * (1.0 - progress)
    if schedule == "cosine":
        return lr * 0.5 * (1.0 + math.cos(math.pi * progress))
    if schedule == "constant":
        return lr
    raise ValueError(f"lr_schedule must be one of {', '.join(LR_SCHEDULES)}, got {schedule!r}")


KL_ERROR_CLIP = 0.2  # e_t is clipped to [-0.2, 0.2] (Ziegler et al., 2019)


def adaptive_kl_beta(beta: float, kl: float, kl_target: float, n: int, horizon: float) -> float:
    """The adaptive KL controller of Ziegler et al. (2019, section 2.2), as TRL's `AdaptiveKLController`: β moves
    so that the measured KL(p_θ || p_ref) of the batches tends to KL_target,

        e_t     = clip((KL_t - KL_target) / KL_target, -0.2, 0.2)      (the proportional error)
        β_{t+1} = β_t · (1 + K_β · e_t),     K_β = n / horizon

    with KL_t the batch's sequence-level KL, n the samples in the batch and `horizon` the number of samples over
    which β may change by a factor of about e^{±0.2} (TRL's default horizon: 10000). Too much KL raises β (a
    tighter leash), too little lowers it."""
    error = min(max((kl - kl_target) / kl_target, -KL_ERROR_CLIP), KL_ERROR_CLIP)  # e_t
    return beta * (1.0 + n / horizon * error)
