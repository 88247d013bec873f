"""Policy gradients, in the order of notebook 02: the REINFORCE loss, then its baselines (a moving average, the
leave-one-out mean of RLOO) and the reward with the KL leash folded in.
"""

from __future__ import annotations

from torch import Tensor

from minirlhf.checks import check_interval
from minirlhf.losses._contract import (
    _check_overflow,
    _check_real_tokens,
    _check_same_shape,
    _grouped,
    _per_token_advantages,
    _zero_padding,
)
from minirlhf.losses.aggregation import aggregate, masked_sum
from minirlhf.losses.kl import kl_k1


def reinforce_per_token_loss(logp: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """The REINFORCE surrogate's term of each token, (B, T), 0 on padding:

        ℓ_i,t = -Â_i,t · log p_θ(y_i,t | x_i, y_i,<t)

    ``advantages`` is (B,) (one Â per sequence, broadcast over its tokens) or (B, T), and is treated as a
    constant. ``reinforce_loss`` is ``aggregate`` of it.
    """
    _check_same_shape(logp=logp, mask=mask)
    advantages = _per_token_advantages(advantages, mask)  # (B, T)
    _check_real_tokens(mask, logp=logp, advantages=advantages)
    logp, advantages = _zero_padding(mask, logp, advantages)
    return -(advantages * logp)


def reinforce_loss(logp: Tensor, advantages: Tensor, mask: Tensor, aggregation: str = "seq-sum") -> Tensor:
    """Policy-gradient surrogate L(θ) = -E[Â · log p_θ(y|x)], whose gradient is the REINFORCE
    estimate -E[(R - b) ∇_θ log p_θ(y|x)] when Â = R - b.

    By default ("seq-sum") the token log-probs of a sequence are summed, which gives
    log p_θ(y|x) = Σ_t log p_θ(y_t|x, y_<t), and the result is averaged over the B sequences:
        L = -(1/B) Σ_i Σ_t Â_i,t log p_θ(y_i,t | x_i, y_i,<t)
    ``advantages`` is (B,) (one Â per sequence, broadcast over its tokens) or (B, T).
    Other ``aggregation`` choices are listed in ``aggregate``; the terms are ``reinforce_per_token_loss``.
    """
    return aggregate(reinforce_per_token_loss(logp, advantages, mask), mask, aggregation)


def check_ema_decay(decay: float) -> None:
    """The EMA baseline's decay lies in [0, 1): at 1 the baseline would never move from its first value."""
    check_interval("ema_decay", decay, 0, 1, high_included=False)


def ema_baseline(baseline: Tensor | None, rewards: Tensor, decay: float) -> Tensor:
    """A moving-average baseline, a cheap value estimate: b <- decay · b + (1 - decay) · mean(R).

    The first batch starts it at its own mean. Â = R - b keeps the gradient unbiased (b does not depend on y).
    """
    check_ema_decay(decay)
    if baseline is None:
        return rewards.mean()
    return decay * baseline + (1 - decay) * rewards.mean()


def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """REINFORCE Leave-One-Out: each completion's baseline is the mean reward of the OTHER G - 1
    completions of the same prompt, so it does not depend on the completion itself:

        Â_i = R_i - (1 / (G - 1)) Σ_{j ≠ i} R_j

    ``rewards`` is (B,), laid out as B / G consecutive groups of ``group_size`` = G completions
    of one prompt each. Returns (B,); each group's advantages sum to 0.
    """
    R = _grouped(rewards, group_size)  # (B/G, G)
    baseline = (R.sum(dim=1, keepdim=True) - R) / (group_size - 1)  # mean over j ≠ i
    return _check_overflow((R - baseline).reshape(-1), rewards)


def kl_shaped_rewards(
    rewards: Tensor, old_logp: Tensor, ref_logp: Tensor | None, mask: Tensor, beta: float
) -> Tensor:
    """The reward with the KL leash folded in, one number per sequence (RLOO's recipe):

        R'(x, y) = R(x, y) - β Σ_t log p_θold(y_t|..)/p_ref(y_t|..)      (k1 summed over the response)

    ``rewards`` is (B,), the log-probs and ``mask`` (B, T). Without ``ref_logp`` (β = 0) R' = R.
    """
    if ref_logp is None:
        return rewards
    return rewards - beta * masked_sum(kl_k1(old_logp, ref_logp), mask, dim=-1)
