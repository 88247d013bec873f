"""Masked reductions: how the per-token terms of every objective become one number.

Each per-token loss (``reinforce_per_token_loss``, ``ppo_clip_per_token_loss``, ``value_per_token_loss``,
``grpo_per_token_loss``) returns a (B, T) tensor, and its scalar loss is ``aggregate`` of it, so a loss written
per token elsewhere maps onto ours term by term, then through the same reduction.
"""

from __future__ import annotations

import torch
from torch import Tensor

from minirlhf.checks import check_choice, check_positive
from minirlhf.losses._contract import _check_real_tokens, _check_same_shape, _zero_padding

AGGREGATIONS = ("seq-sum", "seq-mean", "token-mean", "constant")


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ_t mask_t · x_t over ``dim`` (all entries when dim is None); padded x never contributes."""
    _check_same_shape(x=x, mask=mask)
    x = torch.where(mask.bool(), x, torch.zeros_like(x))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Σ mask·x / Σ mask over ``dim``. A row with no real tokens gives 0 instead of 0/0 = NaN."""
    count = mask.bool().sum() if dim is None else mask.bool().sum(dim)
    return masked_sum(x, mask, dim) / count.clamp_min(1)


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """Standardise the real entries of x to mean 0 and std 1 (PPO's optional advantage whitening).

        x̂ = (x - μ) / sqrt(σ² + eps),  μ, σ² = mean and sample variance over the real tokens

    The variance uses Bessel's correction (divide by n - 1), the same choice as
    ``grpo_advantages``. Padded entries of the output are 0, and so is every entry of a constant (its mean in
    float32 may miss it by a rounding error, which 1/sqrt(eps) would blow up). eps must be > 0.
    """
    _check_same_shape(x=x, mask=mask)
    check_positive("eps", eps, why="the floor under a zero variance: a constant whitens to 0, never 0/0")
    _check_real_tokens(mask, allow_empty=True, x=x)
    (x,) = _zero_padding(mask, x)
    mu = masked_mean(x, mask)
    n = mask.bool().sum().clamp_min(2)
    var = masked_sum((x - mu) ** 2, mask) / (n - 1)
    whitened = (x - mu) * torch.rsqrt(var + eps)
    real = x[mask.bool()]
    if real.numel() and bool(real.max() == real.min()):  # a constant: x - μ is 0 exactly, not its rounding error
        whitened = whitened * 0  # (kept in the graph: its gradient is 0 too)
    (whitened,) = _zero_padding(mask, whitened)
    return whitened


def aggregate(per_token: Tensor, mask: Tensor, aggregation: str, divisor: float | None = None) -> Tensor:
    """Reduce a (B, T) per-token quantity to a scalar. |y_i| = number of real tokens in row i.

        "seq-sum"    (1/B) Σ_i Σ_t x_i,t              sum inside a sequence, mean over sequences
        "seq-mean"   (1/B) Σ_i (1/|y_i|) Σ_t x_i,t    mean inside a sequence (GRPO paper)
        "token-mean" Σ_i Σ_t x_i,t / Σ_i |y_i|        every real token in the batch weighs the same
        "constant"   Σ_i Σ_t x_i,t / D                a fixed normaliser D (Dr. GRPO: D = B · T_max)

    For "constant", ``divisor`` is D, any positive number the caller chooses; None means D = B · T, the padded
    shape, which is meant for batches padded to the generation budget (max_new_tokens): extra padding columns
    rescale it by T / T'. A ``divisor`` with another aggregation is an error (those choose their own).
    """
    check_choice("aggregation", aggregation, AGGREGATIONS)
    if divisor is not None:
        if aggregation != "constant":
            raise ValueError(f"divisor only applies to aggregation='constant', got aggregation={aggregation!r}")
        check_positive("divisor", divisor)
    if aggregation == "seq-sum":
        return masked_sum(per_token, mask, dim=-1).mean()
    if aggregation == "seq-mean":
        return masked_mean(per_token, mask, dim=-1).mean()
    if aggregation == "token-mean":
        return masked_mean(per_token, mask)
    return masked_sum(per_token, mask) / (per_token.numel() if divisor is None else divisor)
