"""Entropy control: the entropy of p_θ as a quantity the loss steers. Three ways, each off by default:

    entropy bonus   L ← L - c_H · aggregate(H_t)                       every token, a push towards spread
    Clip-Cov        the gradient of a few high-covariance tokens is cut   Cui et al. 2025, arXiv:2505.22617
    KL-Cov          a KL leash on the highest-covariance tokens only       (verl "clip_cov", "kl_cov")

Why covariance (Cui et al., section 3): under a softmax policy and a policy-gradient step, the entropy of the
next-token distribution moves by about

    H(θ') - H(θ) ≈ -η · Cov_{y ~ p_θ}( log p_θ(y), p_θ(y) Â(y) )

so tokens that are already likely AND have a positive advantage (or unlikely and negative) lower the entropy.
On the sampled tokens of a batch that covariance is estimated token by token, centred over the batch's N real
tokens (log p_θ held constant: it chooses tokens, it is not a path of the gradient):

    Cov_t = ( log p_θ(y_t) - (1/N) Σ_s log p_θ(y_s) ) · ( Â_t - (1/N) Σ_s Â_s )

A handful of tokens carry most of it, so acting on ~0.02 % of them (the paper's and verl's default share) is
enough on a large model; a tiny batch of a few hundred tokens acts on one. Shapes and masks: see
``minirlhf.losses._contract``; the means above are over the real tokens of the tensors given (under gradient
accumulation, the micro-batch's, as verl's per-micro-batch loss).
"""

from __future__ import annotations

import torch
from torch import Tensor

from minirlhf.checks import check_choice, check_finite, check_interval, check_non_negative, check_positive
from minirlhf.losses._contract import _check_real_tokens, _check_same_shape, _per_token_advantages, _zero_padding
from minirlhf.losses.aggregation import aggregate, masked_mean
from minirlhf.losses.ppo import clipped_surrogate

COVARIANCE_LOSSES = ("clip-cov", "kl-cov")  # policy losses that act on the high-covariance tokens
COV_RATIO = 2e-4  # r (Clip-Cov) and k (KL-Cov): the share of real tokens acted on, verl's default for both
CLIP_COV_LB, CLIP_COV_UB = 1.0, 5.0  # ω_low, ω_high: Clip-Cov draws among tokens with Cov_t in (ω_low, ω_high)
KL_COV_COEF = 1.0  # β_KL: the weight of |log r_t| on KL-Cov's tokens (verl's ppo_kl_coef)


def entropy_bonus(entropy: Tensor, mask: Tensor, coef: float, aggregation: str = "token-mean") -> Tensor:
    """The entropy bonus, a term to ADD to a loss (to minimise), aggregated like the loss it joins:

        L_H = -c_H · aggregate(H_t),    H_t = -Σ_v p_θ(v | x, y_<t) log p_θ(v | x, y_<t)

    ``entropy`` (B, T) is H_t of each response position (``logprobs.response_logprobs(return_entropy=True,
    entropy_grad=True)``: its gradient must flow), ``mask`` (B, T), c_H = ``coef`` ≥ 0; 0 returns an exact 0.
    Aggregating like the policy loss keeps the two on one normaliser, so gradient accumulation and several
    processes weigh both alike (verl's agg_loss of the entropy). TRL always takes the token mean; the two agree
    at aggregation="token-mean".
    """
    check_non_negative("coef", coef, why="a bonus for spread; 0 turns it off")
    _check_same_shape(entropy=entropy, mask=mask)
    _check_real_tokens(mask, entropy=entropy)
    (entropy,) = _zero_padding(mask, entropy)
    return -coef * aggregate(entropy, mask, aggregation)


def token_covariance(logp: Tensor, advantages: Tensor, mask: Tensor) -> Tensor:
    """Cov_t = (log p_θ(y_t) - mean_s log p_θ(y_s)) · (Â_t - mean_s Â_s), the means over the real tokens, (B, T),
    0 on padding and detached (a selection score, not a loss). ``advantages`` (B,) or (B, T)."""
    advantages = _per_token_advantages(advantages, mask)  # (B, T), detached
    logp, advantages = _zero_padding(mask, logp.detach(), advantages)
    cov = (logp - masked_mean(logp, mask)) * (advantages - masked_mean(advantages, mask))  # (B, T)
    (cov,) = _zero_padding(mask, cov)
    return cov


def tokens_acted_on(share: float, real_tokens: int) -> int:
    """How many tokens Clip-Cov draws and KL-Cov penalises among N real ones: max(⌊share · N⌋, 1), as verl."""
    return max(int(share * real_tokens), 1)


def check_covariance_options(
    cov_ratio: float, clip_cov_lb: float = CLIP_COV_LB, clip_cov_ub: float = CLIP_COV_UB,
    kl_cov_coef: float = KL_COV_COEF,
) -> None:
    """0 < cov_ratio ≤ 1 (a share of the real tokens), ω_low < ω_high (finite: an interval of covariances),
    β_KL > 0."""
    check_interval("cov_ratio", cov_ratio, 0.0, 1.0, low_included=False, why="a share of the real tokens")
    check_finite("clip_cov_lb", clip_cov_lb)
    check_finite("clip_cov_ub", clip_cov_ub)
    if not clip_cov_lb < clip_cov_ub:
        raise ValueError(f"clip_cov_lb must be below clip_cov_ub (Clip-Cov draws tokens whose covariance lies "
                         f"between them), got {clip_cov_lb!r} and {clip_cov_ub!r}")
    check_positive("kl_cov_coef", kl_cov_coef, why="the weight of |log r| on KL-Cov's tokens")


def clip_cov_candidates(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float, eps_high: float | None = None,
    clip_cov_lb: float = CLIP_COV_LB, clip_cov_ub: float = CLIP_COV_UB,
) -> Tensor:
    """Clip-Cov's candidates C, a (B, T) bool: the real tokens whose covariance lies strictly inside
    (ω_low, ω_high) and that PPO's clip has not already stopped (clip(r_t) Â_t < r_t Â_t: the min takes the
    clipped term). Inputs as ``clip_cov_selection``, already checked."""
    advantages = _per_token_advantages(advantages, mask)  # (B, T)
    ratio = torch.exp(logp.detach() - old_logp)  # (B, T) r_t
    eps_high = eps if eps_high is None else eps_high
    already_clipped = torch.clamp(ratio, 1 - eps, 1 + eps_high) * advantages < ratio * advantages
    cov = token_covariance(logp, advantages, mask)  # (B, T)
    return mask.bool() & ~already_clipped & (cov > clip_cov_lb) & (cov < clip_cov_ub)


def _checked(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The covariance losses' inputs checked (shapes, inf/NaN on real tokens) and padded with 0; Â as (B, T)."""
    _check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    advantages = _per_token_advantages(advantages, mask)  # (B, T)
    _check_real_tokens(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    logp, old_logp, advantages = _zero_padding(mask, logp, old_logp, advantages)
    return logp, old_logp, advantages


def clip_cov_selection(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float, eps_high: float | None = None,
    *, cov_ratio: float = COV_RATIO, clip_cov_lb: float = CLIP_COV_LB, clip_cov_ub: float = CLIP_COV_UB,
    generator: torch.Generator | None = None,
) -> Tensor:
    """I_clip, a (B, T) bool: n = max(⌊r N⌋, 1) tokens drawn uniformly without replacement from the candidates C
    (``clip_cov_candidates``; all of C when |C| ≤ n). The draw is ``torch.randperm(|C|)`` from ``generator``
    (None: torch's global one, as verl) over C in row-major order, so extra padding columns draw the same tokens."""
    check_covariance_options(cov_ratio, clip_cov_lb, clip_cov_ub)
    logp, old_logp, advantages = _checked(logp, old_logp, advantages, mask)
    candidates = clip_cov_candidates(logp, old_logp, advantages, mask, eps, eps_high, clip_cov_lb, clip_cov_ub)
    positions = candidates.nonzero()  # (|C|, 2), row-major
    n = tokens_acted_on(cov_ratio, int(mask.bool().sum()))
    drawn = positions[torch.randperm(len(positions), generator=generator)[:n].to(positions.device)]  # (≤ n, 2)
    selected = torch.zeros_like(candidates)
    selected[drawn[:, 0], drawn[:, 1]] = True
    return selected


def kl_cov_selection(logp: Tensor, advantages: Tensor, mask: Tensor, *, cov_ratio: float = COV_RATIO) -> Tensor:
    """I_KL, a (B, T) bool: the n = max(⌊k N⌋, 1) real tokens of largest Cov_t (k = ``cov_ratio``)."""
    check_covariance_options(cov_ratio)
    logp, _, advantages = _checked(logp, logp, advantages, mask)
    real = mask.bool()
    cov = torch.where(real, token_covariance(logp, advantages, mask), -torch.inf)  # (B, T): padding never chosen
    n = min(tokens_acted_on(cov_ratio, int(real.sum())), int(real.sum()))
    selected = torch.zeros_like(real)
    selected.view(-1)[cov.reshape(-1).topk(n).indices] = True
    return selected


def clip_cov_per_token_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float, eps_high: float | None = None,
    *, cov_ratio: float = COV_RATIO, clip_cov_lb: float = CLIP_COV_LB, clip_cov_ub: float = CLIP_COV_UB,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Clip-Cov (Cui et al. 2025, arXiv:2505.22617, as verl's compute_policy_loss_clip_cov): PPO's clipped loss,
    with the gradient of a few high-covariance tokens cut.

        C      = { real t : ω_low < Cov_t < ω_high,  PPO's clip not active at t }
        I_clip = n tokens drawn uniformly without replacement from C (all of C when |C| ≤ n),
                 n = max(⌊r · N⌋, 1)
        ℓ_t    = -min( r_t Â_t, clip(r_t, 1 - ε, 1 + ε_high) Â_t )      t ∉ I_clip
        ℓ_t    = 0                                                      t ∈ I_clip

    r = ``cov_ratio``, ω_low, ω_high = ``clip_cov_lb``, ``clip_cov_ub``; I_clip is ``clip_cov_selection`` (the
    same ``generator`` draws the same tokens). A token of I_clip has no value and no gradient (verl multiplies its
    term by 0; the paper writes "detach"); aggregation still counts it. ``advantages`` (B,) or (B, T). Returns
    ℓ (B, T), 0 on padding.
    """
    selected = clip_cov_selection(logp, old_logp, advantages, mask, eps, eps_high, cov_ratio=cov_ratio,
                                  clip_cov_lb=clip_cov_lb, clip_cov_ub=clip_cov_ub, generator=generator)  # I_clip
    logp, old_logp, advantages = _checked(logp, old_logp, advantages, mask)
    loss = -clipped_surrogate(torch.exp(logp - old_logp), advantages, eps, eps_high)  # (B, T) PPO's ℓ_t
    (loss,) = _zero_padding(mask.bool() & ~selected, loss)
    return loss


def kl_cov_per_token_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor,
    *, cov_ratio: float = COV_RATIO, kl_cov_coef: float = KL_COV_COEF,
) -> Tensor:
    """KL-Cov (Cui et al. 2025, arXiv:2505.22617, as verl's compute_policy_loss_kl_cov): the unclipped policy
    gradient loss, with a KL penalty on the tokens of largest covariance.

        I_KL = the n real tokens of largest Cov_t,     n = max(⌊k · N⌋, 1)
        ℓ_t  = -r_t Â_t + β_KL · |log r_t| · 1[t ∈ I_KL],     r_t = p_θ(y_t) / p_θold(y_t)

    k = ``cov_ratio``, β_KL = ``kl_cov_coef``; I_KL is ``kl_cov_selection``. |log r_t| = |log p_θ(y_t) -
    log p_θold(y_t)| estimates KL(p_θold ‖ p_θ) at the token. There is no clip: the leash on I_KL is KL-Cov's
    trust region (the paper's equation and verl's code). On-policy (r_t = 1) the penalty and its gradient are 0,
    so it acts from the second update of a batch on (``epochs`` > 1 or several minibatches). Returns ℓ (B, T), 0
    on padding.
    """
    check_positive("kl_cov_coef", kl_cov_coef)
    selected = kl_cov_selection(logp, advantages, mask, cov_ratio=cov_ratio)  # I_KL
    logp, old_logp, advantages = _checked(logp, old_logp, advantages, mask)
    log_ratio = logp - old_logp  # (B, T) log r_t
    loss = -torch.exp(log_ratio) * advantages + kl_cov_coef * log_ratio.abs() * selected  # (B, T) ℓ_t
    (loss,) = _zero_padding(mask, loss)
    return loss


def clip_cov_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float, eps_high: float | None = None,
    aggregation: str = "token-mean", *, cov_ratio: float = COV_RATIO, clip_cov_lb: float = CLIP_COV_LB,
    clip_cov_ub: float = CLIP_COV_UB, generator: torch.Generator | None = None,
) -> Tensor:
    """Clip-Cov's loss, L = aggregate(ℓ) of ``clip_cov_per_token_loss`` (GRPO's: grpo_loss(policy_loss=
    "clip-cov"), which adds β·k3 and the logs)."""
    return aggregate(clip_cov_per_token_loss(logp, old_logp, advantages, mask, eps, eps_high, cov_ratio=cov_ratio,
                                             clip_cov_lb=clip_cov_lb, clip_cov_ub=clip_cov_ub, generator=generator),
                     mask, aggregation)


def kl_cov_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, aggregation: str = "token-mean",
    *, cov_ratio: float = COV_RATIO, kl_cov_coef: float = KL_COV_COEF,
) -> Tensor:
    """KL-Cov's loss, L = aggregate(ℓ) of ``kl_cov_per_token_loss`` (GRPO's: grpo_loss(policy_loss="kl-cov"))."""
    return aggregate(kl_cov_per_token_loss(logp, old_logp, advantages, mask, cov_ratio=cov_ratio,
                                           kl_cov_coef=kl_cov_coef), mask, aggregation)


def covariance_share(
    policy_loss: str, logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float,
    eps_high: float | None = None, *, cov_ratio: float = COV_RATIO, clip_cov_lb: float = CLIP_COV_LB,
    clip_cov_ub: float = CLIP_COV_UB,
) -> float:
    """The share of real tokens that ``policy_loss`` acts on, for the logs, counted without drawing:
    min(n, |C|) / N for Clip-Cov, min(n, N) / N for KL-Cov (0 when N = 0)."""
    check_choice("policy_loss", policy_loss, COVARIANCE_LOSSES)
    real = int(mask.bool().sum())
    if real == 0:
        return 0.0
    pool = real if policy_loss == "kl-cov" else int(
        clip_cov_candidates(logp, old_logp, advantages, mask, eps, eps_high, clip_cov_lb, clip_cov_ub).sum())
    return min(tokens_acted_on(cov_ratio, real), pool) / real
