"""The ratio zoo (minirlhf.losses.ratio_objectives): dual-clip, CISPO, SAPO and GMPO by hand, each checker run on
the wrong versions people write (each must be refused), gradcheck through grpo_loss, the explorer's grid, and GMPO
against verl's code as written (TRL has no GMPO), beside an independent re-derivation of its value and gradient.

TRL 1.16's cispo, sapo and delta (dual-clip) are cross-checked in tests/test_losses_variants.py
(test_ratio_zoo_matches_trl), with the rest of grpo_loss.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch.autograd import gradcheck

from minirlhf.losses import (
    POLICY_LOSSES,
    cispo_surrogate,
    clipped_surrogate,
    dual_clip_surrogate,
    gmpo_ratio,
    grpo_loss,
    grpo_per_token_loss,
    ratio_function_grid,
    sapo_surrogate,
)

F64 = torch.float64
EPS, EPS_HIGH = 0.2, 0.28
RATIOS = torch.tensor([0.5, 0.9, 1.0, 1.2, 2.0, 2.9, 3.1, 5.0], dtype=F64)


def value_and_slope(f, ratio: torch.Tensor, advantage: float) -> tuple[torch.Tensor, torch.Tensor]:
    """f(r, Â) and ∂f/∂r at each r, for f(ratio, logp, advantages) with p_θold = 1 (log p_θ = log r)."""
    logp = ratio.log().requires_grad_(True)
    value = f(logp.exp(), logp, torch.full_like(ratio, advantage))
    (weight,) = torch.autograd.grad(value.sum(), logp)
    return value.detach(), weight / ratio


# ----------------------------------------------------------------------------- dual-clip


def dual_clip(ratio, logp, advantages):
    return dual_clip_surrogate(ratio, advantages, EPS, EPS_HIGH, c=3.0)


def check_dual_clip(f) -> None:
    """Â = +1: PPO's clip (flat above 1.28). Â = -2: PPO's clip (flat below 0.8), and the floor c Â = -6 for
    r > c = 3: flat there too."""
    value, slope = value_and_slope(f, RATIOS, +1.0)
    torch.testing.assert_close(value, torch.tensor([0.5, 0.9, 1.0, 1.2, 1.28, 1.28, 1.28, 1.28], dtype=F64))
    torch.testing.assert_close(slope, torch.tensor([1, 1, 1, 1, 0, 0, 0, 0], dtype=F64))
    value, slope = value_and_slope(f, RATIOS, -2.0)
    torch.testing.assert_close(value, -2 * torch.tensor([0.8, 0.9, 1.0, 1.2, 2.0, 2.9, 3.0, 3.0], dtype=F64))
    torch.testing.assert_close(slope, -2 * torch.tensor([0, 1, 1, 1, 1, 1, 0, 0], dtype=F64))


def test_dual_clip_by_hand():
    check_dual_clip(dual_clip)


@pytest.mark.parametrize("wrong", [
    lambda r, lp, a: torch.maximum(clipped_surrogate(r, a, EPS, EPS_HIGH), 3.0 * a),  # the floor for either sign
    lambda r, lp, a: torch.where(a < 0, torch.minimum(clipped_surrogate(r, a, EPS, EPS_HIGH), 3.0 * a),
                                 clipped_surrogate(r, a, EPS, EPS_HIGH)),  # min for max: no floor at all
    lambda r, lp, a: torch.where(a < 0, torch.maximum(clipped_surrogate(r, a, EPS, EPS_HIGH), torch.full_like(a, -3.0)),
                                 clipped_surrogate(r, a, EPS, EPS_HIGH)),  # the floor -c, not c·Â
    lambda r, lp, a: clipped_surrogate(r, a, EPS, EPS_HIGH),  # PPO's clip: no floor
], ids=["floor-for-either-sign", "min-for-max", "floor-minus-c", "no-floor"])
def test_dual_clip_checker_refuses_the_wrong_versions(wrong):
    with pytest.raises(AssertionError):
        check_dual_clip(wrong)


def test_dual_clip_c_must_exceed_one():
    with pytest.raises(ValueError, match="dual_clip_c must be > 1"):
        dual_clip_surrogate(RATIOS, RATIOS, EPS, c=1.0)


# ----------------------------------------------------------------------------- CISPO


def cispo(ratio, logp, advantages):
    return cispo_surrogate(ratio, logp, advantages, EPS, EPS_HIGH)


def check_cispo(f) -> None:
    """The weight on ∇ log p_θ is clip(r, 0.8, 1.28) Â, never 0: ∂f/∂r = clip(r) Â / r. The value is sg[clip(r)]
    Â log p_θ, here with log p_θ = log r."""
    for advantage in (+1.0, -2.0):
        value, slope = value_and_slope(f, RATIOS, advantage)
        capped = RATIOS.clamp(1 - EPS, 1 + EPS_HIGH)
        torch.testing.assert_close(slope, capped * advantage / RATIOS)
        torch.testing.assert_close(value, capped * advantage * RATIOS.log())


def test_cispo_by_hand():
    check_cispo(cispo)


@pytest.mark.parametrize("wrong", [
    lambda r, lp, a: r.clamp(1 - EPS, 1 + EPS_HIGH) * a * lp,  # no stop-gradient: the clip's own slope leaks in
    lambda r, lp, a: r.clamp(1 - EPS, 1 + EPS_HIGH).detach() * a * r,  # the ratio for log p_θ: weight r·clip(r)
    lambda r, lp, a: torch.minimum(r * a, r.clamp(1 - EPS, 1 + EPS_HIGH).detach() * a),  # PPO's zero gradient back
    lambda r, lp, a: r.clamp(max=1 + EPS_HIGH).detach() * a * lp,  # the upper cap only, with ε = 0.2 given
], ids=["no-stop-gradient", "ratio-for-logp", "clip-the-product", "no-lower-cap"])
def test_cispo_checker_refuses_the_wrong_versions(wrong):
    with pytest.raises(AssertionError):
        check_cispo(wrong)


# ----------------------------------------------------------------------------- SAPO


def sapo(ratio, logp, advantages):
    return sapo_surrogate(ratio, advantages, tau_pos=1.0, tau_neg=2.0)


def check_sapo(f) -> None:
    """f = (4/τ) σ(τ(r - 1)) Â, τ = 1 for Â > 0 and 2 for Â < 0: 2Â/τ at r = 1 with slope Â there (as r Â), the
    slope 4 σ(1 - σ) Â elsewhere, fading symmetrically in r - 1 and faster for the larger τ."""
    for advantage, tau in ((+1.0, 1.0), (-1.0, 2.0)):
        value, slope = value_and_slope(f, RATIOS, advantage)
        gate = torch.sigmoid(tau * (RATIOS - 1))
        torch.testing.assert_close(value, 4 / tau * gate * advantage)
        torch.testing.assert_close(slope, 4 * gate * (1 - gate) * advantage)
    _, slope = value_and_slope(f, torch.tensor([1.0], dtype=F64), +1.0)
    assert slope.item() == pytest.approx(1.0)


def test_sapo_by_hand():
    check_sapo(sapo)


@pytest.mark.parametrize("wrong", [
    lambda r, lp, a: torch.sigmoid(torch.where(a > 0, 1.0, 2.0) * (r - 1)) * a,  # without 4/τ: slope τÂ/4 at r = 1
    lambda r, lp, a: 4 * torch.sigmoid(torch.where(a > 0, 1.0, 2.0) * r) / torch.where(a > 0, 1.0, 2.0) * a,  # σ(τr)
    lambda r, lp, a: sapo_surrogate(r, a, tau_pos=2.0, tau_neg=1.0),  # τ_pos and τ_neg swapped
], ids=["no-4-over-tau", "gate-at-zero", "temperatures-swapped"])
def test_sapo_checker_refuses_the_wrong_versions(wrong):
    with pytest.raises(AssertionError):
        check_sapo(wrong)


# ----------------------------------------------------------------------------- GMPO


def gmpo_by_hand(logp, old_logp, advantages, mask, eps, eps_high) -> tuple[list[float], list[list[float]]]:
    """The GMPO paper's objective re-derived with math, token by token: ř_t = min(r_t, e^ε_high) for Â > 0 and
    max(r_t, e^-ε) for Â < 0; ŝ = (Π_t ř_t)^(1/|y|); ∂(ŝ Â)/∂log p_θ(y_t) = Â ŝ / |y| where ř_t = r_t, else 0."""
    ratios, grads = [], []
    for i in range(mask.shape[0]):
        tokens = [t for t in range(mask.shape[1]) if mask[i, t]]
        a = advantages[i].item()
        r = [math.exp(logp[i, t].item() - old_logp[i, t].item()) for t in tokens]
        kept = [min(x, math.exp(eps_high)) if a > 0 else max(x, math.exp(-eps)) if a < 0 else x for x in r]
        s = math.prod(kept) ** (1 / len(tokens)) if tokens and a != 0 else 1.0  # Â = 0: J = 0, ŝ = 1 by convention
        ratios.append(s)
        row = [0.0] * mask.shape[1]
        for t, x, k in zip(tokens, r, kept):
            row[t] = a * s / len(tokens) if x == k else 0.0
        grads.append(row)
    return ratios, grads


def _gmpo_batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([5, 1, 3, 4, 2, 5])
    mask = (torch.arange(5)[None, :] < lengths[:, None]).double()
    logp = -torch.rand(6, 5, generator=g, dtype=F64) * 2
    old = logp + 0.4 * torch.randn(6, 5, generator=g, dtype=F64)  # log-ratios past ±0.2 on both sides
    advantages = torch.randn(6, generator=g, dtype=F64)
    advantages[4] = 0.0
    return logp * mask, old * mask, advantages, mask


def check_gmpo(ratio_fn) -> None:
    """ŝ_i of ratio_fn(logp, old_logp, advantages, mask, eps, eps_high) and the gradient of Σ_i ŝ_i Â_i against
    the re-derivation above, with ε = 0.2, ε_high = 0.28 (in log space)."""
    logp, old, advantages, mask = _gmpo_batch()
    logp.requires_grad_(True)
    ratio = ratio_fn(logp, old, advantages, mask, EPS, EPS_HIGH)
    (grad,) = torch.autograd.grad((ratio * advantages).sum(), logp)
    expected_ratio, expected_grad = gmpo_by_hand(logp.detach(), old, advantages, mask, EPS, EPS_HIGH)
    torch.testing.assert_close(ratio.detach(), torch.tensor(expected_ratio, dtype=F64))
    torch.testing.assert_close(grad, torch.tensor(expected_grad, dtype=F64))


def test_gmpo_matches_its_re_derivation_and_the_batch_clips_both_sides():
    check_gmpo(gmpo_ratio)
    logp, old, advantages, mask = _gmpo_batch()
    log_ratio = (logp - old)[mask.bool()]
    assert (log_ratio > EPS_HIGH).any() and (log_ratio < -EPS).any()


def _masked_mean(x, mask):
    return (x * mask).sum(-1) / mask.sum(-1).clamp_min(1)


@pytest.mark.parametrize("wrong", [
    # the arithmetic mean of the clipped token ratios (GRPO's average, not a geometric one)
    lambda lp, old, a, m, e, eh: _masked_mean(torch.exp(torch.minimum((lp - old) * a.sign()[:, None], (lp - old).clamp(
        -e, eh) * a.sign()[:, None]) * a.sign()[:, None]), m),
    # clipped in ratio space, [1 - ε, 1 + ε_high], not in log space
    lambda lp, old, a, m, e, eh: torch.exp(_masked_mean(a.sign()[:, None] * torch.minimum(
        a.sign()[:, None] * (lp - old), a.sign()[:, None] * (lp - old).exp().clamp(1 - e, 1 + eh).log()), m)),
    # the geometric mean first, clipped after (GSPO's order, in log space)
    lambda lp, old, a, m, e, eh: torch.exp(torch.where(a > 0, torch.minimum(_masked_mean(lp - old, m), torch.tensor(
        eh, dtype=F64)), torch.maximum(_masked_mean(lp - old, m), torch.tensor(-e, dtype=F64)))),
    # both sides clipped whatever the sign of Â (not pessimistic: a token is stopped where PPO would not)
    lambda lp, old, a, m, e, eh: torch.exp(_masked_mean((lp - old).clamp(-e, eh), m)),
], ids=["arithmetic-mean", "ratio-space-clip", "clip-after-the-mean", "two-sided-clip"])
def test_gmpo_checker_refuses_the_wrong_versions(wrong):
    with pytest.raises(AssertionError):
        check_gmpo(wrong)


def verl_geo_mean(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high):
    """verl's compute_policy_loss_geo_mean as written (volcengine/verl b178a3cd, verl/trainer/ppo/core_algos.py,
    policy_loss.loss_mode="geo_mean"), its metrics and rollout weights left out; advantages are (B, T) there."""
    negative_approx_kl = log_prob - old_log_prob
    sgn_advantage = torch.sign(advantages)
    negative_approx_kl_clamp = torch.clamp(negative_approx_kl, -clip_ratio_low, clip_ratio_high)
    negative_approx_kl_min = torch.min(sgn_advantage * negative_approx_kl, sgn_advantage * negative_approx_kl_clamp)
    negative_approx_kl_min = sgn_advantage * negative_approx_kl_min
    response_mask_sum = response_mask.sum(dim=-1)
    ratio = torch.exp((negative_approx_kl_min * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8))
    advantage = (advantages * response_mask).sum(dim=-1) / (response_mask_sum + 1e-8)
    pg_losses = -advantage * ratio
    return torch.mean(pg_losses)


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("eps, eps_high", [(0.4, 0.4), (0.2, 0.28)])
def test_gmpo_matches_verl_geo_mean(seed, eps, eps_high):
    """grpo_loss(policy_loss="gmpo", aggregation="seq-mean", β = 0) against verl's geo_mean: loss and gradient
    to 1e-6 (verl's + 1e-8 in two denominators moves its numbers by ~1e-8 relative)."""
    logp, old, advantages, mask = _gmpo_batch(seed)
    ours_logp, verl_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    loss, _ = grpo_loss(ours_logp, old, None, advantages, mask, eps, 0.0, "seq-mean", eps_high=eps_high,
                        policy_loss="gmpo")
    verl = verl_geo_mean(old, verl_logp, advantages[:, None] * mask, mask, eps, eps_high)
    (ours_grad,) = torch.autograd.grad(loss, ours_logp)
    (verl_grad,) = torch.autograd.grad(verl, verl_logp)
    assert abs(loss.item() - verl.item()) <= 1e-6
    assert (ours_grad - verl_grad).abs().max().item() <= 1e-6


def test_gmpo_of_one_token_answers_is_the_clip_with_log_space_edges():
    """|y| = 1: ŝ = ř, so GMPO is PPO's clip with the edges e^-ε and e^ε_high, value and gradient."""
    g = torch.Generator().manual_seed(3)
    logp = -torch.rand(8, 1, generator=g, dtype=F64)
    old = logp + 0.5 * torch.randn(8, 1, generator=g, dtype=F64)
    advantages, mask = torch.randn(8, generator=g, dtype=F64), torch.ones(8, 1, dtype=F64)
    losses = []
    for options in (dict(policy_loss="gmpo", eps=EPS, eps_high=EPS_HIGH),
                    dict(policy_loss="clip", eps=1 - math.exp(-EPS), eps_high=math.exp(EPS_HIGH) - 1)):
        x = logp.clone().requires_grad_(True)
        eps = options.pop("eps")
        loss, _ = grpo_loss(x, old, None, advantages, mask, eps, 0.0, **options)
        losses.append((loss.detach(), torch.autograd.grad(loss, x)[0]))
    torch.testing.assert_close(losses[0], losses[1])


def test_gmpo_is_sequence_level_only():
    logp, old, advantages, mask = _gmpo_batch()
    with pytest.raises(ValueError, match="importance_sampling_level='token'"):
        grpo_loss(logp, old, None, advantages, mask, EPS, 0.0, policy_loss="gmpo",
                  importance_sampling_level="sequence")


# ----------------------------------------------------------------------------- verl's other losses as written


def verl_vanilla(old_log_prob, log_prob, advantages, response_mask, cliprange_low, cliprange_high, clip_ratio_c):
    """verl's compute_policy_loss_vanilla (dual-clip PPO), as written, token-mean."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0))
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_pg_losses1 = torch.maximum(pg_losses1, pg_losses2)
    pg_losses3 = -advantages * clip_ratio_c
    clip_pg_losses2 = torch.min(pg_losses3, clip_pg_losses1)
    pg_losses = torch.where(advantages < 0, clip_pg_losses2, clip_pg_losses1)
    return (pg_losses * response_mask).sum() / response_mask.sum()


def verl_cispo(old_log_prob, log_prob, advantages, response_mask, clip_ratio_low, clip_ratio_high):
    """verl's compute_policy_loss_cispo, as written, token-mean: both caps, unlike TRL's."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0))
    clipped_ratio_sg = torch.clamp(ratio, 1 - clip_ratio_low, 1 + clip_ratio_high).detach()
    pg_losses = -clipped_ratio_sg * advantages * log_prob
    return (pg_losses * response_mask).sum() / response_mask.sum()


def verl_sapo(old_log_prob, log_prob, advantages, response_mask, tau_pos, tau_neg):
    """verl's compute_policy_loss_sapo, as written, seq-mean-token-mean."""
    ratio = torch.exp(torch.clamp(log_prob - old_log_prob, min=-20.0, max=20.0))
    taus = torch.where(advantages > 0, torch.as_tensor(tau_pos, dtype=F64), torch.as_tensor(tau_neg, dtype=F64))
    pg_losses = -torch.sigmoid(taus * (ratio - 1.0)) * (4.0 / taus) * advantages
    return ((pg_losses * response_mask).sum(-1) / response_mask.sum(-1)).mean()


@pytest.mark.parametrize("policy_loss, aggregation, verl_loss, options", [
    ("dual-clip", "token-mean", lambda o, lp, a, m: verl_vanilla(o, lp, a, m, EPS, EPS_HIGH, 1.25),
     dict(dual_clip_c=1.25)),
    ("cispo", "token-mean", lambda o, lp, a, m: verl_cispo(o, lp, a, m, EPS, EPS_HIGH), {}),
    ("sapo", "seq-mean", lambda o, lp, a, m: verl_sapo(o, lp, a, m, 1.0, 1.05), {}),
])
def test_the_zoo_matches_verl(policy_loss, aggregation, verl_loss, options):
    """verl's dual-clip (vanilla with clip_ratio_c), cispo (with the lower cap TRL lacks) and sapo: loss and
    gradient in float64 (verl keeps no empty rows: every row here has a token)."""
    logp, old, advantages, mask = _gmpo_batch(4)
    ours_logp, verl_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    loss, _ = grpo_loss(ours_logp, old, None, advantages, mask, EPS, 0.0, aggregation, eps_high=EPS_HIGH,
                        policy_loss=policy_loss, **options)
    verl = verl_loss(old, verl_logp, advantages[:, None] * torch.ones_like(mask), mask)
    assert abs(loss.item() - verl.item()) <= 1e-10
    assert (torch.autograd.grad(loss, ours_logp)[0] - torch.autograd.grad(verl, verl_logp)[0]).abs().max() <= 1e-10


# ----------------------------------------------------------------------------- through grpo_loss


@pytest.mark.parametrize("policy_loss", [name for name in POLICY_LOSSES if name != "cispo"])
def test_gradcheck_every_policy_loss(policy_loss):
    """Ratios kept away from every kink (0.8, 1.28, c = 1.6, and GMPO's e^-0.2, e^0.28). Not CISPO: its
    stop-gradient is the method, and finite differences see through it (its gradient: test_cispo_by_hand)."""
    mask = (torch.arange(4)[None, :] < torch.tensor([4, 2, 3, 1])[:, None]).double()
    ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5, 0.7, 1.2, 0.95, 2.0, 1.05, 0.6, 1.15, 0.9, 1.7, 1.0, 0.75],
                         dtype=F64).view(4, 4)
    logp = -torch.rand(4, 4, generator=torch.Generator().manual_seed(0), dtype=F64)
    old, ref = logp - ratio.log(), logp - 0.1
    advantages = torch.tensor([0.7, -1.2, 0.4, -0.3], dtype=F64)
    levels = ("token",) if policy_loss == "gmpo" else ("token", "sequence")
    options = dict(dual_clip_c=1.6) if policy_loss == "dual-clip" else {}
    for level in levels:
        def loss_of(lp, rl, level=level):
            return grpo_loss(lp, old, rl, advantages, mask, EPS, 0.05, "seq-mean", eps_high=EPS_HIGH,
                             importance_sampling_level=level, policy_loss=policy_loss, **options)[0]
        assert gradcheck(loss_of, (logp.clone().requires_grad_(True), ref.clone().requires_grad_(True)))


def test_dual_clip_logs_its_floor_and_equals_the_clip_below_it():
    logp, old, advantages, mask = _gmpo_batch(1)
    clip, clip_stats = grpo_loss(logp, old, None, advantages, mask, EPS, 0.0, policy_loss="clip")
    far, stats = grpo_loss(logp, old, None, advantages, mask, EPS, 0.0, policy_loss="dual-clip", dual_clip_c=100.0)
    assert far.item() == clip.item() and stats["clip_frac_dual"] == 0.0
    ratio = torch.exp(logp - old)
    floored = (ratio > 1.1) & (advantages < 0)[:, None] & mask.bool()
    near, stats = grpo_loss(logp, old, None, advantages, mask, EPS, 0.0, policy_loss="dual-clip", dual_clip_c=1.1)
    assert stats["clip_frac_dual"] == pytest.approx(floored.sum().item() / mask.sum().item()) and floored.any()
    assert near.item() < clip.item()  # the floor raises the objective of the floored tokens: a smaller loss


def test_sapo_logs_no_clip_and_cispo_logs_its_capped_weights():
    logp, old, advantages, mask = _gmpo_batch(2)
    _, stats = grpo_loss(logp, old, None, advantages, mask, EPS, 0.0, policy_loss="sapo")
    assert stats["clip_frac"] == 0.0
    _, stats = grpo_loss(logp, old, None, advantages, mask, EPS, 0.0, eps_high=EPS_HIGH, policy_loss="cispo")
    ratio = torch.exp(logp - old)[mask.bool()]
    assert stats["clip_frac_high"] == pytest.approx((ratio > 1.28).double().mean().item())
    assert stats["clip_frac"] == pytest.approx(((ratio > 1.28) | (ratio < 0.8)).double().mean().item())


# ----------------------------------------------------------------------------- the explorer's grid


@pytest.mark.parametrize("policy_loss", POLICY_LOSSES)
def test_the_grid_is_the_loss_at_one_token(policy_loss):
    """Each grid point is -grpo_per_token_loss of a one-token answer with p_θold = 1; slope = weight / r."""
    ratios = torch.linspace(0.3, 4.0, 23, dtype=F64)
    advantages = torch.tensor([-1.5, -0.2, 0.0, 0.7], dtype=F64)
    grid = ratio_function_grid(policy_loss, ratios, advantages, EPS, EPS_HIGH)
    assert {k: v.shape for k, v in grid.items()} == {k: (23, 4) for k in ("objective", "slope", "weight")}
    for j, advantage in enumerate(advantages):
        logp = ratios.log()[:, None].clone().requires_grad_(True)
        loss, _ = grpo_loss(logp, torch.zeros_like(logp), None, advantage.repeat(23), torch.ones_like(logp), EPS,
                            0.0, "seq-sum", eps_high=EPS_HIGH, policy_loss=policy_loss)
        (grad,) = torch.autograd.grad(loss, logp)
        torch.testing.assert_close(grid["weight"][:, j], -grad[:, 0] * 23)
    torch.testing.assert_close(grid["slope"], grid["weight"] / ratios[:, None])


def test_the_grid_shows_where_each_method_stops_the_gradient():
    """r = 2, Â = +1: clip, dual-clip and GMPO stop it, CISPO keeps the capped weight 1.28, SAPO a faded one.
    r = 5, Â = -1: only dual-clip stops it (r > c = 3)."""
    ratios, advantages = torch.tensor([2.0, 5.0], dtype=F64), torch.tensor([1.0, -1.0], dtype=F64)
    weight = {name: ratio_function_grid(name, ratios, advantages, EPS, EPS_HIGH)["weight"] for name in POLICY_LOSSES}
    assert [weight[name][0, 0].item() for name in ("clip", "dual-clip", "gmpo")] == [0.0, 0.0, 0.0]
    assert weight["cispo"][0, 0].item() == pytest.approx(1.28)
    assert 0 < weight["sapo"][0, 0].item() < 2.0
    assert weight["dual-clip"][1, 1].item() == 0.0
    assert all(weight[name][1, 1].item() < 0 for name in ("clip", "cispo", "sapo", "gmpo"))


@pytest.mark.parametrize("call, match", [
    (lambda: ratio_function_grid("ppo", RATIOS, RATIOS), "policy_loss must be one of"),
    (lambda: ratio_function_grid("clip", torch.tensor([0.0, 1.0]), RATIOS), "ratios must be > 0"),
    (lambda: ratio_function_grid("clip", RATIOS.view(2, 4), RATIOS), "ratios and advantages must be 1-D"),
])
def test_the_grid_names_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize("policy_loss, level", [(name, level) for name in POLICY_LOSSES for level in (
    "token", "sequence") if (name, level) != ("gmpo", "sequence")])
def test_padding_and_empty_rows_leave_every_policy_loss_finite(policy_loss, level):
    """inf and NaN on padding, and a row with no real token, change nothing: the loss and its gradient are those of
    the same batch with zeros there, the empty row's gradient is 0, and the per-token loss is 0 on padding (the
    sequence-level objectives too, which are one number per row)."""
    logp, old, advantages, mask = _gmpo_batch(5)
    mask[2] = 0.0  # an empty row
    dirty = [t.clone() for t in (logp, old)]
    for t, bad in zip(dirty, (float("nan"), float("inf"))):
        t[~mask.bool()] = bad
    results = []
    for lp, ol in ((logp * mask, old * mask), dirty):
        x = lp.clone().requires_grad_(True)
        loss, _ = grpo_loss(x, ol, None, advantages, mask, EPS, 0.0, "seq-mean", eps_high=EPS_HIGH,
                            importance_sampling_level=level, policy_loss=policy_loss)
        results.append((loss.detach(), torch.autograd.grad(loss, x)[0]))
    torch.testing.assert_close(results[0], results[1])
    assert torch.isfinite(results[1][1]).all() and (results[1][1][2] == 0).all()
    per_token = grpo_per_token_loss(*dirty, None, advantages, mask, EPS, 0.0, importance_sampling_level=level,
                                    policy_loss=policy_loss)
    assert (per_token[~mask.bool()] == 0).all() and torch.isfinite(per_token).all()  # 0 on padding, as documented


def test_sapos_weight_peaks_near_r_2_as_notebook_09a_says():
    """09a: SAPO's slope is largest at r = 1, but its weight r ∂f/∂r keeps rising and peaks near r = 2 at about 1.6
    (τ = 1; once read 'a little above 1')."""
    ratios = torch.linspace(0.5, 4.0, 351, dtype=torch.float64)
    grid = ratio_function_grid("sapo", ratios, torch.tensor([1.0], dtype=torch.float64), tau_pos=1.0)
    slope, weight = grid["slope"][:, 0], grid["weight"][:, 0]
    assert abs(ratios[slope.argmax()].item() - 1.0) < 0.02
    assert abs(ratios[weight.argmax()].item() - 2.0) < 0.1 and abs(weight.max().item() - 1.6) < 0.05
    notebook = json.loads((Path(__file__).parent.parent / "notebooks/09a_toolbox.ipynb").read_text())
    text = "".join(notebook["cells"][5]["source"])
    assert "peaks near $r = 2$, at about 1.6" in text
