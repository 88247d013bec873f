"""The KL estimators of notebook 01: KL(p_θ || p_ref) from tokens sampled from p_θ, one estimate per token.

Every chapter uses one: REINFORCE and RLOO fold k1 into the reward, PPO puts k1 on every token's reward, GRPO
adds k3 to its loss, and PPO logs k3 as the approximate KL between the sampler and the trained policy.
"""

from __future__ import annotations

import torch
from torch import Tensor

from minirlhf.losses._contract import _check_same_shape


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
