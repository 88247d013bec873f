"""Losses and advantage estimators for post-training, written as plain functions on tensors.

Nothing in this file knows about models, tokenizers or trainers: every function takes the
numbers the lecture writes down (log-probabilities, rewards, values) and returns the
quantity on the slide. Each docstring states the equation in the lecture's notation and the
body computes it term by term.

Notation
--------
p_θ       the policy being trained          logp      log p_θ(y_t | x, y_<t)
p_θold    the policy that sampled the data  old_logp  log p_θold(y_t | x, y_<t)
p_ref     the frozen reference model        ref_logp  log p_ref(y_t | x, y_<t)
r_t(θ)    p_θ / p_θold, the probability ratio of token t
Â         advantage, ε clip range, β KL coefficient, G group size, V(s_t) value

Shapes and masks
----------------
B is the number of sequences (completions) in the batch, T the number of response positions.
Per-token tensors are (B, T); per-sequence tensors are (B,). ``mask`` is a (B, T) float or
bool tensor that is 1/True on real response tokens and 0/False on padding. Padding can hold
anything, even inf or NaN: every function first overwrites padded entries with 0 using
``torch.where`` (a multiplication would turn ``0 * inf`` into NaN), so padding never changes a
value, and the gradient that flows back into a padded entry is exactly 0.

Empty and non-finite inputs
---------------------------
One rule for every function: what is computed elementwise (advantages, ``gae``, ``kl_k*``) maps an
empty batch to an empty result; a loss, which averages over the batch, raises a ValueError naming
the argument when it is empty (a mean over nothing is 0/0). An inf or NaN on a REAL token of a loss's
input is an error naming the argument and the first such position, since it would turn the loss
and every gradient into NaN; padding may hold anything, as said above.

Sign conventions
----------------
* ``*_loss`` functions return something to MINIMISE (the negated objective, for losses built
  from an objective). Those that also return ``stats`` give a dict of python floats for logging.
* ``clipped_surrogate`` returns the PPO objective, something to MAXIMISE, elementwise.
* ``*_advantages`` and ``gae`` return advantages; ``kl_k*`` return per-token KL estimates.
* Advantages passed into a loss are treated as constants (detached): the gradient flows only
  through the policy's log-probabilities.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from minirlhf.checks import check_choice, check_count, check_interval, check_non_negative, check_positive

AGGREGATIONS = ("seq-sum", "seq-mean", "token-mean", "constant")
GRPO_SCALES = ("group", "batch", "none")
DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge")
IPO_NORMALISATIONS = ("sum", "mean")
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
CONSTANT_GROUP_STD = 1e-4  # a group whose rewards' std is below this is constant: nothing to learn, advantages 0


# ----------------------------------------------------------------------------- input checks


def _check_same_shape(**tensors: Tensor | None) -> None:
    """Raise a ValueError listing every argument and its shape unless all shapes agree."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        listing = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"shape mismatch: {listing} must all have the same shape")


def _check_real_tokens(mask: Tensor | None, **tensors: Tensor | None) -> None:
    """Raise a ValueError naming the argument that is empty, or that holds inf/NaN on a real token (mask = 1);
    without a mask every entry counts as real."""
    for name, t in tensors.items():
        if t is None:
            continue
        if t.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}): a loss needs at least one sequence")
        bad = ~torch.isfinite(t.detach())
        if mask is not None:
            bad = bad & mask.bool()
        if bad.any():
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(f"{name} holds {int(bad.sum())} inf/NaN value(s) on real tokens, first at index {first} "
                             f"({t[first].item()})")


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """Check a (B,) reward vector and reshape it to (B / G, G): one row per prompt."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (B,), got shape {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf")
    check_group_size(group_size)
    if rewards.numel() % group_size:
        raise ValueError(f"group_size must divide the batch size {rewards.numel()}, got {group_size!r}")
    return rewards.view(-1, group_size)


def _check_overflow(advantages: Tensor, rewards: Tensor) -> Tensor:
    """Finite rewards can still overflow float32 when summed for a mean (|R| near 3.4e38): say so."""
    if not torch.isfinite(advantages).all():
        raise ValueError(
            f"advantages overflow float32: rewards reach {rewards.abs().max().item():.3g}, too large to average; "
            f"rescale the reward function (|R| within ~1e3 is plenty)"
        )
    return advantages


# The checks of the methods' settings: the losses run them, and the configs call them (the rule lives here once).


def check_group_size(group_size: int) -> None:
    """G >= 2: the group is the baseline (GRPO's mean and std, RLOO's mean of the others), and one answer has none."""
    check_count("group_size", group_size, minimum=2, why="a group of one has no baseline")


def check_gae(gamma: float, lam: float) -> None:
    """γ and λ of GAE are weights of future terms: both in [0, 1]."""
    check_interval("gamma", gamma, 0.0, 1.0)
    check_interval("lam", lam, 0.0, 1.0)


def check_ema_decay(decay: float) -> None:
    """The EMA baseline's decay lies in [0, 1): at 1 the baseline would never move from its first value."""
    check_interval("ema_decay", decay, 0, 1, high_included=False)


def check_dpo_options(
    beta: float, loss_type: str, label_smoothing: float, ipo_normalisation: str = "sum", rpo_alpha: float = 0.0
) -> None:
    """β > 0, a known loss type, label smoothing ls in [0, 0.5] for the sigmoid (DPO) loss only, a known IPO
    normalisation ("mean" for loss_type="ipo" only) and an NLL weight α >= 0."""
    check_positive("beta", beta)
    check_choice("loss_type", loss_type, DPO_LOSS_TYPES)
    check_label_smoothing(label_smoothing, loss_type)
    check_choice("ipo_normalisation", ipo_normalisation, IPO_NORMALISATIONS)
    if ipo_normalisation != "sum" and loss_type != "ipo":
        raise ValueError(f"ipo_normalisation only applies to loss_type='ipo', got {loss_type!r}")
    check_non_negative("rpo_alpha", rpo_alpha)


def check_label_smoothing(label_smoothing: float, loss_type: str) -> None:
    """Label smoothing ls in [0, 0.5], and for the sigmoid (DPO) loss alone: the one loss of the family it is
    defined for (every other loss type, in the DPO family or not, takes ls = 0)."""
    check_interval("label_smoothing", label_smoothing, 0.0, 0.5)
    if label_smoothing and loss_type != "sigmoid":
        raise ValueError(f"label_smoothing only applies to loss_type='sigmoid', got {loss_type!r}")


def _zero_padding(mask: Tensor, *tensors: Tensor | None) -> tuple[Tensor | None, ...]:
    """Replace padded entries with 0 (torch.where, so inf/NaN there cannot leak into gradients).
    A None passes through unchanged."""
    keep = mask.bool()
    return tuple(None if t is None else torch.where(keep, t, torch.zeros_like(t)) for t in tensors)


def _per_token_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """Accept (B,) sequence-level or (B, T) token-level advantages; return a detached (B, T)."""
    if advantages.dim() == 1 and advantages.shape[0] == mask.shape[0]:
        advantages = advantages[:, None].expand_as(mask)  # (B,) -> (B, T)
    _check_same_shape(advantages=advantages, mask=mask)
    return advantages.detach()


# ----------------------------------------------------------------------------- masked reductions


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
    ``grpo_advantages``. Padded entries of the output are 0.
    """
    (x,) = _zero_padding(mask, x)
    mu = masked_mean(x, mask)
    n = mask.bool().sum().clamp_min(2)
    var = masked_sum((x - mu) ** 2, mask) / (n - 1)
    (whitened,) = _zero_padding(mask, (x - mu) * torch.rsqrt(var + eps))
    return whitened


def aggregate(per_token: Tensor, mask: Tensor, aggregation: str) -> Tensor:
    """Reduce a (B, T) per-token quantity to a scalar. |y_i| = number of real tokens in row i.

        "seq-sum"    (1/B) Σ_i Σ_t x_i,t              sum inside a sequence, mean over sequences
        "seq-mean"   (1/B) Σ_i (1/|y_i|) Σ_t x_i,t    mean inside a sequence (GRPO paper)
        "token-mean" Σ_i Σ_t x_i,t / Σ_i |y_i|        every real token in the batch weighs the same
        "constant"   Σ_i Σ_t x_i,t / (B · T_max)      fixed normaliser (Dr. GRPO); T_max = T

    "constant" divides by the padded width T, so it is meant for batches padded to the
    generation budget (max_new_tokens); extra padding columns rescale it by T / T'.
    """
    check_choice("aggregation", aggregation, AGGREGATIONS)
    if aggregation == "seq-sum":
        return masked_sum(per_token, mask, dim=-1).mean()
    if aggregation == "seq-mean":
        return masked_mean(per_token, mask, dim=-1).mean()
    if aggregation == "token-mean":
        return masked_mean(per_token, mask)
    return masked_sum(per_token, mask) / per_token.numel()


# ----------------------------------------------------------------------------- KL estimators


def kl_k1(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k1 = log p_θ(y_t) - log p_ref(y_t). Unbiased for KL(p_θ || p_ref) when y_t ~ p_θ,
    but high variance and often negative for a single token. Returns (B, T)."""
    _check_same_shape(logp=logp, ref_logp=ref_logp)
    return logp - ref_logp


def kl_k2(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k2 = ½ (log p_θ(y_t) - log p_ref(y_t))². Never negative and low variance, but BIASED:
    its expectation matches KL(p_θ || p_ref) only to second order. Returns (B, T)."""
    return 0.5 * kl_k1(logp, ref_logp) ** 2


KL_K3_LINEAR_ABOVE = 20.0  # D: beyond d = D, k3 continues along its tangent (e^20 ≈ 4.9e8) instead of e^d
KL_K3_LINEAR_ABOVE_FP16 = 10.0  # D for float16 inputs: the slope e^10 ≈ 2.2e4 still fits float16 (max 65504)


def kl_k3(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """k3 = p_ref/p_θ - log(p_ref/p_θ) - 1 with y_t ~ p_θ. Unbiased (E[p_ref/p_θ] = 1) and never
    negative (e^d ≥ 1 + d). With d = log p_ref - log p_θ it is e^d - 1 - d, computed as
    expm1(d) - d, which stays accurate when d is tiny. Returns (B, T), in float32 at least.

    e^d overflows float32 at d ≈ 89 (float16 at d ≈ 11). For d > D (KL_K3_LINEAR_ABOVE = 20: a
    token that p_ref finds e^20 times likelier than p_θ does) k3 follows its tangent at D instead:
        k3(d) = e^D - 1 - D + (e^D - 1)(d - D)
    continuous, convex, with the gradient it has at D, so the KL still pulls on such a token,
    and finite for every finite input. Half-precision inputs are computed (and returned) in
    float32; for float16 inputs D = 10, so that the gradient flowing back into them fits too."""
    _check_same_shape(logp=logp, ref_logp=ref_logp)
    half = torch.float16 in (logp.dtype, ref_logp.dtype)
    bound = KL_K3_LINEAR_ABOVE_FP16 if half else KL_K3_LINEAR_ABOVE
    dtype = torch.promote_types(torch.promote_types(logp.dtype, ref_logp.dtype), torch.float32)
    d = ref_logp.to(dtype) - logp.to(dtype)
    d_low = d.clamp(max=bound)  # = d up to D
    return torch.expm1(d_low) - d_low + torch.expm1(d_low) * (d - d_low)  # the tangent's slope e^D - 1 beyond D


# ----------------------------------------------------------------------------- REINFORCE / RLOO


def reinforce_loss(logp: Tensor, advantages: Tensor, mask: Tensor, aggregation: str = "seq-sum") -> Tensor:
    """Policy-gradient surrogate L(θ) = -E[Â · log p_θ(y|x)], whose gradient is the REINFORCE
    estimate -E[(R - b) ∇_θ log p_θ(y|x)] when Â = R - b.

    By default ("seq-sum") the token log-probs of a sequence are summed, which gives
    log p_θ(y|x) = Σ_t log p_θ(y_t|x, y_<t), and the result is averaged over the B sequences:
        L = -(1/B) Σ_i Σ_t Â_i,t log p_θ(y_i,t | x_i, y_i,<t)
    ``advantages`` is (B,) (one Â per sequence, broadcast over its tokens) or (B, T).
    Other ``aggregation`` choices are listed in ``aggregate``.
    """
    _check_same_shape(logp=logp, mask=mask)
    advantages = _per_token_advantages(advantages, mask)  # (B, T)
    _check_real_tokens(mask, logp=logp, advantages=advantages)
    logp, advantages = _zero_padding(mask, logp, advantages)
    return -aggregate(advantages * logp, mask, aggregation)


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


def ema_baseline(baseline: Tensor | None, rewards: Tensor, decay: float) -> Tensor:
    """A moving-average baseline, a cheap value estimate: b <- decay · b + (1 - decay) · mean(R).

    The first batch starts it at its own mean. Â = R - b keeps the gradient unbiased (b does not depend on y).
    """
    check_ema_decay(decay)
    if baseline is None:
        return rewards.mean()
    return decay * baseline + (1 - decay) * rewards.mean()


# ----------------------------------------------------------------------------- PPO


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over the response tokens, right-padded (B, T).

        δ_t = r_t + γ V(s_{t+1}) - V(s_t)           V after the last real token is 0 (terminal)
        Â_t = Σ_l (γλ)^l δ_{t+l} = δ_t + γλ Â_{t+1}
        returns_t = Â_t + V(s_t)                     the value-function target

    λ = 0 gives the one-step TD error, λ = 1 the discounted return minus V(s_t).
    Returns (advantages, returns), both (B, T) with zeros at padded positions.
    """
    _check_same_shape(rewards=rewards, values=values, mask=mask)
    check_gae(gamma, lam)
    rewards, values = _zero_padding(mask, rewards, values)  # padding: r = 0, V = 0
    next_value = values.new_zeros(values.shape[0])  # (B,) V(s_T) = 0
    next_adv = values.new_zeros(values.shape[0])  # (B,)
    advantages = [values.new_zeros(values.shape[0], 0)]  # (B, 0): an empty batch gives empty advantages
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]  # δ_t
        (next_adv,) = _zero_padding(mask[:, t], delta + gamma * lam * next_adv)  # Â_t
        next_value = values[:, t]
        advantages.append(next_adv[:, None])
    advantages = torch.cat(advantages[::-1], dim=1)  # (B, T)
    (returns,) = _zero_padding(mask, advantages + values)
    return advantages, returns


def token_rewards(rewards: Tensor, mask: Tensor, kl: Tensor | None = None, beta: float = 0.0) -> Tensor:
    """Per-token rewards (B, T) from sequence rewards (B,) and per-token KL estimates (B, T):

        r_t = -β · kl_t  +  R(x, y) on the last real token of the response;   0 on padding

    so that Σ_t r_t = R(x, y) - β Σ_t kl_t. ``mask`` is right-padded (every response starts at column 0), so
    the last real token is column |y| - 1.
    """
    r = torch.zeros(mask.shape, dtype=torch.float32, device=mask.device)  # (B, T)
    if kl is not None and beta > 0:
        r = r - beta * kl
    last = (mask.sum(-1).long() - 1).clamp_min(0)  # (B,) column of each response's last token (EOS if any)
    r[torch.arange(mask.shape[0], device=mask.device), last] += rewards
    return torch.where(mask.bool(), r, torch.zeros_like(r))


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """1 - Var(R_t - V) / Var(R_t) over real tokens: 1 = V predicts the returns, 0 = no better than a constant."""
    var_returns = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    residual = returns - values
    var_residual = masked_mean((residual - masked_mean(residual, mask)) ** 2, mask)
    return (1 - var_residual / var_returns.clamp_min(1e-8)).item()


def clipped_surrogate(ratio: Tensor, advantages: Tensor, eps: float, eps_high: float | None = None) -> Tensor:
    """PPO's clipped objective, elementwise, to MAXIMISE (broadcasts like ``ratio * advantages``):

        min( r_t(θ) Â_t,  clip(r_t(θ), 1 - ε_low, 1 + ε_high) Â_t ),    ε_low = ``eps``

    ``eps_high`` = None means ε_high = ε_low, PPO's symmetric clip; DAPO's clip-higher takes ε_high > ε_low
    (0.28 against 0.2), so a token with Â > 0 can gain more before its gradient stops: unlikely tokens can
    grow, and entropy does not collapse as fast. Where the clipped term is the smaller one the result is constant
    in r, so its gradient is 0. At r exactly on an edge both terms are equal and the gradient is Â, unclipped.
    """
    eps_high = eps if eps_high is None else eps_high
    check_positive("eps", eps)
    check_positive("eps_high", eps_high)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1 - eps, 1 + eps_high) * advantages
    return torch.minimum(unclipped, clipped)


def _clip_fractions(
    ratio: Tensor, advantages: Tensor, eps: float, eps_high: float | None, mask: Tensor
) -> dict[str, float]:
    """Fractions of the real entries where the clip is active, TRL's ``clip_ratio/low_mean``, ``high_mean`` and
    ``region_mean``: low = Â < 0 and r < 1 - ε_low, high = Â > 0 and r > 1 + ε_high, clip_frac = either."""
    eps_high = eps if eps_high is None else eps_high
    low = (advantages < 0) & (ratio < 1 - eps)
    high = (advantages > 0) & (ratio > 1 + eps_high)
    return {
        "clip_frac": masked_mean((low | high).float(), mask).item(),
        "clip_frac_low": masked_mean(low.float(), mask).item(),
        "clip_frac_high": masked_mean(high.float(), mask).item(),
    }


def ppo_clip_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float, eps_high: float | None = None
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped policy loss, averaged over all real tokens of the batch:

        L(θ) = -E_t[ min( r_t(θ) Â_t, clip(r_t(θ), 1 - ε, 1 + ε_high) Â_t ) ],
        r_t(θ) = p_θ(y_t|x, y_<t) / p_θold(y_t|x, y_<t) = exp(logp - old_logp)

    ``advantages`` is (B, T) or (B,). ``eps_high`` sets 1 + ε_high as the upper edge (clip-higher,
    see ``clipped_surrogate``); None keeps the symmetric clip. stats: ``clip_frac`` (fraction of real
    tokens whose gradient is zeroed by the clip) split into ``clip_frac_low`` (Â < 0, r < 1 - ε) and
    ``clip_frac_high`` (Â > 0, r > 1 + ε_high), ``approx_kl`` (k3 estimate of KL(p_θold || p_θ),
    samples came from p_θold), ``ratio_mean``.
    """
    _check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    advantages = _per_token_advantages(advantages, mask)  # (B, T)
    _check_real_tokens(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    logp, old_logp, advantages = _zero_padding(mask, logp, old_logp, advantages)
    ratio = torch.exp(logp - old_logp)  # (B, T) r_t(θ)
    loss = -masked_mean(clipped_surrogate(ratio, advantages, eps, eps_high), mask)
    with torch.no_grad():
        stats = {
            **_clip_fractions(ratio, advantages, eps, eps_high, mask),
            "approx_kl": masked_mean(kl_k3(old_logp, logp), mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
        }
    return loss, stats


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float | None = None
) -> Tensor:
    """Squared-error loss for the value head, averaged over real tokens:

        L_V = ½ E_t[ (V(s_t) - R_t)² ]                                          (clip=None)
        L_V = ½ E_t[ max( (V - R_t)², (V_old + clip(V - V_old, -c, c) - R_t)² ) ]  (clip=c)

    The clipped form (PPO's value clipping) keeps the larger of the two errors. Once V has moved more than c
    away from the value V_old recorded at rollout time and the clipped value V_old ± c is further from R_t
    than V is, the clipped term is the larger one and is constant in V: that token's gradient is 0, so it
    stops pulling V further.
    It removes the incentive, it does not bound V: other tokens (through shared weights) can still move it.
    """
    _check_same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    _check_real_tokens(mask, values=values, old_values=old_values, returns=returns)
    values, old_values, returns = _zero_padding(mask, values, old_values, returns)
    squared_error = (values - returns) ** 2  # (B, T)
    if clip is not None:
        check_positive("clip", clip)
        clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
        squared_error = torch.maximum(squared_error, (clipped_values - returns) ** 2)
    return 0.5 * masked_mean(squared_error, mask)


# ----------------------------------------------------------------------------- GRPO


def grpo_advantages(
    rewards: Tensor, group_size: int, scale: str = "group", eps: float = CONSTANT_GROUP_STD
) -> Tensor:
    """Group-relative advantages: compare each completion with the others of its prompt.

        Â_i = (R_i - mean(R_group)) / std(R_group)        scale="group" (GRPO)
        Â_i = (R_i - mean(R_group)) / std(R_batch)        scale="batch"
        Â_i =  R_i - mean(R_group)                        scale="none"  (Dr. GRPO)

    std is the SAMPLE standard deviation (divide by G - 1, torch.std's default). The GRPO paper
    does not say which one it means; TRL's GRPOTrainer uses torch.std, and we match it so the two
    can be cross-checked. A group whose std is below ``eps`` counts as constant: all its
    completions are equally good, there is nothing to learn, and its advantages are exactly 0.
    This also stops float noise (rewards 1, 1 + 1e-7, ...) from being divided by a tiny std
    and blown up into ±1-sized advantages. ``rewards`` is (B,) in consecutive groups of G.
    """
    check_choice("scale", scale, GRPO_SCALES)
    check_positive("eps", eps)
    R = _grouped(rewards, group_size)  # (B/G, G)
    if R.numel() == 0:
        return rewards.new_zeros(0)  # no groups, no advantages (and no std of nothing)
    centred = R - R.mean(dim=1, keepdim=True)  # R_i - mean(group)
    group_std = R.std(dim=1, keepdim=True)  # (B/G, 1), sample std
    if scale == "group":
        centred = centred / group_std.clamp_min(eps)
    elif scale == "batch":
        centred = centred / rewards.std().clamp_min(eps)
    constant = group_std < eps  # (B/G, 1)
    return _check_overflow(torch.where(constant, torch.zeros_like(centred), centred).reshape(-1), rewards)


def grpo_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    eps: float,
    beta: float,
    aggregation: str = "seq-mean",
    *,
    eps_high: float | None = None,
    importance_sampling_level: str = "token",
) -> tuple[Tensor, dict[str, float]]:
    """GRPO loss: PPO's clipped objective with one advantage per sequence and a k3 KL penalty.

        J_t = min( r_t Â_i, clip(r_t, 1 - ε, 1 + ε_high) Â_i ) - β · k3_t,
        k3_t = p_ref/p_θ - log(p_ref/p_θ) - 1,     L = -aggregate(J)

    ``eps_high`` = None means ε_high = ε (GRPO); DAPO's clip-higher sets it larger (see ``clipped_surrogate``).
    ``importance_sampling_level`` = "sequence" (GSPO) puts the sequence ratio s_i of ``sequence_ratio`` in
    place of every r_t of sequence i, clipped once per sequence; the k3 term stays per token.

    ``advantages`` is (B,). ``aggregation`` (see ``aggregate``) decides how tokens are weighted:
    * "seq-mean" (GRPO paper): each sequence counts once, so a token of a length-|y| answer
      gets weight 1/|y|. A short correct answer gets a strong per-token push up, while a long
      wrong answer spreads its penalty thin: wrong answers are nudged to grow longer.
    * "token-mean" (DAPO): every real token in the batch has the same weight; no per-sequence
      length bias, though the weight still depends on the total tokens in the batch.
    * "constant" (Dr. GRPO): divide by the fixed B · T_max, removing the length dependence.
    With β = 0 the KL term is skipped and ``ref_logp`` may be None. stats: ``clip_frac`` and its two sides
    ``clip_frac_low``, ``clip_frac_high`` (see ``ppo_clip_loss``; over real tokens, or over the B sequences at the
    sequence level, as TRL counts them), ``ratio_mean`` and, when ``ref_logp`` is given, ``kl`` (mean k3 over real
    tokens).
    """
    check_choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    check_non_negative("beta", beta)
    if beta > 0 and ref_logp is None:
        raise ValueError("ref_logp is required when beta > 0")
    _check_same_shape(logp=logp, old_logp=old_logp, ref_logp=ref_logp, mask=mask)
    if advantages.shape != mask.shape[:1]:
        raise ValueError(f"advantages must be (B,) = {tuple(mask.shape[:1])}, got {tuple(advantages.shape)}")
    (row_advantages,) = _zero_padding(mask.bool().any(-1), advantages.detach())  # (B,) Â_i; 0 for an empty row
    advantages = _per_token_advantages(advantages, mask)  # (B,) -> (B, T)
    _check_real_tokens(mask, logp=logp, old_logp=old_logp, ref_logp=ref_logp, advantages=advantages)
    logp, old_logp, ref_logp, advantages = _zero_padding(mask, logp, old_logp, ref_logp, advantages)
    if importance_sampling_level == "token":
        ratio = torch.exp(logp - old_logp)  # (B, T) r_t(θ)
        objective = clipped_surrogate(ratio, advantages, eps, eps_high)  # (B, T)
    else:
        ratio = sequence_ratio(logp, old_logp, mask)  # (B,) s_i(θ)
        objective = clipped_surrogate(ratio, row_advantages, eps, eps_high)[:, None].expand_as(mask)  # (B, T)
    kl = None if ref_logp is None else kl_k3(logp, ref_logp)  # (B, T) k3_t
    if beta > 0:
        objective = objective - beta * kl
    loss = -aggregate(objective, mask, aggregation)
    with torch.no_grad():
        if importance_sampling_level == "token":
            stats = {**_clip_fractions(ratio, advantages, eps, eps_high, mask),
                     "ratio_mean": masked_mean(ratio, mask).item()}
        else:  # one entry per sequence, every sequence counted (TRL's clip_ratio at the sequence level)
            every = torch.ones_like(ratio)
            stats = {**_clip_fractions(ratio, row_advantages, eps, eps_high, every), "ratio_mean": ratio.mean().item()}
        if kl is not None:
            stats["kl"] = masked_mean(kl, mask).item()
    return loss, stats


# ----------------------------------------------------------------------------- preferences


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    *,
    chosen_lengths: Tensor | None = None,
    rejected_lengths: Tensor | None = None,
    ipo_normalisation: str = "sum",
    rpo_alpha: float = 0.0,
    all_chosen_lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Direct preference optimisation on (B,) sequence log-probs of chosen y_w and rejected y_l.

        h = [log p_θ(y_w|x) - log p_ref(y_w|x)] - [log p_θ(y_l|x) - log p_ref(y_l|x)]
        "sigmoid": -(1 - ls) log σ(β h) - ls log σ(-β h)    DPO; ls > 0 = conservative DPO
        "ipo":     (h - 1 / (2β))²                          IPO (Azar et al.)
        "hinge":   max(0, 1 - β h)                          SLiC-style hinge

    ``label_smoothing`` (ls) assumes a fraction ls of the labels are flipped; it applies to
    "sigmoid" only. Returns per-pair losses (B,) and the implicit rewards β log(p_θ/p_ref) of the
    chosen and rejected answers, both (B,) and detached (for logging, as TRL does).

    IPO's h, ``ipo_normalisation``: "sum" (default) is the paper's, log-ratios of whole sequences; "mean"
    divides each log-ratio by its token count, h = (1/|y_w|) log p_θ/p_ref (y_w) - (1/|y_l|) log p_θ/p_ref (y_l),
    which is TRL's loss_type="ipo" (its 1/(2β) target then does not grow with the answers' length).

    ``rpo_alpha`` = α > 0 adds the NLL of the chosen answers (RPO, Pang et al. 2024; TRL 1.16 writes it
    loss_type=["sigmoid", "sft"], loss_weights=[1, α]), normalised per token over the batch as TRL does:

        L_i += α · (-log p_θ(y_w,i|x_i)) / mean_j |y_w,j|
        mean_i L_i = mean_i DPO_i + α · (-Σ_i log p_θ(y_w,i|x_i) / Σ_i |y_w,i|)     the NLL per chosen token

    It stops the chosen answers' likelihood from falling while the margin h grows. "mean" and α > 0 need the
    (B,) token counts ``chosen_lengths`` |y_w| (and ``rejected_lengths`` |y_l| for "mean"). When these B pairs are
    one process's share of a batch, ``all_chosen_lengths`` holds |y_w| of the whole batch: the mean over j is taken
    over it, so that the processes' mean losses average to the whole batch's NLL per chosen token.
    """
    _check_same_shape(
        policy_chosen_logps=policy_chosen_logps,
        policy_rejected_logps=policy_rejected_logps,
        ref_chosen_logps=ref_chosen_logps,
        ref_rejected_logps=ref_rejected_logps,
    )
    _check_real_tokens(
        None,
        policy_chosen_logps=policy_chosen_logps,
        policy_rejected_logps=policy_rejected_logps,
        ref_chosen_logps=ref_chosen_logps,
        ref_rejected_logps=ref_rejected_logps,
    )
    check_dpo_options(beta, loss_type, label_smoothing, ipo_normalisation, rpo_alpha)
    chosen_logratio = policy_chosen_logps - ref_chosen_logps  # log p_θ(y_w)/p_ref(y_w)
    rejected_logratio = policy_rejected_logps - ref_rejected_logps  # log p_θ(y_l)/p_ref(y_l)
    _check_token_counts(policy_chosen_logps, chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths)
    if all_chosen_lengths is not None:  # (M,): the whole batch's, whatever this share's B
        _check_real_tokens(None, all_chosen_lengths=all_chosen_lengths.double())
        _check_lengths(all_chosen_lengths=all_chosen_lengths)
    if rpo_alpha > 0:
        _require("rpo_alpha > 0", chosen_lengths=chosen_lengths)
    if ipo_normalisation == "mean":
        _require("ipo_normalisation='mean'", chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths)
        h = chosen_logratio / chosen_lengths - rejected_logratio / rejected_lengths  # per-token log-ratios
    else:
        h = chosen_logratio - rejected_logratio  # (B,)
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    elif loss_type == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        losses = torch.relu(1 - beta * h)
    if rpo_alpha > 0:
        lengths = chosen_lengths if all_chosen_lengths is None else all_chosen_lengths  # |y_w,j| of the mean_j
        losses = losses + rpo_alpha * -policy_chosen_logps / lengths.to(policy_chosen_logps).mean()
    return losses, beta * chosen_logratio.detach(), beta * rejected_logratio.detach()


def bradley_terry_loss(chosen_scores: Tensor, rejected_scores: Tensor) -> Tensor:
    """Reward-model loss under the Bradley-Terry model P(y_w ≻ y_l) = σ(RM(x, y_w) - RM(x, y_l)):

        L = -E[ log σ(RM(x, y_w) - RM(x, y_l)) ]     mean over the B pairs

    ``logsigmoid`` stays finite for large negative margins where log(sigmoid(.)) gives -inf.
    """
    _check_same_shape(chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    _check_real_tokens(None, chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    return -F.logsigmoid(chosen_scores - rejected_scores).mean()


def pair_accuracy(chosen_scores: Tensor, rejected_scores: Tensor) -> float:
    """Fraction of pairs ranked right, score(y_w) > score(y_l), for a reward model or DPO's implicit reward.

    A tie counts 1/2, so an untrained reward model (every score 0) and DPO at step 0 (p_θ = p_ref: every implicit
    reward is 0) both sit at chance, 0.5, like a coin flip. (TRL counts a tie as wrong, so it reports 0 there.)
    """
    _check_same_shape(chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    right = (chosen_scores > rejected_scores).float()
    ties = (chosen_scores == rejected_scores).float()
    return (right + 0.5 * ties).mean().item()



# ----------------------------------------------------------------------------- the rest of the zoo: SimPO, ORPO, KTO
#
# SimPO and ORPO need no reference model; KTO needs one but learns from unpaired examples. SimPO and ORPO
# normalise by length: |y| is the number of scored response tokens of y (its EOS included), so
# (1/|y|) log p_θ(y|x) is the average token log-prob. Sequence log-probs are sums, as for `dpo_loss`.


def _check_lengths(**lengths: Tensor) -> None:
    """Every token count |y| must be at least 1: an average over an empty response is 0/0."""
    for name, count in lengths.items():
        if not (count >= 1).all():
            raise ValueError(f"{name} must be >= 1 token for every sequence, got {count.min().item()}")


def _check_length_normalised(policy_chosen_logps: Tensor, policy_rejected_logps: Tensor, chosen_lengths: Tensor,
                             rejected_lengths: Tensor) -> None:
    """The (B,) summed log-probs and token counts of a length-normalised loss, named as its arguments: one shape,
    no inf/NaN, and every token count |y| at least 1."""
    logps = {"policy_chosen_logps": policy_chosen_logps, "policy_rejected_logps": policy_rejected_logps}
    lengths = {"chosen_lengths": chosen_lengths, "rejected_lengths": rejected_lengths}
    _check_same_shape(**logps, **lengths)
    _check_real_tokens(None, **logps, **lengths)
    _check_lengths(**lengths)


def simpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    beta: float,
    gamma: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """SimPO (Meng et al., 2024): DPO's Bradley-Terry loss with a reference-free, length-normalised reward.

        r(x, y) = (β / |y|) log p_θ(y|x)                  the average token log-prob, scaled by β
        L = -log σ( r(x, y_w) - r(x, y_l) - γ )           γ ≥ 0: the target reward margin

    Without p_ref nothing ties p_θ to its start but the data. A summed log-prob penalises length (every token adds a
    negative term, so a longer y scores lower at the same per-token likelihood); the average takes length out of the
    reward. Arguments are (B,) summed log-probs and token counts |y_w|, |y_l|. Returns per-pair
    losses (B,) and the rewards r(x, y_w), r(x, y_l), both (B,) and detached. TRL's CPOTrainer with
    loss_type="simpo" and cpo_alpha=0 writes the same loss as -log σ(β (Δ - γ/β)), Δ the difference of averages.
    """
    _check_length_normalised(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths)
    check_positive("beta", beta)
    check_non_negative("gamma", gamma)
    chosen_rewards = beta * policy_chosen_logps / chosen_lengths  # (B,) r(x, y_w)
    rejected_rewards = beta * policy_rejected_logps / rejected_lengths  # (B,) r(x, y_l)
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards - gamma)
    return losses, chosen_rewards.detach(), rejected_rewards.detach()


def _log_odds(avg_logp: Tensor) -> Tensor:
    """log odds = log P - log(1 - P) from log P < 0, with log(1 - P) = log(-expm1(log P)) or log1p(-P),
    whichever keeps its precision (the first for P > 1/2, the second below). The second branch reads log P
    clamped to log 1/2, so that the branch torch.where discards cannot put inf (or NaN) into the gradient."""
    near_one = avg_logp > -math.log(2)
    far_from_one = torch.log1p(-torch.exp(avg_logp.clamp(max=-math.log(2))))
    log_one_minus = torch.where(near_one, torch.log(-torch.expm1(avg_logp)), far_from_one)  # log(1 - P)
    return avg_logp - log_one_minus


def orpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    lam: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """ORPO (Hong et al., 2024): supervised fine-tuning on y_w plus an odds-ratio penalty on y_l, no p_ref.

        P_θ(y|x) = exp( (1/|y|) log p_θ(y|x) )            the per-token geometric-mean likelihood
        odds_θ(y|x) = P_θ(y|x) / (1 - P_θ(y|x))
        L_SFT = -(1/|y_w|) log p_θ(y_w|x)                  the NLL of the chosen answer, per token
        L_OR = -log σ( log odds_θ(y_w|x) - log odds_θ(y_l|x) )
        L = L_SFT + λ · L_OR

    Arguments are (B,) summed log-probs and token counts |y_w|, |y_l|; every average log-prob must be < 0 (a
    completion of probability 1 has infinite odds). Returns per-pair losses (B,) and the log odds of y_w and y_l,
    both (B,) and detached: their difference is the log odds ratio that L_OR pushes up.
    TRL's ORPOTrainer (λ is its `beta`) differs in two places: its L_SFT is the cross-entropy averaged over every
    token of the batch's chosen sequences, prompt tokens included, and it logs λ (1/|y|) log p_θ(y|x) as rewards.
    """
    _check_length_normalised(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths)
    check_non_negative("lam", lam)
    chosen_avg = policy_chosen_logps / chosen_lengths  # (B,) log P_θ(y_w|x)
    rejected_avg = policy_rejected_logps / rejected_lengths  # (B,) log P_θ(y_l|x)
    for name, average in {"policy_chosen_logps": chosen_avg, "policy_rejected_logps": rejected_avg}.items():
        if not (average < 0).all():  # the odds of a completion of probability 1 are infinite
            raise ValueError(f"{name} / its lengths (average log-probs) must be < 0, got {average.max().item()}")
    chosen_log_odds, rejected_log_odds = _log_odds(chosen_avg), _log_odds(rejected_avg)
    sft = -chosen_avg  # L_SFT
    odds_ratio = -F.logsigmoid(chosen_log_odds - rejected_log_odds)  # L_OR
    return sft + lam * odds_ratio, chosen_log_odds.detach(), rejected_log_odds.detach()


def kto_loss(
    policy_logps: Tensor,
    ref_logps: Tensor,
    desirable: Tensor,
    policy_kl_logps: Tensor,
    ref_kl_logps: Tensor,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """KTO (Ethayarajh et al., 2024): unpaired examples, each labelled desirable or undesirable, valued like
    prospect theory values a gain or a loss against a reference point z_ref.

        r_θ(x, y) = log p_θ(y|x) - log p_ref(y|x)
        z_ref = max(0, mean_j [ log p_θ(y'_j|x_j) - log p_ref(y'_j|x_j) ])     detached
        v(x, y) = λ_D σ( β (r_θ(x, y) - z_ref) )    y desirable
                  λ_U σ( β (z_ref - r_θ(x, y)) )    y undesirable
        L = λ_y - v(x, y)                           per example; λ_y = λ_D or λ_U

    z_ref estimates KL(p_θ || p_ref) from M mismatched pairs (x_j, y'_j): each y'_j is a completion written for
    another prompt, so it is not the example being scored. No gradient flows through z_ref: it only sets the
    level a desirable answer must beat (and an undesirable one must fall below). λ_D, λ_U rebalance classes of
    unequal size (the paper suggests λ_D n_D / (λ_U n_U) in [1, 4/3], n_D and n_U the example counts).
    Arguments: (B,) sequence log-probs and a (B,) bool `desirable`; (M,) log-probs of the mismatched pairs.
    Returns per-example losses (B,), the implicit rewards β r_θ (B,) and z_ref (a 0-d tensor), all detached but
    the losses. TRL's KTOTrainer computes the same losses (desirable ones first, then the undesirable ones).
    """
    _check_same_shape(policy_logps=policy_logps, ref_logps=ref_logps, desirable=desirable)
    _check_same_shape(policy_kl_logps=policy_kl_logps, ref_kl_logps=ref_kl_logps)
    if desirable.dtype != torch.bool:
        raise ValueError(f"desirable must be a bool tensor, got {desirable.dtype}")
    if policy_kl_logps.dim() != 1 or policy_kl_logps.numel() == 0:
        raise ValueError(f"policy_kl_logps must be (M,) with M >= 1, got shape {tuple(policy_kl_logps.shape)}")
    _check_real_tokens(None, policy_logps=policy_logps, ref_logps=ref_logps, policy_kl_logps=policy_kl_logps,
                       ref_kl_logps=ref_kl_logps)
    check_positive("beta", beta)
    check_positive("desirable_weight", desirable_weight)
    check_positive("undesirable_weight", undesirable_weight)
    logratio = policy_logps - ref_logps  # (B,) r_θ(x, y)
    z_ref = (policy_kl_logps - ref_kl_logps).mean().clamp_min(0).detach()  # () z_ref
    value = torch.where(
        desirable,
        desirable_weight * torch.sigmoid(beta * (logratio - z_ref)),
        undesirable_weight * torch.sigmoid(beta * (z_ref - logratio)),
    )  # (B,) v(x, y)
    weight = torch.where(desirable, desirable_weight, undesirable_weight).to(value)  # (B,) λ_y
    return weight - value, beta * logratio.detach(), z_ref


# ----------------------------------------------------------------------------- GRPO since R1
#
# What the field changed in GRPO after DeepSeek-R1, by name, and where each one lives:
#   DAPO (Yu et al., 2025)        clip-higher: `eps_high` of grpo_loss / clipped_surrogate; token-level aggregation:
#                                 aggregation="token-mean" (TRL loss_type="dapo" on one process); dynamic sampling:
#                                 `informative_groups`; overlong filtering: `mask_truncated`; soft overlong
#                                 punishment: minirlhf.tasks.rewards.soft_overlong_punishment
#   Dr. GRPO (Liu et al., 2025)   grpo_advantages(scale="none") (no division by the std) + aggregation="constant"
#                                 (divide by B · T_max: TRL loss_type="dr_grpo" with T_max = max_completion_length)
#   GSPO (Zheng et al., 2025)     grpo_loss(importance_sampling_level="sequence") with `sequence_ratio`
#   REINFORCE++ (Hu, 2025)        `reinforce_plus_plus_advantages` (and its baseline variant, group_size=G)
#   RPO (Pang et al., 2024)       dpo_loss(rpo_alpha=α): DPO + α · NLL of the chosen answers


def _check_token_counts(like: Tensor, **lengths: Tensor | None) -> None:
    """The token counts that were given (None = not given): shaped like ``like`` (B,), finite and >= 1 each."""
    given = {name: count for name, count in lengths.items() if count is not None}
    for name, count in given.items():
        _check_same_shape(policy_chosen_logps=like, **{name: count})
        _check_real_tokens(None, **{name: count.double()})
    _check_lengths(**given)


def _require(option: str, **lengths: Tensor | None) -> None:
    """Raise a ValueError naming the token counts that ``option`` needs and that were not given."""
    for name, count in lengths.items():
        if count is None:
            raise ValueError(f"{option} needs {name}, the (B,) token counts of the answers")


def sequence_ratio(logp: Tensor, old_logp: Tensor, mask: Tensor) -> Tensor:
    """GSPO's sequence-level importance ratio, the geometric mean of the token ratios r_i,t(θ) of a sequence:

        s_i(θ) = ( p_θ(y_i|x_i) / p_θold(y_i|x_i) )^(1/|y_i|) = exp( (1/|y_i|) Σ_t log r_i,t(θ) )

    over the |y_i| real tokens of row i. Returns (B,); a row without real tokens gets s_i = 1. The gradient flows
    into every real token, ∂s_i/∂log p_θ(y_i,t) = s_i / |y_i|, as in TRL 1.16 (importance_sampling_level=
    "sequence"). The paper's GSPO-token variant, sg[s_i] · p_θ(y_t)/sg[p_θ(y_t)], has the same value and, with one
    Â_i per sequence and "seq-mean" aggregation, the same gradient. Unlike Π_t r_i,t, the 1/|y_i| power keeps s_i
    near 1 for long answers, so one clip range suits every length.
    """
    _check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    if mask.numel():
        _check_real_tokens(mask, logp=logp, old_logp=old_logp)
    logp, old_logp = _zero_padding(mask, logp, old_logp)
    return torch.exp(masked_mean(logp - old_logp, mask, dim=-1))  # (B,) s_i


def informative_groups(rewards: Tensor, group_size: int, eps: float = CONSTANT_GROUP_STD) -> Tensor:
    """DAPO's dynamic-sampling filter: which groups of G completions of one prompt carry a learning signal.

        keep group g  ⇔  std(R_g) ≥ ε       (sample std of the G rewards, ε = ``eps``)

    A group whose rewards are all equal has Â = 0 for every completion (``grpo_advantages`` zeroes it with the
    same rule and the same ε, its default), so it adds nothing to the policy gradient, only to the batch size.
    With 0/1 rewards and success rate p, a group is all equal with probability p^G + (1 - p)^G, which grows as
    training succeeds. ``rewards`` is (B,) in consecutive groups of G; returns a bool tensor (B / G,).
    """
    check_positive("eps", eps)
    R = _grouped(rewards, group_size)  # (B/G, G)
    if R.numel() == 0:
        return torch.zeros(0, dtype=torch.bool, device=rewards.device)
    return R.std(dim=1) >= eps


def mask_truncated(mask: Tensor, ended_with_eos: Tensor) -> Tensor:
    """DAPO's overlong filtering (TRL's mask_truncated_completions): a completion cut off at the token budget
    gets no loss at all, since its reward judges an answer it never finished.

        M'_i,t = M_i,t · 1[y_i ended with EOS]

    ``mask`` is (B, T), ``ended_with_eos`` a (B,) bool tensor (the rollout's flags). Returns the new mask, same
    dtype as ``mask``. The rows stay in the batch: "seq-mean" and "constant" still count them in B, as TRL does.
    """
    if ended_with_eos.dtype != torch.bool:
        raise ValueError(f"ended_with_eos must be a bool tensor, got {ended_with_eos.dtype}")
    if mask.dim() != 2 or ended_with_eos.shape != mask.shape[:1]:
        raise ValueError(f"ended_with_eos must be (B,) for a (B, T) mask: got ended_with_eos "
                         f"{tuple(ended_with_eos.shape)} and mask {tuple(mask.shape)}")
    return torch.where(ended_with_eos[:, None], mask, torch.zeros_like(mask))


def reinforce_plus_plus_advantages(
    rewards: Tensor,
    mask: Tensor,
    old_logp: Tensor | None = None,
    ref_logp: Tensor | None = None,
    beta: float = 0.0,
    gamma: float = 1.0,
    group_size: int | None = None,
) -> Tensor:
    """REINFORCE++ (Hu, 2025, arXiv:2501.03262): PPO's per-token shaped reward and return, no critic, and the
    advantages standardised over the whole batch instead of per prompt.

        R̃_i = R_i                                     REINFORCE++
        R̃_i = R_i - mean(R_group)                     REINFORCE++-baseline (``group_size`` = G given)
        r_i,t = -β (log p_θold(y_t) - log p_ref(y_t)) + R̃_i · 1[t = |y_i| - 1]     k1 KL per token
        G_i,t = Σ_{l ≥ 0} γ^l r_i,t+l                  return-to-go (γ = 1: every token sees R̃_i and the KL ahead)
        Â_i,t = (G_i,t - μ) / σ,   μ, σ over every real token of the batch

    as OpenRLHF's advantage_estimator="reinforce" and "reinforce_baseline" (experience_maker.py, compute_reward
    with kl_estimator="k1"; its baseline subtracts the group mean before the KL is added). σ is the sample std
    (``masked_whiten``, Bessel-corrected like the rest of this file; OpenRLHF divides by n, a factor
    sqrt(n/(n-1)) apart, one number for the whole batch). The KL uses the sampler's log-probs p_θold, as the
    rollout recorded them. ``rewards`` is (B,), the rest (B, T) right-padded. Returns (B, T), 0 on padding.
    """
    if rewards.dim() != 1 or rewards.shape != mask.shape[:1]:
        raise ValueError(f"rewards must be (B,) = {tuple(mask.shape[:1])}, got {tuple(rewards.shape)}")
    check_interval("gamma", gamma, 0.0, 1.0)
    check_non_negative("beta", beta)
    if beta > 0 and (old_logp is None or ref_logp is None):
        raise ValueError("old_logp and ref_logp are required when beta > 0 (the KL term of the reward)")
    _check_same_shape(old_logp=old_logp, ref_logp=ref_logp, mask=mask)
    if mask.numel():
        _check_real_tokens(mask, old_logp=old_logp, ref_logp=ref_logp)
    if group_size is None:
        if not torch.isfinite(rewards).all():
            raise ValueError("rewards contain NaN or inf")
    else:
        R = _grouped(rewards, group_size)  # (B/G, G)
        rewards = (R - R.mean(dim=1, keepdim=True)).reshape(-1)  # R̃_i
    kl = kl_k1(old_logp, ref_logp) if beta > 0 else None  # (B, T)
    per_token = token_rewards(rewards, mask, kl, beta)  # (B, T) r_i,t
    returns, _ = gae(per_token, torch.zeros_like(per_token), mask, gamma, lam=1.0)  # V = 0, λ = 1: G_i,t
    return _check_overflow(masked_whiten(returns, mask), rewards)
