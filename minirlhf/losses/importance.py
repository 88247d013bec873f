"""Three policies: the sampler μ that drew the answers, p_θold that the clip compares with, and p_θ being trained.

The clip's ratio r_t(θ) = p_θ / p_θold assumes the answers were drawn from p_θold. An inference engine rarely draws
from exactly p_θold: it runs in half precision, filters with top-k / top-p, or holds weights a step or two old
(one-step-off training). The answers then come from another policy μ, the behaviour policy, and

    E_{y~p_θold}[ f(y) ] = E_{y~μ}[ ρ(y) f(y) ],     ρ_t = p_θold(y_t | x, y_<t) / μ(y_t | x, y_<t)

puts the missing importance weight back. ρ is a ratio of two fixed policies, a constant of the step: it carries no
gradient, and the clip still sees p_θ / p_θold alone. A few tokens that μ drew and p_θold finds far likelier give
huge ρ, so the weight is bounded by a cap C, in one of four ways (TRL's vllm_importance_sampling_mode; Yao et al.
2025, "Your efficient RL framework secretly brings you off-policy RL training", and Liu et al. 2025's MIS):

    token-truncate     w_t = min(ρ_t, C)                                 truncated IS (TIS)
    token-mask         w_t = ρ_t · 1[ρ_t ≤ C]                            masked IS (MIS): drop the token
    sequence-truncate  w_i,t = min(ρ_i, C),   ρ_i = Π_t ρ_i,t            one weight per answer
    sequence-mask      w_i,t = ρ_i · 1[ρ_i ≤ C]                          drop the answer (TRL's default)

with ρ_i = exp( Σ_t log ρ_i,t ) over the real tokens of answer i: a product, not GSPO's geometric mean, as in TRL.
The GRPO loss multiplies each token's objective f(r_t, Â) by w (``grpo_per_token_loss(behaviour_correction=...)``);
the KL term is left unweighted, as TRL leaves it.
"""

from __future__ import annotations

import torch
from torch import Tensor

from minirlhf.checks import check_choice, check_positive
from minirlhf.losses._contract import _check_real_tokens, _check_same_shape, _zero_padding
from minirlhf.losses.aggregation import masked_mean, masked_sum

BEHAVIOUR_CORRECTIONS = ("none", "token-truncate", "token-mask", "sequence-truncate", "sequence-mask")
BEHAVIOUR_CAP = 3.0  # C: TRL's vllm_importance_sampling_clip_max


def check_behaviour_correction(correction: str, cap: float) -> None:
    """A named correction, and a cap C ≥ 1 (a weight is never above C; C < 1 would truncate or mask even the tokens
    where μ = p_θold, whose ρ is 1, and C ≤ 0 would drop every token)."""
    check_choice("behaviour_correction", correction, BEHAVIOUR_CORRECTIONS)
    check_positive("behaviour_cap", cap, why="the largest importance weight kept")
    if cap < 1:
        raise ValueError(f"behaviour_cap must be ≥ 1, got {cap!r}: a cap below 1 truncates or masks even the tokens "
                         "the sampler drew exactly as p_θold would (ρ = 1); TRL's default is 3.0")


def behaviour_log_ratio(old_logp: Tensor, behaviour_logp: Tensor, mask: Tensor, level: str) -> Tensor:
    """log ρ of p_θold against the sampler μ, 0 on padding, detached:

        log ρ_i,t = log p_θold(y_i,t) - log μ(y_i,t)           level "token"     (B, T)
        log ρ_i   = Σ_t M_i,t (log p_θold(y_i,t) - log μ(y_i,t))   level "sequence"  (B, 1)
    """
    _check_same_shape(old_logp=old_logp, behaviour_logp=behaviour_logp, mask=mask)
    _check_real_tokens(mask, old_logp=old_logp, behaviour_logp=behaviour_logp)
    old_logp, behaviour_logp = _zero_padding(mask, old_logp.detach(), behaviour_logp.detach())
    log_rho = old_logp - behaviour_logp  # (B, T) log ρ_t, 0 on padding
    if level == "sequence":
        return masked_sum(log_rho, mask, dim=-1)[:, None]  # (B, 1) log Π_t ρ_t
    return log_rho


def behaviour_weight(old_logp: Tensor, behaviour_logp: Tensor, mask: Tensor, correction: str,
                     cap: float = BEHAVIOUR_CAP) -> Tensor:
    """The importance weight w of each token, (B, T), 0 on padding, with no gradient (see the module's table):

        ρ = p_θold / μ  per token, or Π_t of it per answer;   truncate: w = min(ρ, C);   mask: w = ρ · 1[ρ ≤ C]

    ``correction`` = "none" gives w = 1 on every real token. When μ = p_θold, ρ = 1 and w = 1 for every C ≥ 1.
    """
    check_behaviour_correction(correction, cap)
    if correction == "none":
        return mask.to(old_logp.dtype)
    level, bound = correction.split("-")  # ("token" | "sequence", "truncate" | "mask")
    rho = torch.exp(behaviour_log_ratio(old_logp, behaviour_logp, mask, level))  # (B, T) or (B, 1)
    if bound == "truncate":
        weight = rho.clamp(max=cap)  # min(ρ, C)
    else:
        weight = torch.where(rho > cap, torch.zeros_like(rho), rho)  # ρ · 1[ρ ≤ C]
    (weight,) = _zero_padding(mask, weight.expand_as(mask))  # (B, T)
    return weight


def behaviour_metrics(old_logp: Tensor, behaviour_logp: Tensor, mask: Tensor, correction: str,
                      cap: float = BEHAVIOUR_CAP) -> dict[str, float]:
    """How far the sampler μ was from p_θold, and what the correction did, over real tokens (python floats):

        sampler/logp_diff      mean_t |log p_θold - log μ|   (TRL's sampling_logp_difference/mean)
        sampler/logp_diff_max  max_t  |log p_θold - log μ|
        sampler/rho_mean       mean of ρ, per token (token-*) or per answer (sequence-*; per token with "none")
        sampler/capped_frac    share of those ρ above C: truncated to C, or masked to 0
    """
    check_behaviour_correction(correction, cap)
    level = "sequence" if correction.startswith("sequence") else "token"
    with torch.no_grad():
        token_diff = behaviour_log_ratio(old_logp, behaviour_logp, mask, "token").abs()  # (B, T)
        # in float64: a product over a long answer overflows float32's e^88 and would log inf (then null)
        rho = torch.exp(behaviour_log_ratio(old_logp, behaviour_logp, mask, level).double())  # (B, T) or (B, 1)
        counted = mask.double() if level == "token" else torch.ones_like(rho)  # every answer counts once
        real = mask.bool()
        return {
            "sampler/logp_diff": masked_mean(token_diff, mask).item(),
            "sampler/logp_diff_max": token_diff[real].max().item() if real.any() else 0.0,
            "sampler/rho_mean": masked_mean(rho, counted).item(),
            "sampler/capped_frac": masked_mean((rho > cap).float(), counted).item(),
        }
