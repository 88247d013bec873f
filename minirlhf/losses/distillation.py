"""Distillation: the student p_θ matched to a teacher p_T over the whole vocabulary, at every token of the
student's own samples (on-policy distillation; Agarwal et al., 2023, "GKD", arXiv 2306.13649; TRL's
DistillationTrainer). Where RL scores a whole answer with one 0/1 reward, the teacher scores every token with a
full distribution: a dense signal.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from minirlhf.checks import check_interval, check_positive
from minirlhf.losses._contract import _check_same_shape, _zero_padding
from minirlhf.losses.aggregation import aggregate


def check_jsd_beta(beta: float, name: str = "beta") -> None:
    """β of the generalized JSD lies in [0, 1]: 0 is the forward KL, 1 the reverse KL, in between the mixtures.
    `name`: how the error names it."""
    check_interval(name, beta, 0.0, 1.0, why="0 = forward KL(p_T || p_θ), 1 = reverse KL(p_θ || p_T)")


def _check_logits(mask: Tensor, **logits: Tensor) -> None:
    """(B, T, V) logits over one vocabulary, the (B, T) mask their first two dimensions, no inf/NaN on a real
    token: a ValueError naming the argument (and the first such position) otherwise."""
    for name, x in logits.items():
        if x.dim() != 3 or tuple(x.shape[:2]) != tuple(mask.shape):
            raise ValueError(f"{name} must be (B, T, V) with (B, T) = the mask's shape {tuple(mask.shape)}, got "
                             f"{tuple(x.shape)}")
        if x.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(x.shape)}): a loss needs at least one sequence")
        bad = ~torch.isfinite(x.detach()).all(-1) & mask.bool()  # (B, T) a real token with an inf/NaN logit
        if bad.any():
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(f"{name} holds inf/NaN logits on {int(bad.sum())} real token(s), first at index {first}")
    _check_same_shape(**logits)


def generalized_jsd_per_token_loss(
    logits: Tensor, teacher_logits: Tensor, mask: Tensor, beta: float = 0.5, temperature: float = 1.0
) -> Tensor:
    """The generalized Jensen-Shannon divergence between the student's and the teacher's next-token distributions
    at each token, (B, T), 0 on padding. With p = softmax(logits / τ) (p_θ) and q = softmax(teacher_logits / τ)
    (p_T), summed over the vocabulary v:

        β = 0       KL(q || p) = Σ_v q_v (log q_v - log p_v)            forward KL: cover every teacher token
        β = 1       KL(p || q) = Σ_v p_v (log p_v - log q_v)            reverse KL: no mass where the teacher has none
        0 < β < 1   JSD_β = β KL(q || m) + (1 - β) KL(p || m),   m = (1 - β) p + β q      (β = 0.5: the JSD)

    as TRL's `generalized_jsd_loss` writes it (β = 0 and 1 are its two ends; JSD_β itself goes to 0 there, which
    is why they are set apart). The teacher is a constant: no gradient reaches `teacher_logits`. Logits are
    (B, T, V); each (b, t) is the prediction of the response token at t (its logits at the column before it);
    they are computed in float32 at least.
    """
    _check_logits(mask, logits=logits, teacher_logits=teacher_logits)
    check_jsd_beta(beta)
    check_positive("temperature", temperature)
    dtype = torch.promote_types(logits.dtype, torch.float32)  # half-precision logits in float32, float64 kept
    logits, teacher_logits = _zero_padding(mask[..., None].expand_as(logits), logits, teacher_logits.detach())
    log_p = F.log_softmax(logits.to(dtype) / temperature, dim=-1)  # (B, T, V) log p_θ
    log_q = F.log_softmax(teacher_logits.to(dtype) / temperature, dim=-1)  # (B, T, V) log p_T
    if beta == 0:
        per_token = (log_q.exp() * (log_q - log_p)).sum(-1)  # KL(q || p)
    elif beta == 1:
        per_token = (log_p.exp() * (log_p - log_q)).sum(-1)  # KL(p || q)
    else:
        log_m = torch.logaddexp(log_p + math.log(1 - beta), log_q + math.log(beta))  # log((1 - β) p + β q)
        kl_q_m = (log_q.exp() * (log_q - log_m)).sum(-1)  # KL(q || m)
        kl_p_m = (log_p.exp() * (log_p - log_m)).sum(-1)  # KL(p || m)
        per_token = beta * kl_q_m + (1 - beta) * kl_p_m
    (per_token,) = _zero_padding(mask, per_token)  # (B, T)
    return per_token


def generalized_jsd_loss(
    logits: Tensor, teacher_logits: Tensor, mask: Tensor, beta: float = 0.5, temperature: float = 1.0,
    aggregation: str = "token-mean",
) -> Tensor:
    """The distillation loss L(θ) = aggregate_t JSD_β(p_θ(·|x, y_<t), p_T(·|x, y_<t)) over the real tokens of the
    student's own samples y ~ p_θ: `generalized_jsd_per_token_loss` (its equations), reduced by ``aggregate``
    ("token-mean" by default: Σ_i,t JSD_β / Σ_i |y_i|, as TRL's DistillationTrainer).
    """
    return aggregate(generalized_jsd_per_token_loss(logits, teacher_logits, mask, beta, temperature), mask,
                     aggregation)
