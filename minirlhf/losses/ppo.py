"""PPO, in the order of notebook 03: the ratio r_t(θ) and its clipped surrogate, the loss of the policy and of the
value head, GAE's per-token advantages, the per-token reward with its KL term, and the critic's explained variance.
"""

from __future__ import annotations

import torch
from torch import Tensor

from minirlhf.checks import check_interval, check_positive
from minirlhf.losses._contract import (
    _check_finite_result,
    _check_real_tokens,
    _check_same_shape,
    _per_token_advantages,
    _zero_padding,
)
from minirlhf.losses.aggregation import aggregate, masked_mean
from minirlhf.losses.kl import kl_k3


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


def _ratio_max(ratio: Tensor, mask: Tensor) -> float:
    """The largest r_t(θ) over the real entries: how far the most-moved token has gone (0 when there are none)."""
    return torch.where(mask.bool(), ratio, torch.zeros_like(ratio)).max().item() if ratio.numel() else 0.0


def ppo_clip_per_token_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float, eps_high: float | None = None
) -> Tensor:
    """The PPO clipped policy loss of each token, (B, T), 0 on padding:

        ℓ_t = -min( r_t(θ) Â_t, clip(r_t(θ), 1 - ε, 1 + ε_high) Â_t ),
        r_t(θ) = p_θ(y_t|x, y_<t) / p_θold(y_t|x, y_<t) = exp(logp - old_logp)

    ``advantages`` is (B, T) or (B,), treated as a constant. ``ppo_clip_loss`` is its mean over the real tokens.
    """
    _check_same_shape(logp=logp, old_logp=old_logp, mask=mask)
    advantages = _per_token_advantages(advantages, mask)  # (B, T)
    _check_real_tokens(mask, logp=logp, old_logp=old_logp, advantages=advantages)
    logp, old_logp, advantages = _zero_padding(mask, logp, old_logp, advantages)
    ratio = torch.exp(logp - old_logp)  # (B, T) r_t(θ)
    return -clipped_surrogate(ratio, advantages, eps, eps_high)


def ppo_clip_loss(
    logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps: float, eps_high: float | None = None
) -> tuple[Tensor, dict[str, float]]:
    """PPO clipped policy loss, averaged over all real tokens of the batch:

        L(θ) = -E_t[ min( r_t(θ) Â_t, clip(r_t(θ), 1 - ε, 1 + ε_high) Â_t ) ],
        r_t(θ) = p_θ(y_t|x, y_<t) / p_θold(y_t|x, y_<t) = exp(logp - old_logp)

    ``advantages`` is (B, T) or (B,). ``eps_high`` sets 1 + ε_high as the upper edge (clip-higher,
    see ``clipped_surrogate``); None keeps the symmetric clip. The terms are ``ppo_clip_per_token_loss``, reduced
    by ``aggregate(..., "token-mean")``. stats: ``clip_frac`` (fraction of real
    tokens whose gradient is zeroed by the clip) split into ``clip_frac_low`` (Â < 0, r < 1 - ε) and
    ``clip_frac_high`` (Â > 0, r > 1 + ε_high), ``approx_kl`` (k3 estimate of KL(p_θold || p_θ),
    samples came from p_θold), ``ratio_mean`` and ``ratio_max`` (the largest r_t(θ) over the real tokens: the
    clip stops a token's gradient, not its ratio, so this can pass 1 + ε by far).
    """
    loss = aggregate(ppo_clip_per_token_loss(logp, old_logp, advantages, mask, eps, eps_high), mask, "token-mean")
    _check_finite_result("ppo_clip_loss", loss, mask, log_ratio=logp - old_logp)
    with torch.no_grad():
        advantages = _per_token_advantages(advantages, mask)  # (B, T)
        logp, old_logp, advantages = _zero_padding(mask, logp, old_logp, advantages)
        ratio = torch.exp(logp - old_logp)  # (B, T) r_t(θ), for the logs
        stats = {
            **_clip_fractions(ratio, advantages, eps, eps_high, mask),
            "approx_kl": masked_mean(kl_k3(old_logp, logp), mask).item(),
            "ratio_mean": masked_mean(ratio, mask).item(),
            "ratio_max": _ratio_max(ratio, mask),
        }
    return loss, stats


def value_per_token_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor, clip: float | None = None
) -> Tensor:
    """The value head's squared error of each token, (B, T), 0 on padding:

        ℓ_t = ½ (V(s_t) - R_t)²                                              (clip=None)
        ℓ_t = ½ max( (V - R_t)², (V_old + clip(V - V_old, -c, c) - R_t)² )   (clip=c)

    ``value_loss`` is its mean over the real tokens.
    """
    _check_same_shape(values=values, old_values=old_values, returns=returns, mask=mask)
    _check_real_tokens(mask, values=values, old_values=old_values, returns=returns)
    values, old_values, returns = _zero_padding(mask, values, old_values, returns)
    squared_error = (values - returns) ** 2  # (B, T)
    if clip is not None:
        check_positive("clip", clip)
        clipped_values = old_values + torch.clamp(values - old_values, -clip, clip)
        squared_error = torch.maximum(squared_error, (clipped_values - returns) ** 2)
    return 0.5 * squared_error


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
    The terms are ``value_per_token_loss``, reduced by ``aggregate(..., "token-mean")``.
    """
    return aggregate(value_per_token_loss(values, old_values, returns, mask, clip), mask, "token-mean")


def check_gae(gamma: float, lam: float) -> None:
    """γ and λ of GAE are weights of future terms: both in [0, 1]."""
    check_interval("gamma", gamma, 0.0, 1.0)
    check_interval("lam", lam, 0.0, 1.0)


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
    _check_real_tokens(mask, allow_empty=True, rewards=rewards, values=values)
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
