"""The ratio zoo: what each method does with the ratio r_t(θ) = p_θ(y_t) / p_θold(y_t), written as one objective
J = f(r, Â) per token. Its gradient is a weight on ∇ log p_θ, the same vector for every method,

    ∇_θ f(r_t, Â) = ∂f/∂r · r_t · ∇_θ log p_θ(y_t)        (∇ r_t = r_t ∇ log p_θ(y_t)),

so a method is the shape of f: where ∂f/∂r is 0 the token's gradient stops. The objectives are to MAXIMISE,
elementwise (they broadcast like ``ratio * advantages``); ε = ``eps`` is the lower side ε_low.

    clip        min( r Â, clip(r, 1 - ε, 1 + ε_high) Â )                  PPO; GRPO; DAPO's clip-higher
                (``clipped_surrogate`` in minirlhf.losses.ppo)
    dual-clip   clip's objective, and for Â < 0 never below c Â           arXiv:1912.09729 (verl clip_ratio_c)
    cispo       sg[clip(r, 1 - ε, 1 + ε_high)] · Â · log p_θ              arXiv:2506.13585 (TRL, verl "cispo")
    sapo        (4 / τ) σ(τ (r - 1)) Â,   τ = τ_pos if Â > 0 else τ_neg  arXiv:2511.20347 (TRL, verl "sapo")
    gmpo        Â · exp( mean_t log-space-clipped log r_t )               arXiv:2507.20673 (verl "geo_mean")

GSPO changes which ratio goes in, not f: the sequence ratio s_i of ``sequence_ratio`` in place of every r_i,t
(``grpo_loss(importance_sampling_level="sequence")``, with clip, dual-clip, cispo or sapo). GMPO's geometric mean
is its own sequence ratio: the mean runs over the token ratios after each is clipped.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from minirlhf.checks import check_choice, check_positive
from minirlhf.losses.aggregation import masked_mean
from minirlhf.losses.ppo import _clip_fractions, clipped_surrogate

POLICY_LOSSES = ("clip", "dual-clip", "cispo", "sapo", "gmpo")
DUAL_CLIP_C = 3.0  # c of dual-clip PPO: Ye et al. 2020 and verl's clip_ratio_c
SAPO_TAU_POS, SAPO_TAU_NEG = 1.0, 1.05  # SAPO's temperatures: the defaults of TRL and verl


def check_dual_clip_c(c: float) -> None:
    """c > 1: the floor c Â of dual-clip acts only when r_t > c, far off-policy, never at r = 1."""
    check_positive("dual_clip_c", c)
    if not c > 1:
        raise ValueError(f"dual_clip_c must be > 1 (the floor c·Â acts where r > c; at r = 1 nothing may be "
                         f"clipped), got {c!r}")


def dual_clip_surrogate(
    ratio: Tensor, advantages: Tensor, eps: float, eps_high: float | None = None, c: float = DUAL_CLIP_C
) -> Tensor:
    """Dual-clip PPO (Ye et al. 2020, arXiv:1912.09729), elementwise, to MAXIMISE:

        f(r, Â) = min( r Â, clip(r, 1 - ε, 1 + ε_high) Â )                 Â ≥ 0
        f(r, Â) = max( min( r Â, clip(r, 1 - ε, 1 + ε_high) Â ),  c Â )     Â < 0

    PPO's min is unbounded below for Â < 0: a token that has become far more likely than when it was sampled
    (r ≫ 1) gets the objective r Â, and a push down as large as r. Dual-clip floors it at c Â, so for r > c the
    gradient stops. verl's clip_ratio_c (default 3); TRL's ``delta`` (INTELLECT-2) is the same function whenever
    c ≥ 1 + ε_high (it caps r at c inside the min, which changes only Â < 0).
    """
    check_dual_clip_c(c)
    clipped = clipped_surrogate(ratio, advantages, eps, eps_high)
    return torch.where(advantages < 0, torch.maximum(clipped, c * advantages), clipped)


def cispo_surrogate(
    ratio: Tensor, logp: Tensor, advantages: Tensor, eps: float, eps_high: float | None = None
) -> Tensor:
    """CISPO (the MiniMax-M1 report, arXiv:2506.13585), elementwise, to MAXIMISE: REINFORCE with a capped
    importance weight,

        f = sg[ clip(r, 1 - ε, 1 + ε_high) ] · Â · log p_θ(y_t),     ∇f = clip(r, 1 - ε, 1 + ε_high) Â ∇ log p_θ

    sg[·] = stop-gradient (``detach``). PPO's clip zeroes a token's gradient outside the trust region; CISPO keeps
    every token and caps only its weight, so rare tokens that matter (a "wait" or "however" with r ≫ 1) still
    learn. As verl writes it; TRL's cispo caps above only, at its ``epsilon_high`` = 1 + ε_high: here ε ≥ 1
    (the lower side 1 - ε ≤ 0 never acts, r > 0). The value is not a function of r alone (it holds log p_θ);
    the gradient is.
    """
    eps_high = eps if eps_high is None else eps_high
    check_positive("eps", eps)
    check_positive("eps_high", eps_high)
    weight = torch.clamp(ratio, 1 - eps, 1 + eps_high).detach()  # sg[clip(r)]
    return weight * advantages * logp


def sapo_surrogate(
    ratio: Tensor, advantages: Tensor, tau_pos: float = SAPO_TAU_POS, tau_neg: float = SAPO_TAU_NEG
) -> Tensor:
    """SAPO (Soft Adaptive Policy Optimization, arXiv:2511.20347), elementwise, to MAXIMISE: a soft gate in place
    of the hard clip,

        f(r, Â) = (4 / τ) σ( τ (r - 1) ) Â,    τ = τ_pos if Â > 0 else τ_neg
        ∂f/∂r = 4 σ(τ (r - 1)) (1 - σ(τ (r - 1))) Â          = Â at r = 1, like r Â; → 0 smoothly as |r - 1| grows

    Instead of stopping at 1 ± ε, the weight of a token fades the further r leaves 1; a larger τ fades faster.
    τ_neg > τ_pos fades negative-advantage tokens faster (the paper: pushing down a token spreads probability over
    the whole vocabulary, and is the less stable side). As TRL and verl write it.
    """
    check_positive("tau_pos", tau_pos)
    check_positive("tau_neg", tau_neg)
    taus = [torch.tensor(t, dtype=ratio.dtype, device=ratio.device) for t in (tau_pos, tau_neg)]
    tau = torch.where(advantages > 0, *taus)  # τ per token, in the ratio's precision
    return 4 / tau * torch.sigmoid(tau * (ratio - 1)) * advantages


def gmpo_log_ratio(log_ratio: Tensor, advantages: Tensor, eps: float, eps_high: float | None = None) -> Tensor:
    """GMPO's clipped token log-ratio, elementwise: PPO's pessimistic clip, applied in log space,

        log ř_t = sgn(Â) · min( sgn(Â) log r_t,  sgn(Â) clip(log r_t, -ε, ε_high) )

    i.e. r_t clipped to [e^-ε, e^ε_high] on the side that would raise the objective (above for Â > 0, below
    for Â < 0), as verl's geo_mean writes it. The GMPO paper's range is ε = ε_high = 0.4, wider than PPO's: the
    geometric mean below damps the outliers that the clip has to stop in PPO.
    """
    eps_high = eps if eps_high is None else eps_high
    check_positive("eps", eps)
    check_positive("eps_high", eps_high)
    sign = torch.sign(advantages)
    return sign * torch.minimum(sign * log_ratio, sign * torch.clamp(log_ratio, -eps, eps_high))


def gmpo_ratio(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float, eps_high: float | None = None
) -> Tensor:
    """GMPO's sequence ratio (Geometric-Mean Policy Optimization, arXiv:2507.20673): the geometric mean of the
    clipped token ratios of sequence i,

        ŝ_i = exp( (1/|y_i|) Σ_t log ř_i,t ),     J_i = ŝ_i Â_i     (log ř_i,t: ``gmpo_log_ratio``)
        ∂J_i/∂log p_θ(y_i,t) = Â_i ŝ_i / |y_i| · 1[token t not clipped]

    GRPO's objective is an arithmetic mean of r_t Â over the tokens, so one token with a huge r_t moves it
    (and PPO must clip it); a geometric mean lets an outlier count only through log r_t / |y_i|. ``logp``,
    ``old_logp``, ``mask`` (B, T); ``advantages`` (B,), one per sequence. Returns (B,); a row without real
    tokens gets ŝ = 1, and so does a row with Â_i = 0 (sgn(0) = 0, as verl; J_i = 0 whatever ŝ). verl averages
    a (B, T) advantage over the tokens first; with one Â_i per sequence it is the same.
    """
    clipped = gmpo_log_ratio(logp - old_logp, advantages[:, None], eps, eps_high)  # (B, T) log ř_i,t
    return torch.exp(masked_mean(clipped, mask, dim=-1))  # (B,) ŝ_i


def ratio_objective(
    policy_loss: str,
    ratio: Tensor,
    logp: Tensor,
    advantages: Tensor,
    eps: float,
    eps_high: float | None = None,
    *,
    dual_clip_c: float = DUAL_CLIP_C,
    tau_pos: float = SAPO_TAU_POS,
    tau_neg: float = SAPO_TAU_NEG,
) -> Tensor:
    """f(r, Â) of ``policy_loss`` (one of POLICY_LOSSES but "gmpo", whose ratio is a sequence's), elementwise, to
    MAXIMISE. ``logp`` is log p_θ of the same tokens (only CISPO's value reads it)."""
    check_choice("policy_loss", policy_loss, POLICY_LOSSES[:-1],
                 why="gmpo clips inside a geometric mean over a sequence: see gmpo_ratio")
    if policy_loss == "clip":
        return clipped_surrogate(ratio, advantages, eps, eps_high)
    if policy_loss == "dual-clip":
        return dual_clip_surrogate(ratio, advantages, eps, eps_high, dual_clip_c)
    if policy_loss == "cispo":
        return cispo_surrogate(ratio, logp, advantages, eps, eps_high)
    return sapo_surrogate(ratio, advantages, tau_pos, tau_neg)


def _clip_fractions_of(
    policy_loss: str, ratio: Tensor, advantages: Tensor, eps: float, eps_high: float | None, dual_clip_c: float,
    mask: Tensor,
) -> dict[str, float]:
    """The logs of where ``policy_loss`` cut in, over the real entries: ``clip_frac`` = ``clip_frac_low`` or
    ``clip_frac_high``, as ``_clip_fractions`` counts them for PPO's clip (the gradient stopped, Â < 0 below and
    Â > 0 above); dual-clip adds ``clip_frac_dual`` (Â < 0, r > c); GMPO counts its clip in log space; CISPO
    counts the tokens whose weight is capped (r < 1 - ε, r > 1 + ε_high, either sign of Â, as verl); SAPO has
    no clip (0)."""
    eps_high = eps if eps_high is None else eps_high
    if policy_loss == "sapo":
        return {"clip_frac": 0.0, "clip_frac_low": 0.0, "clip_frac_high": 0.0}
    if policy_loss == "cispo":
        low, high = ratio < 1 - eps, ratio > 1 + eps_high
        return {"clip_frac": masked_mean((low | high).float(), mask).item(),
                "clip_frac_low": masked_mean(low.float(), mask).item(),
                "clip_frac_high": masked_mean(high.float(), mask).item()}
    if policy_loss == "gmpo":  # log r outside [-ε, ε_high]: r outside [e^-ε, e^ε_high]
        return _clip_fractions(ratio, advantages, 1 - math.exp(-eps), math.exp(eps_high) - 1, mask)
    stats = _clip_fractions(ratio, advantages, eps, eps_high, mask)
    if policy_loss == "dual-clip":
        stats["clip_frac_dual"] = masked_mean(((advantages < 0) & (ratio > dual_clip_c)).float(), mask).item()
    return stats


def ratio_function_grid(
    policy_loss: str,
    ratios: Tensor,
    advantages: Tensor,
    eps: float = 0.2,
    eps_high: float | None = None,
    *,
    dual_clip_c: float = DUAL_CLIP_C,
    tau_pos: float = SAPO_TAU_POS,
    tau_neg: float = SAPO_TAU_NEG,
) -> dict[str, Tensor]:
    """f(r, Â) of ``policy_loss`` on the grid ``ratios`` × ``advantages`` (both 1-D, r > 0), for drawing. Each
    point is one token of a one-token answer sampled with p_θold(y_t) = 1, so that log p_θ(y_t) = log r. Returns
    three (len(ratios), len(advantages)) tensors, by autograd through the same code the loss runs:

        "objective"  f(r, Â)                               (CISPO's value: sg[clip(r)] Â log r, see cispo_surrogate)
        "slope"      ∂f/∂r                                 0 where the method stops the token's gradient
        "weight"     ∂f/∂log p_θ = r ∂f/∂r                 what multiplies ∇_θ log p_θ(y_t)

    GSPO's and GMPO's ratios are means over a sequence: at one token they are r itself (GMPO: clipped to
    [e^-ε, e^ε_high]), so the grid shows their f at |y| = 1.
    """
    check_choice("policy_loss", policy_loss, POLICY_LOSSES)
    if ratios.dim() != 1 or advantages.dim() != 1:
        raise ValueError(f"ratios and advantages must be 1-D, got shapes {tuple(ratios.shape)} and "
                         f"{tuple(advantages.shape)}")
    if not bool((ratios > 0).all()):
        raise ValueError(f"ratios must be > 0 (r = p_θ / p_θold), got a minimum of {ratios.min().item()!r}")
    dtype = ratios.dtype if ratios.is_floating_point() else torch.float64
    r, A = torch.meshgrid(ratios.to(dtype), advantages.to(dtype), indexing="ij")  # (R, A) each
    with torch.enable_grad():
        logp = r.log().requires_grad_(True)  # (R, A) log p_θ = log r, p_θold = 1
        if policy_loss == "gmpo":
            one_token = torch.ones_like(logp).reshape(-1, 1)
            ratio = gmpo_ratio(logp.reshape(-1, 1), torch.zeros_like(one_token), A.reshape(-1), one_token, eps,
                               eps_high).view_as(logp)  # (R, A) ŝ = ř at |y| = 1
            objective = ratio * A
        else:
            objective = ratio_objective(policy_loss, logp.exp(), logp, A, eps, eps_high, dual_clip_c=dual_clip_c,
                                        tau_pos=tau_pos, tau_neg=tau_neg)
        (weight,) = torch.autograd.grad(objective.sum(), logp)
    return {"objective": objective.detach(), "slope": weight / r, "weight": weight}
