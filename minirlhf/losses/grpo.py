"""GRPO, in the order of notebooks 04a and 04b: group-relative advantages, then the loss (PPO's clip with one
advantage per sequence, a k3 KL penalty, and a choice of how tokens are weighted, ``aggregate``).

Then what the field changed after DeepSeek-R1, in the order of notebooks 07a and 07b, by name:
  DAPO (Yu et al., 2025)        dynamic sampling: `informative_groups`; token-level aggregation:
                                aggregation="token-mean" (TRL loss_type="dapo" on one process); clip-higher:
                                `eps_high` of grpo_loss / clipped_surrogate; overlong filtering: `mask_truncated`;
                                soft overlong punishment: minirlhf.tasks.rewards.soft_overlong_punishment
  Dr. GRPO (Liu et al., 2025)   grpo_advantages(scale="none") (no division by the std) + aggregation="constant"
                                (divide by B · T_max: TRL loss_type="dr_grpo" with T_max = max_completion_length)
  GSPO (Zheng et al., 2025)     grpo_loss(importance_sampling_level="sequence") with `sequence_ratio`
  the ratio zoo                 grpo_loss(policy_loss="dual-clip" | "cispo" | "sapo" | "gmpo"): the objective
                                f(r, Â) on the ratio, minirlhf.losses.ratio_objectives
  three policies (TIS, MIS)     grpo_loss(behaviour_logp=log μ, behaviour_correction=...): the sampler μ's
                                importance weight p_θold/μ, capped, minirlhf.losses.importance
  Clip-Cov, KL-Cov (Cui, 2025)  grpo_loss(policy_loss="clip-cov" | "kl-cov"): entropy control on the tokens of
                                largest covariance, minirlhf.losses.entropy
  REINFORCE++ (Hu, 2025)        `reinforce_plus_plus_advantages` (and its baseline variant, group_size=G)
  RPO (Pang et al., 2024)       dpo_loss(rpo_alpha=α) in minirlhf.losses.preference: DPO + α · NLL of y_w
"""

from __future__ import annotations

import torch
from torch import Tensor

import minirlhf.losses.entropy as cov  # the constants of these three through their modules, which alone define them
import minirlhf.losses.importance as behaviour
import minirlhf.losses.ratio_objectives as zoo
from minirlhf.checks import check_choice, check_interval, check_non_negative, check_positive
from minirlhf.losses._contract import (
    _check_finite_result,
    _check_overflow,
    _check_real_tokens,
    _check_same_shape,
    _grouped,
    _per_token_advantages,
    _zero_padding,
)
from minirlhf.losses.aggregation import aggregate, masked_mean, masked_whiten
from minirlhf.losses.entropy import clip_cov_per_token_loss, covariance_share, kl_cov_per_token_loss
from minirlhf.losses.importance import behaviour_weight, check_behaviour_correction
from minirlhf.losses.kl import kl_k1, kl_k3
from minirlhf.losses.ppo import _ratio_max, gae, token_rewards
from minirlhf.losses.ratio_objectives import _clip_fractions_of, gmpo_ratio, ratio_objective

GRPO_SCALES = ("group", "batch", "none")
GRPO_POLICY_LOSSES = zoo.POLICY_LOSSES + cov.COVARIANCE_LOSSES  # the ratio zoo's f(r, Â), then Clip-Cov and KL-Cov
IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
CONSTANT_GROUP_STD = 1e-4  # a group whose rewards' std is below this is constant: nothing to learn, advantages 0
STD_FLOOR = 1e-4  # the least std grpo_advantages divides by: a tiny batch std cannot blow the advantages up


def grpo_advantages(
    rewards: Tensor,
    group_size: int,
    scale: str = "group",
    eps: float = CONSTANT_GROUP_STD,
    std_floor: float = STD_FLOOR,
) -> Tensor:
    """Group-relative advantages: compare each completion with the others of its prompt.

        Â_i = (R_i - mean(R_group)) / max(std(R_group), s)     scale="group" (GRPO)
        Â_i = (R_i - mean(R_group)) / max(std(R_batch), s)     scale="batch"
        Â_i =  R_i - mean(R_group)                             scale="none"  (Dr. GRPO)
        Â_i = 0 for every i of a group with std(R_group) < ε

    std is the SAMPLE standard deviation (divide by G - 1, torch.std's default). The GRPO paper
    does not say which one it means; TRL's GRPOTrainer uses torch.std, and we match it so the two
    can be cross-checked. Two numbers, one job each: a group whose std is below ε = ``eps`` counts as
    constant: all its completions are equally good, there is nothing to learn, and its advantages are exactly 0
    (this also stops float noise, rewards 1, 1 + 1e-7, ..., from being divided by a tiny std and blown up into
    ±1-sized advantages); s = ``std_floor`` is the least std divided by, so that a tiny batch std (or, with
    ``std_floor`` > ε, a tiny group std) cannot blow the advantages up. ``rewards`` is (B,) in consecutive groups
    of G.
    """
    check_choice("scale", scale, GRPO_SCALES)
    check_positive("eps", eps)
    check_positive("std_floor", std_floor)
    R = _grouped(rewards, group_size)  # (B/G, G)
    if R.numel() == 0:
        return rewards.new_zeros(0)  # no groups, no advantages (and no std of nothing)
    centred = R - R.mean(dim=1, keepdim=True)  # R_i - mean(group)
    group_std = R.std(dim=1, keepdim=True)  # (B/G, 1), sample std
    if scale == "group":
        centred = centred / group_std.clamp_min(std_floor)
    elif scale == "batch":
        centred = centred / rewards.std().clamp_min(std_floor)
    constant = group_std < eps  # (B/G, 1)
    return _check_overflow(torch.where(constant, torch.zeros_like(centred), centred).reshape(-1), rewards)


def grpo_per_token_loss(
    logp: Tensor,
    old_logp: Tensor,
    ref_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    eps: float,
    beta: float,
    *,
    eps_high: float | None = None,
    importance_sampling_level: str = "token",
    policy_loss: str = "clip",
    dual_clip_c: float = zoo.DUAL_CLIP_C,
    tau_pos: float = zoo.SAPO_TAU_POS,
    tau_neg: float = zoo.SAPO_TAU_NEG,
    behaviour_logp: Tensor | None = None,
    behaviour_correction: str = "none",
    behaviour_cap: float = behaviour.BEHAVIOUR_CAP,
    cov_ratio: float = cov.COV_RATIO,
    clip_cov_lb: float = cov.CLIP_COV_LB,
    clip_cov_ub: float = cov.CLIP_COV_UB,
    kl_cov_coef: float = cov.KL_COV_COEF,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The GRPO loss of each token, (B, T), 0 on padding: PPO's clipped objective with one advantage per sequence
    and a k3 KL penalty, negated.

        ℓ_i,t = -[ min( r_i,t Â_i, clip(r_i,t, 1 - ε, 1 + ε_high) Â_i ) - β · k3_i,t ],
        k3_i,t = p_ref/p_θ - log(p_ref/p_θ) - 1

    ``eps_high`` = None means ε_high = ε (GRPO); DAPO's clip-higher sets it larger (see ``clipped_surrogate``).
    ``importance_sampling_level`` = "sequence" (GSPO) puts the sequence ratio s_i of ``sequence_ratio`` in
    place of every r_i,t of sequence i, clipped once per sequence; the k3 term stays per token.
    ``policy_loss`` puts another f(r, Â) of the ratio zoo (minirlhf.losses.ratio_objectives) in place of the
    clip: "dual-clip" (with c = ``dual_clip_c``), "cispo", "sapo" (τ_pos, τ_neg), at either level, or "gmpo",
    whose J_i = ŝ_i Â_i (``gmpo_ratio``, ε and ε_high in log space) is its own sequence ratio, token level only.
    "clip-cov" and "kl-cov" (token level) act on the tokens of largest covariance between log p_θ and Â
    (minirlhf.losses.entropy: ``cov_ratio``, ``clip_cov_lb``, ``clip_cov_ub``, ``kl_cov_coef``; Clip-Cov draws
    from ``generator``, None = torch's global one). ``advantages`` is (B,). With β = 0 the KL term is skipped and
    ``ref_logp`` may be None.
    ``behaviour_correction`` (not "none") weighs each token's objective by w_i,t of ``behaviour_weight``, the
    capped importance weight p_θold/μ of the sampler μ whose log-probs are ``behaviour_logp`` (three policies:
    μ drew the answers, r_t = p_θ/p_θold is clipped, w corrects p_θold for μ); the k3 term stays unweighted:

        ℓ_i,t = -[ w_i,t · min( r_i,t Â_i, clip(r_i,t, 1 - ε, 1 + ε_high) Â_i ) - β · k3_i,t ]
    """
    check_choice("importance_sampling_level", importance_sampling_level, IMPORTANCE_SAMPLING_LEVELS)
    check_behaviour_correction(behaviour_correction, behaviour_cap)
    if behaviour_correction != "none" and behaviour_logp is None:
        raise ValueError(f"behaviour_correction={behaviour_correction!r} weighs by p_θold/μ: give behaviour_logp, "
                         "the sampler's log-probs")
    check_choice("policy_loss", policy_loss, GRPO_POLICY_LOSSES)
    if policy_loss in ("gmpo", *cov.COVARIANCE_LOSSES) and importance_sampling_level != "token":
        raise ValueError(f"policy_loss={policy_loss!r} is token-level by construction (gmpo: a geometric mean of the "
                         "clipped token ratios; clip-cov, kl-cov: a choice of tokens): give "
                         "importance_sampling_level='token'")
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
    shape = dict(dual_clip_c=dual_clip_c, tau_pos=tau_pos, tau_neg=tau_neg)  # the parameters of f
    if policy_loss == "clip-cov":
        objective = -clip_cov_per_token_loss(logp, old_logp, advantages, mask, eps, eps_high, cov_ratio=cov_ratio,
                                             clip_cov_lb=clip_cov_lb, clip_cov_ub=clip_cov_ub, generator=generator)
    elif policy_loss == "kl-cov":  # no clip
        objective = -kl_cov_per_token_loss(logp, old_logp, advantages, mask, cov_ratio=cov_ratio,
                                           kl_cov_coef=kl_cov_coef)
    elif policy_loss == "gmpo":
        ratio = gmpo_ratio(logp, old_logp, row_advantages, mask, eps, eps_high)  # (B,) ŝ_i(θ)
        (objective,) = _zero_padding(mask, (ratio * row_advantages)[:, None].expand_as(mask))  # (B, T) J_i
    elif importance_sampling_level == "token":
        ratio = torch.exp(logp - old_logp)  # (B, T) r_t(θ)
        objective = ratio_objective(policy_loss, ratio, logp, advantages, eps, eps_high, **shape)  # (B, T)
    else:
        ratio = sequence_ratio(logp, old_logp, mask)[:, None]  # (B, 1) s_i(θ)
        objective = ratio_objective(policy_loss, ratio, logp, row_advantages[:, None], eps, eps_high, **shape)
        (objective,) = _zero_padding(mask, objective.expand_as(mask))  # (B, T)
    if behaviour_correction != "none":
        objective = behaviour_weight(old_logp, behaviour_logp, mask, behaviour_correction, behaviour_cap) * objective
    if beta > 0:
        objective = objective - beta * kl_k3(logp, ref_logp)  # k3_t
    return -objective


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
    policy_loss: str = "clip",
    dual_clip_c: float = zoo.DUAL_CLIP_C,
    tau_pos: float = zoo.SAPO_TAU_POS,
    tau_neg: float = zoo.SAPO_TAU_NEG,
    behaviour_logp: Tensor | None = None,
    behaviour_correction: str = "none",
    behaviour_cap: float = behaviour.BEHAVIOUR_CAP,
    cov_ratio: float = cov.COV_RATIO,
    clip_cov_lb: float = cov.CLIP_COV_LB,
    clip_cov_ub: float = cov.CLIP_COV_UB,
    kl_cov_coef: float = cov.KL_COV_COEF,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """GRPO loss: PPO's clipped objective with one advantage per sequence and a k3 KL penalty.

        J_t = min( r_t Â_i, clip(r_t, 1 - ε, 1 + ε_high) Â_i ) - β · k3_t,
        k3_t = p_ref/p_θ - log(p_ref/p_θ) - 1,     L = -aggregate(J) = aggregate(grpo_per_token_loss)

    ``eps_high``, ``importance_sampling_level`` (GSPO), ``policy_loss`` (the ratio zoo, Clip-Cov and KL-Cov with
    their options), β = 0 and the sampler's correction (``behaviour_logp``, ``behaviour_correction``,
    ``behaviour_cap``: J_t weighed by w_t = p_θold/μ capped, minirlhf.losses.importance) as in
    ``grpo_per_token_loss``. ``advantages`` is (B,). ``aggregation`` (see ``aggregate``) decides how tokens are
    weighted:
    * "seq-mean" (GRPO paper): each sequence counts once, so a token of a length-|y| answer
      gets weight 1/|y|. A short correct answer gets a strong per-token push up, while a long
      wrong answer spreads its penalty thin: wrong answers are nudged to grow longer.
    * "token-mean" (DAPO): every real token in the batch has the same weight; no per-sequence
      length bias, though the weight still depends on the total tokens in the batch.
    * "constant" (Dr. GRPO): divide by the fixed B · T_max, removing the length dependence.
    stats: ``clip_frac`` and its two sides ``clip_frac_low``, ``clip_frac_high`` (see ``ppo_clip_loss``; over
    real tokens, or over the B sequences at the sequence level, as TRL counts them; for the other policy losses
    see ``_clip_fractions_of``: dual-clip adds ``clip_frac_dual``), ``ratio_mean`` and ``ratio_max`` (of r_t or
    s_i, the largest there) and, when ``ref_logp`` is given, ``kl`` (mean k3 over real tokens). Clip-Cov and
    KL-Cov add ``cov_frac``, the share of real tokens they acted on (``covariance_share``); Clip-Cov logs PPO's
    clip fractions, KL-Cov, which has no clip, 0.
    """
    choice = dict(cov_ratio=cov_ratio, clip_cov_lb=clip_cov_lb, clip_cov_ub=clip_cov_ub)  # which tokens, and how many
    per_token = grpo_per_token_loss(logp, old_logp, ref_logp, advantages, mask, eps, beta, eps_high=eps_high,
                                    importance_sampling_level=importance_sampling_level, policy_loss=policy_loss,
                                    dual_clip_c=dual_clip_c, tau_pos=tau_pos, tau_neg=tau_neg,
                                    behaviour_logp=behaviour_logp, behaviour_correction=behaviour_correction,
                                    behaviour_cap=behaviour_cap, kl_cov_coef=kl_cov_coef, generator=generator,
                                    **choice)  # (B, T)
    loss = aggregate(per_token, mask, aggregation)
    _check_finite_result("grpo_loss", loss, mask, log_ratio=logp - old_logp)
    with torch.no_grad():  # the logs: the ratios and the KL again, from the inputs checked above
        logp, old_logp, ref_logp = _zero_padding(mask, logp, old_logp, ref_logp)
        if importance_sampling_level == "token":
            ratio = torch.exp(logp - old_logp)  # (B, T) r_t(θ)
            (token_advantages,) = _zero_padding(mask, _per_token_advantages(advantages, mask))
            clip = {"clip-cov": "clip", "kl-cov": "sapo"}.get(policy_loss, policy_loss)  # kl-cov, like sapo: no clip
            stats = {**_clip_fractions_of(clip, ratio, token_advantages, eps, eps_high, dual_clip_c, mask),
                     "ratio_mean": masked_mean(ratio, mask).item(), "ratio_max": _ratio_max(ratio, mask)}
            if policy_loss in cov.COVARIANCE_LOSSES:
                stats["cov_frac"] = covariance_share(policy_loss, logp, old_logp, token_advantages, mask, eps,
                                                     eps_high, **choice)
        else:  # one entry per sequence, every sequence counted (TRL's clip_ratio at the sequence level)
            ratio = sequence_ratio(logp, old_logp, mask)  # (B,) s_i(θ)
            (row_advantages,) = _zero_padding(mask.bool().any(-1), advantages)
            every = torch.ones_like(ratio)
            stats = {**_clip_fractions_of(policy_loss, ratio, row_advantages, eps, eps_high, dual_clip_c, every),
                     "ratio_mean": ratio.mean().item(), "ratio_max": _ratio_max(ratio, every)}
        if ref_logp is not None:
            stats["kl"] = masked_mean(kl_k3(logp, ref_logp), mask).item()
    return loss, stats


# ----------------------------------------------------------------------------- GRPO since R1 (notebooks 07a, 07b)


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
    (``masked_whiten``, Bessel-corrected like the rest of the losses; OpenRLHF divides by n, a factor
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
