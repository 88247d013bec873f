"""Tests for minirlhf.losses: the lecture's worked numbers, estimator properties, gradients, masking."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.autograd import gradcheck

from minirlhf.losses import (
    aggregate,
    bradley_terry_loss,
    clipped_surrogate,
    dpo_loss,
    gae,
    grpo_advantages,
    grpo_loss,
    kl_k1,
    kl_k2,
    kl_k3,
    masked_mean,
    masked_sum,
    masked_whiten,
    pair_accuracy,
    ppo_clip_loss,
    reinforce_loss,
    rloo_advantages,
    value_loss,
)

EPS = 0.2


def _rand(*shape: int, seed: int = 0, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _ragged_mask(lengths: list[int], width: int) -> torch.Tensor:
    """Right-padded (B, width) float mask with lengths[i] real tokens in row i."""
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).double()


# ----------------------------------------------------------------------------- PPO worked tables


@pytest.mark.parametrize(
    "advantage, unclipped, clipped, objective, zero_grad",
    [
        # ratio:      0.5    1.0    1.5
        (+1.0, [0.5, 1.0, 1.5], [0.8, 1.0, 1.2], [0.5, 1.0, 1.2], [False, False, True]),
        (-1.0, [-0.5, -1.0, -1.5], [-0.8, -1.0, -1.2], [-0.8, -1.0, -1.5], [True, False, False]),
    ],
)
def test_ppo_lecture_table(advantage, unclipped, clipped, objective, zero_grad):
    """ε = 0.2. Â = +1, r = 1.5: the clip caps the gain at 1.2 and the gradient vanishes.
    Â = -1, r = 0.5: the action is already suppressed enough, the clipped -0.8 wins, gradient 0.
    Â = -1, r = 1.5: min keeps the worse unclipped -1.5, so the gradient still pushes r down."""
    ratio = torch.tensor([0.5, 1.0, 1.5], dtype=torch.float64, requires_grad=True)
    adv = torch.full_like(ratio, advantage)
    torch.testing.assert_close(ratio.detach() * adv, torch.tensor(unclipped, dtype=torch.float64))
    torch.testing.assert_close(
        ratio.detach().clamp(1 - EPS, 1 + EPS) * adv, torch.tensor(clipped, dtype=torch.float64)
    )
    surrogate = clipped_surrogate(ratio, adv, EPS)
    torch.testing.assert_close(surrogate.detach(), torch.tensor(objective, dtype=torch.float64))
    (grad,) = torch.autograd.grad(surrogate.sum(), ratio)
    assert (grad == 0).tolist() == zero_grad
    # ppo_clip_loss on the same three tokens (old_logp = 0, so r = exp(logp)) reports the same clips.
    _, stats = ppo_clip_loss(
        ratio.detach().log()[None], torch.zeros(1, 3, dtype=torch.float64), adv[None], torch.ones(1, 3), EPS
    )
    assert stats["clip_frac"] == pytest.approx(sum(zero_grad) / 3)
    assert stats["ratio_mean"] == pytest.approx(1.0)


def test_ppo_clip_frac_over_both_tables():
    ratio = torch.tensor([[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]], dtype=torch.float64)
    adv = torch.tensor([[1.0] * 3, [-1.0] * 3], dtype=torch.float64)
    loss, stats = ppo_clip_loss(ratio.log(), torch.zeros_like(ratio), adv, torch.ones(2, 3), EPS)
    assert stats["clip_frac"] == pytest.approx(2 / 6)
    assert loss.item() == pytest.approx(-(0.5 + 1.0 + 1.2 - 0.8 - 1.0 - 1.5) / 6)
    # approx_kl is the k3 estimate of KL(p_θold || p_θ): mean of (r - 1) - log r
    expected_kl = ((ratio - 1) - ratio.log()).mean().item()
    assert stats["approx_kl"] == pytest.approx(expected_kl)
    assert stats["ratio_max"] == pytest.approx(1.5)


def test_ratio_max_reads_only_real_tokens():
    """Padding has r = 1 after zeroing; with every real ratio below 1 the largest must still be a real one."""
    logp = torch.tensor([[-0.5, -0.1, 3.0], [-0.2, 5.0, 5.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    adv = torch.ones(2, dtype=torch.float64)
    _, stats = ppo_clip_loss(logp, torch.zeros_like(logp), adv, mask, EPS)
    assert stats["ratio_max"] == pytest.approx(math.exp(-0.1))
    _, stats = grpo_loss(logp, torch.zeros_like(logp), None, adv, mask, EPS, beta=0.0)
    assert stats["ratio_max"] == pytest.approx(math.exp(-0.1))


def test_ppo_without_clipping_is_policy_gradient_with_baseline():
    """Lecture quiz: with ε → ∞ nothing is clipped, the loss is -E_t[r_t Â_t], and at r = 1 its gradient
    is the REINFORCE-with-advantage gradient -E_t[Â_t ∇ log p_θ] (same token-mean aggregation)."""
    mask = _ragged_mask([4, 2, 3], 4)
    logp, adv = -_rand(3, 4, seed=1).abs(), _rand(3, 4, seed=2)
    old_logp = logp + 0.5 * _rand(3, 4, seed=3)  # ratios far outside [0.8, 1.2]
    loss, stats = ppo_clip_loss(logp, old_logp, adv, mask, eps=1e9)
    assert stats["clip_frac"] == 0.0
    torch.testing.assert_close(loss, -masked_mean(torch.exp(logp - old_logp) * adv, mask))

    logp = logp.clone().requires_grad_(True)
    ppo, _ = ppo_clip_loss(logp, logp.detach(), adv, mask, eps=1e9)  # r = 1
    (grad_ppo,) = torch.autograd.grad(ppo, logp)
    (grad_pg,) = torch.autograd.grad(reinforce_loss(logp, adv, mask, aggregation="token-mean"), logp)
    torch.testing.assert_close(grad_ppo, grad_pg)
    torch.testing.assert_close(grad_ppo, -adv * mask / mask.sum())


# ----------------------------------------------------------------------------- REINFORCE / RLOO


def test_reinforce_sums_tokens_and_averages_sequences():
    """L = -(1/B) Σ_i Â_i log p_θ(y_i|x_i), with log p_θ(y|x) = Σ_t log p_θ(y_t|...)."""
    mask = _ragged_mask([3, 1], 3)
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, 9.0, 9.0]], dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([2.0, -1.0], dtype=torch.float64)
    loss = reinforce_loss(logp, adv, mask)
    assert loss.item() == pytest.approx(-(2.0 * -6.0 + -1.0 * -0.5) / 2)
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(grad, torch.tensor([[-1.0, -1.0, -1.0], [0.5, 0.0, 0.0]], dtype=torch.float64))
    # (B,) advantages are the same as repeating them over every token
    torch.testing.assert_close(reinforce_loss(logp, adv[:, None].expand(2, 3), mask), loss)


def test_rloo_leave_one_out_baseline():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 4.0, 6.0, 8.0])
    # group 1: Â_0 = 1 - 0 = 1, the others 0 - 1/3; group 2: Â_0 = 2 - (4+6+8)/3 = -4, ...
    expected = torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3, -4.0, -4 / 3, 4 / 3, 4.0])
    adv = rloo_advantages(rewards, group_size=4)
    torch.testing.assert_close(adv, expected)
    torch.testing.assert_close(adv.view(2, 4).sum(1), torch.zeros(2))
    # equivalently RLOO = G/(G-1) · (R_i - mean of the whole group)
    group = rewards.view(2, 4)
    torch.testing.assert_close(adv, (4 / 3 * (group - group.mean(1, keepdim=True))).reshape(-1))


# ----------------------------------------------------------------------------- GRPO advantages


def test_grpo_advantages_use_sample_std_like_trl():
    """3 correct out of 8: mean 3/8, SAMPLE std sqrt(Σ(R - mean)² / 7) = sqrt(1.875/7) = 0.517549.
    We use the sample (unbiased, torch.std default) std because TRL does and we cross-check against it.
    Correct: 0.625 / 0.517549 = 1.207615; wrong: -0.375 / 0.517549 = -0.724569."""
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    adv = grpo_advantages(rewards, group_size=8)
    expected = torch.tensor([1.207615] * 3 + [-0.724569] * 5)
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)
    # the population std (divide by 8) would give 1.290994 / -0.774597 instead
    assert adv[0].item() != pytest.approx(0.625 / math.sqrt(1.875 / 8), abs=1e-3)
    assert adv.sum().item() == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_grpo_advantages_sum_to_zero_per_group(scale):
    rewards = torch.rand(6 * 4, generator=torch.Generator().manual_seed(0))
    adv = grpo_advantages(rewards, group_size=4, scale=scale).view(6, 4)
    torch.testing.assert_close(adv.sum(1), torch.zeros(6), atol=1e-6, rtol=0)


def test_grpo_advantage_scales():
    rewards = torch.tensor([1.0, 0.0, 5.0, 3.0])
    centred = torch.tensor([0.5, -0.5, 1.0, -1.0])
    torch.testing.assert_close(grpo_advantages(rewards, 2, scale="none"), centred)
    torch.testing.assert_close(grpo_advantages(rewards, 2, scale="batch"), centred / rewards.std())
    torch.testing.assert_close(
        grpo_advantages(rewards, 2, scale="group"), centred / torch.tensor([0.5, 0.5, 1.0, 1.0]) / 2**0.5
    )


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@pytest.mark.parametrize(
    "group",
    [[0.0] * 4, [1.0] * 4, [0.1] * 4, [1.0, 1.0 + 1e-7, 1.0 - 1e-7, 1.0], [3.0, 3.0 + 2e-6, 3.0, 3.0 - 1e-6]],
)
def test_grpo_constant_or_noisy_group_gives_zero(scale, group):
    """All-equal rewards (or float noise around one value) carry no signal: advantages exactly 0, no NaN."""
    rewards = torch.tensor(group + [0.0, 1.0, 0.0, 1.0])  # a second, informative group
    adv = grpo_advantages(rewards, group_size=4, scale=scale)
    assert torch.isfinite(adv).all()
    assert (adv[:4] == 0).all()
    assert (adv[4:] != 0).all()


# ----------------------------------------------------------------------------- GRPO loss


def test_aggregations_by_hand():
    x = torch.tensor([[1.0, 2.0, 3.0], [4.0, 99.0, 99.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(x, mask, "seq-sum").item() == pytest.approx((6 + 4) / 2)
    assert aggregate(x, mask, "seq-mean").item() == pytest.approx((2 + 4) / 2)
    assert aggregate(x, mask, "token-mean").item() == pytest.approx(10 / 4)
    assert aggregate(x, mask, "constant").item() == pytest.approx(10 / 6)


def test_grpo_length_bias_of_seq_mean():
    """Two wrong answers (Â = -1), 1 token and 4 tokens long. "seq-mean" gives each token of the long
    answer only 1/4 of the push the short one gets; "token-mean" and "constant" weigh tokens equally."""
    mask = _ragged_mask([1, 4], 4)
    logp = torch.zeros(2, 4, dtype=torch.float64, requires_grad=True)
    adv = torch.tensor([-1.0, -1.0], dtype=torch.float64)
    for aggregation, ratio_long_to_short in [("seq-mean", 0.25), ("token-mean", 1.0), ("constant", 1.0)]:
        loss, _ = grpo_loss(logp, logp.detach(), None, adv, mask, EPS, beta=0.0, aggregation=aggregation)
        (grad,) = torch.autograd.grad(loss, logp)
        assert (grad[1, 0] / grad[0, 0]).item() == pytest.approx(ratio_long_to_short)


def test_grpo_loss_matches_formula_and_beta_zero_needs_no_reference():
    mask = _ragged_mask([3, 2], 3)
    logp, old_logp, ref_logp = (-_rand(2, 3, seed=s).abs() for s in (1, 2, 3))
    adv = torch.tensor([1.0, -0.5], dtype=torch.float64)
    loss, stats = grpo_loss(logp, old_logp, ref_logp, adv, mask, EPS, beta=0.1)
    ratio = torch.exp(logp - old_logp)
    per_token = clipped_surrogate(ratio, adv[:, None], EPS) - 0.1 * kl_k3(logp, ref_logp)
    torch.testing.assert_close(loss, -masked_mean(per_token, mask, dim=-1).mean())
    assert stats["kl"] == pytest.approx(masked_mean(kl_k3(logp, ref_logp), mask).item())
    assert set(stats) == {"clip_frac", "clip_frac_low", "clip_frac_high", "ratio_mean", "ratio_max", "kl"}
    assert stats["ratio_max"] == pytest.approx(ratio[mask.bool()].max().item())

    no_ref, stats = grpo_loss(logp, old_logp, None, adv, mask, EPS, beta=0.0)
    with_ref, _ = grpo_loss(logp, old_logp, ref_logp, adv, mask, EPS, beta=0.0)
    torch.testing.assert_close(no_ref, with_ref)
    assert "kl" not in stats


# ----------------------------------------------------------------------------- DPO / reward model


def test_dpo_lecture_quiz():
    """Winner log-ratio +0.1, loser -2.0: h = 2.1, reward gap β·2.1 = 0.21, loss -log σ(0.21) = 0.593650."""
    beta = 0.1
    ref_w, ref_l = torch.tensor([-10.0], dtype=torch.float64), torch.tensor([-12.0], dtype=torch.float64)
    pol_w = (ref_w + 0.1).requires_grad_(True)
    pol_l = (ref_l - 2.0).requires_grad_(True)
    losses, chosen_r, rejected_r = dpo_loss(pol_w, pol_l, ref_w, ref_l, beta)
    assert chosen_r.item() == pytest.approx(0.01) and rejected_r.item() == pytest.approx(-0.2)
    assert (chosen_r - rejected_r).item() == pytest.approx(0.21)
    assert not chosen_r.requires_grad and not rejected_r.requires_grad
    assert losses.item() == pytest.approx(-math.log(1 / (1 + math.exp(-0.21))))
    assert losses.item() == pytest.approx(0.593650, abs=1e-6)
    # gradient weight: d loss / d log p_θ(y_w) = -β σ(-β h), and +β σ(-β h) for y_l
    grad_w, grad_l = torch.autograd.grad(losses.sum(), (pol_w, pol_l))
    weight = beta * torch.sigmoid(torch.tensor(-beta * 2.1, dtype=torch.float64))
    torch.testing.assert_close(grad_w, -weight[None])
    torch.testing.assert_close(grad_l, weight[None])


def test_dpo_loss_types_and_label_smoothing():
    beta, h = 0.1, torch.tensor([2.1, -1.0], dtype=torch.float64)
    zeros = torch.zeros_like(h)
    ipo, _, _ = dpo_loss(h, zeros, zeros, zeros, beta, loss_type="ipo")
    torch.testing.assert_close(ipo, (h - 5.0) ** 2)  # 1/(2β) = 5
    hinge, _, _ = dpo_loss(h, zeros, zeros, zeros, beta, loss_type="hinge")
    torch.testing.assert_close(hinge, torch.tensor([0.79, 1.1], dtype=torch.float64))
    smooth, _, _ = dpo_loss(h, zeros, zeros, zeros, beta, label_smoothing=0.1)
    torch.testing.assert_close(smooth, -0.9 * F.logsigmoid(beta * h) - 0.1 * F.logsigmoid(-beta * h))


def test_bradley_terry_loss():
    chosen, rejected = torch.tensor([2.0, 0.0, -500.0]), torch.tensor([1.0, 0.0, 500.0])
    loss = bradley_terry_loss(chosen, rejected)
    expected = (math.log1p(math.exp(-1.0)) + math.log(2.0) + 1000.0) / 3  # -log σ(m) = log(1 + e^-m)
    assert loss.item() == pytest.approx(expected)


# ----------------------------------------------------------------------------- KL estimators


def test_kl_estimators_monte_carlo():
    """Sample y ~ p_θ on 5 outcomes. k1 and k3 are unbiased: their sample mean lies within 5 standard
    errors (SE = sample std / sqrt(N), N = 200k) of the exact KL. k2 is biased: its mean is off by
    hundreds of SEs (yet it matches its own expectation E[½ d²], so the sampler is not to blame)."""
    p = torch.softmax(torch.tensor([2.0, 1.0, 0.0, -1.0, -2.0], dtype=torch.float64), 0)
    q = torch.softmax(torch.tensor([-1.0, 0.0, 1.0, 0.0, -0.5], dtype=torch.float64), 0)
    exact_kl = (p * (p / q).log()).sum()  # 1.2953
    n = 200_000
    y = torch.multinomial(p, n, replacement=True, generator=torch.Generator().manual_seed(0))
    logp, ref_logp = p.log()[y], q.log()[y]

    def mean_and_se(k: torch.Tensor) -> tuple[float, float]:
        return k.mean().item(), k.std().item() / math.sqrt(n)

    for estimator in (kl_k1, kl_k3):
        mean, se = mean_and_se(estimator(logp, ref_logp))
        assert abs(mean - exact_kl.item()) < 5 * se, estimator.__name__
    mean, se = mean_and_se(kl_k2(logp, ref_logp))
    assert abs(mean - exact_kl.item()) > 50 * se
    assert abs(mean - (p * 0.5 * (p / q).log() ** 2).sum().item()) < 5 * se


def test_k3_is_never_negative():
    g = torch.Generator().manual_seed(0)
    logp = torch.randn(100_000, generator=g, dtype=torch.float64) * 5
    # differences from 1e-12 to 30 in size, both signs
    magnitude = 10 ** (torch.rand(100_000, generator=g, dtype=torch.float64) * 13 - 11.5)
    d = torch.randn(100_000, generator=g, dtype=torch.float64) * magnitude
    for dtype in (torch.float64, torch.float32):
        k3 = kl_k3(logp.to(dtype), (logp + d).to(dtype))
        assert (k3 >= 0).all()
    assert (kl_k2(logp, logp + d) >= 0).all()
    assert (kl_k3(logp, logp) == 0).all()


# ----------------------------------------------------------------------------- GAE and value loss


def test_gae_hand_computed():
    """r = [0, 0, 1], V = [0.5, 0.6, 0.7], γ = 0.9, λ = 0.8, V after the end = 0.
    δ = [0 + 0.9·0.6 - 0.5, 0 + 0.9·0.7 - 0.6, 1 + 0 - 0.7] = [0.04, 0.03, 0.3]
    Â_2 = 0.3, Â_1 = 0.03 + 0.72·0.3 = 0.246, Â_0 = 0.04 + 0.72·0.246 = 0.21712; returns = Â + V."""
    rewards = torch.tensor([[0.0, 0.0, 1.0]], dtype=torch.float64)
    values = torch.tensor([[0.5, 0.6, 0.7]], dtype=torch.float64)
    adv, returns = gae(rewards, values, torch.ones(1, 3), gamma=0.9, lam=0.8)
    torch.testing.assert_close(adv, torch.tensor([[0.21712, 0.246, 0.3]], dtype=torch.float64))
    torch.testing.assert_close(returns, torch.tensor([[0.71712, 0.846, 1.0]], dtype=torch.float64))


def test_gae_lambda_limits():
    gamma, T = 0.9, 5
    rewards, values = _rand(2, T, seed=1), _rand(2, T, seed=2)
    next_values = torch.cat([values[:, 1:], torch.zeros(2, 1, dtype=torch.float64)], dim=1)
    td_errors = rewards + gamma * next_values - values
    adv0, _ = gae(rewards, values, torch.ones(2, T), gamma, lam=0.0)
    torch.testing.assert_close(adv0, td_errors)
    discounted = torch.stack(
        [sum(gamma**l * rewards[:, t + l] for l in range(T - t)) for t in range(T)], dim=1
    )
    adv1, returns1 = gae(rewards, values, torch.ones(2, T), gamma, lam=1.0)
    torch.testing.assert_close(adv1, discounted - values)
    torch.testing.assert_close(returns1, discounted)


def test_gae_right_padding_matches_unpadded():
    lengths, T = [2, 5, 3], 6
    rewards, values = _rand(3, T, seed=3), _rand(3, T, seed=4)
    mask = _ragged_mask(lengths, T)
    garbage = torch.where(mask.bool(), rewards, torch.full_like(rewards, float("nan")))
    adv, returns = gae(garbage, values.masked_fill(~mask.bool(), float("inf")), mask, 0.95, 0.9)
    for i, n in enumerate(lengths):
        adv_i, returns_i = gae(rewards[i : i + 1, :n], values[i : i + 1, :n], torch.ones(1, n), 0.95, 0.9)
        torch.testing.assert_close(adv[i : i + 1, :n], adv_i)
        torch.testing.assert_close(returns[i : i + 1, :n], returns_i)
    assert (adv[~mask.bool()] == 0).all() and (returns[~mask.bool()] == 0).all()


def test_value_loss_clipping():
    """V moved from V_old = 0 to 1 (c = 0.5). Token 1 (R = 2): the clipped value 0.5 is further from R,
    (0.5 - 2)² = 2.25 > (1 - 2)² = 1, so the max picks it and the gradient is cut.
    Token 2 (R = 0): the unclipped error 1 > 0.25 wins and the gradient is V - R = 1 (times ½·2/2)."""
    values = torch.tensor([[1.0, 1.0]], dtype=torch.float64, requires_grad=True)
    old_values = torch.zeros(1, 2, dtype=torch.float64)
    returns = torch.tensor([[2.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(1, 2)
    assert value_loss(values, old_values, returns, mask).item() == pytest.approx(0.5 * (1 + 1) / 2)
    clipped = value_loss(values, old_values, returns, mask, clip=0.5)
    assert clipped.item() == pytest.approx(0.5 * (2.25 + 1.0) / 2)
    (grad,) = torch.autograd.grad(clipped, values)
    torch.testing.assert_close(grad, torch.tensor([[0.0, 0.5]], dtype=torch.float64))


def test_masked_helpers():
    x = torch.tensor([[1.0, 2.0, float("inf")], [3.0, float("nan"), 0.0]])
    mask = torch.tensor([[True, True, False], [True, False, False]])
    assert masked_sum(x, mask).item() == 6.0
    torch.testing.assert_close(masked_mean(x, mask, dim=1), torch.tensor([1.5, 3.0]))
    assert masked_mean(x, torch.zeros(2, 3)).item() == 0.0  # nothing real: 0, not NaN
    white = masked_whiten(x, mask)
    assert masked_mean(white, mask).item() == pytest.approx(0.0, abs=1e-6)
    assert masked_sum(white**2, mask).item() / 2 == pytest.approx(1.0, abs=1e-6)  # sample variance
    assert (white[~mask] == 0).all()


# ----------------------------------------------------------------------------- gradcheck (float64)


def test_gradcheck_all_losses():
    mask = _ragged_mask([4, 2, 3], 4)
    logp, ref_logp = -_rand(3, 4, seed=1).abs(), -_rand(3, 4, seed=2).abs()
    adv_tok, adv_seq = _rand(3, 4, seed=3), _rand(3, seed=4)
    # ratios 0.5, 0.9, 1.0, 1.1, 1.5 ...: at least 0.05 away from the kinks at 0.8 and 1.2
    ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5, 0.7])[torch.arange(12) % 6].view(3, 4).double()
    old_logp = logp - ratio.log()
    values, old_values, returns = _rand(3, 4, seed=5), _rand(3, 4, seed=6), _rand(3, 4, seed=7)

    def req(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(t.clone().requires_grad_(True) for t in ts)

    checks: list[tuple[Callable, tuple[torch.Tensor, ...]]] = [
        (lambda lp: reinforce_loss(lp, adv_seq, mask), req(logp)),
        (lambda lp: reinforce_loss(lp, adv_tok, mask, aggregation="token-mean"), req(logp)),
        (lambda lp: ppo_clip_loss(lp, old_logp, adv_tok, mask, EPS)[0], req(logp)),
        (lambda v: value_loss(v, old_values, returns, mask), req(values)),
        (lambda v: value_loss(v, old_values, returns, mask, clip=0.3), req(values)),
        (lambda r, v: gae(r, v, mask, 0.9, 0.8), req(values, returns)),
        (lambda x: masked_whiten(x, mask), req(values)),
        (lambda lp, rl: kl_k1(lp, rl), req(logp, ref_logp)),
        (lambda lp, rl: kl_k2(lp, rl), req(logp, ref_logp)),
        (lambda lp, rl: kl_k3(lp, rl), req(logp, ref_logp)),
        (lambda c, r: bradley_terry_loss(c, r), req(adv_seq, values[:, 0])),
    ]
    for aggregation in ("seq-mean", "token-mean", "constant"):
        checks.append(
            (
                lambda lp, rl, a=aggregation: grpo_loss(lp, old_logp, rl, adv_seq, mask, EPS, 0.1, a)[0],
                req(logp, ref_logp),
            )
        )
    pairs = req(*(-_rand(3, seed=s).abs() for s in (8, 9, 10, 11)))
    for loss_type in ("sigmoid", "ipo", "hinge"):  # hinge: β h stays far from the kink at 1 (β = 0.1)
        checks.append((lambda *x, t=loss_type: dpo_loss(*x, beta=0.1, loss_type=t)[0], pairs))
    checks.append((lambda *x: dpo_loss(*x, beta=0.1, label_smoothing=0.2)[0], pairs))
    for fn, inputs in checks:
        assert gradcheck(fn, inputs), fn


# ----------------------------------------------------------------------------- padding never matters


def _grpo(d: dict[str, torch.Tensor], aggregation: str) -> torch.Tensor:
    return grpo_loss(d["logp"], d["old_logp"], d["ref_logp"], d["adv_seq"], d["mask"], EPS, 0.1, aggregation)[
        0
    ]


PADDED_LOSSES: dict[str, Callable[[dict[str, torch.Tensor]], torch.Tensor]] = {
    "reinforce": lambda d: reinforce_loss(d["logp"], d["adv_seq"], d["mask"]),
    "reinforce_token_adv": lambda d: reinforce_loss(d["logp"], d["adv_tok"], d["mask"], "seq-mean"),
    "ppo": lambda d: ppo_clip_loss(d["logp"], d["old_logp"], d["adv_tok"], d["mask"], EPS)[0],
    "grpo_seq_mean": lambda d: _grpo(d, "seq-mean"),
    "grpo_token_mean": lambda d: _grpo(d, "token-mean"),
    # the constant normaliser divides by the padded width T, so multiply it back to compare
    "grpo_constant_times_T": lambda d: d["mask"].shape[1] * _grpo(d, "constant"),
    "value": lambda d: value_loss(d["values"], d["old_values"], d["returns"], d["mask"], clip=0.2),
    "gae": lambda d: sum(
        (x * d["weights"]).sum() for x in gae(d["rewards"], d["values"], d["mask"], 0.9, 0.7)
    ),
    "whiten": lambda d: (masked_whiten(d["values"], d["mask"]) * d["weights"]).sum(),
}
PER_TOKEN = ("logp", "old_logp", "ref_logp", "values", "old_values", "returns", "rewards", "adv_tok")
DIFFERENTIABLE = ("logp", "ref_logp", "values", "rewards")


def _make_batch(lengths: list[int], seed: int, pad: int, fill: float) -> tuple[dict, dict]:
    """The same data twice: width T = max length with clean zeros in padding, and width T + pad with
    `fill` (possibly inf/NaN) in every padded position."""
    B, T = len(lengths), max(lengths)
    g = torch.Generator().manual_seed(seed)
    mask, wide_mask = _ragged_mask(lengths, T), _ragged_mask(lengths, T + pad)
    clean = {name: torch.randn(B, T, generator=g, dtype=torch.float64) * mask for name in PER_TOKEN}
    clean["logp"] = -clean["logp"].abs()
    clean["old_logp"] = clean["logp"] + 0.3 * clean["old_logp"]
    clean["weights"] = torch.rand(B, T, generator=g, dtype=torch.float64) * mask
    clean["mask"], clean["adv_seq"] = mask, torch.randn(B, generator=g, dtype=torch.float64)
    padded = {"mask": wide_mask, "adv_seq": clean["adv_seq"], "weights": F.pad(clean["weights"], (0, pad))}
    for name in PER_TOKEN:
        wide = F.pad(clean[name], (0, pad))
        padded[name] = torch.where(wide_mask.bool(), wide, torch.full_like(wide, fill))
    for batch in (clean, padded):
        for name in DIFFERENTIABLE:
            batch[name].requires_grad_(True)
    return clean, padded


@pytest.mark.parametrize("name", list(PADDED_LOSSES))
@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 5), min_size=1, max_size=3),
    pad=st.integers(0, 3),
    fill=st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e30, 0.0]),
    seed=st.integers(0, 2**16),
)
def test_padding_never_changes_loss_or_gradient(name, lengths, pad, fill, seed):
    clean, padded = _make_batch(lengths, seed, pad, fill)
    fn = PADDED_LOSSES[name]
    loss_clean, loss_padded = fn(clean), fn(padded)
    torch.testing.assert_close(loss_padded, loss_clean)
    inputs = DIFFERENTIABLE
    grads_clean = torch.autograd.grad(loss_clean, [clean[k] for k in inputs], allow_unused=True)
    grads_padded = torch.autograd.grad(loss_padded, [padded[k] for k in inputs], allow_unused=True)
    T, real = clean["mask"].shape[1], padded["mask"].bool()
    for key, g_clean, g_padded in zip(inputs, grads_clean, grads_padded, strict=True):
        if g_padded is None:
            assert g_clean is None, key
            continue
        assert (g_padded[~real] == 0).all(), f"{key}: gradient leaks into padding"
        torch.testing.assert_close(g_padded[:, :T][real[:, :T]], g_clean[real[:, :T]], msg=key)


# ----------------------------------------------------------------------------- bad input


def _t(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: rloo_advantages(_t(6), 4), "group_size"),
        (lambda: rloo_advantages(_t(6), 1), "group_size"),
        (lambda: grpo_advantages(_t(8), 1), "group_size"),
        (lambda: grpo_advantages(_t(8), 3), "group_size"),
        (lambda: grpo_advantages(_t(8), 0), "group_size"),
        (lambda: grpo_advantages(torch.tensor([0.0, float("nan")]), 2), "rewards"),
        (lambda: rloo_advantages(torch.tensor([0.0, float("inf")]), 2), "rewards"),
        (lambda: grpo_advantages(_t(2, 4), 4), "rewards"),
        (lambda: grpo_advantages(_t(8), 4, scale="std"), "scale.*group, batch, none"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), beta=0.0), "beta"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), beta=-1.0), "beta"),
        (
            lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, loss_type="kto"),
            "loss_type.*sigmoid, ipo, hinge",
        ),
        (lambda: dpo_loss(_t(2), _t(3), _t(2), _t(2), 0.1), r"policy_rejected_logps \(3,\)"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, label_smoothing=0.7), "label_smoothing"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, "ipo", label_smoothing=0.1), "label_smoothing"),
        (lambda: grpo_loss(_t(2, 3), _t(2, 3), _t(2, 3), _t(2), _t(2, 3), EPS, beta=-0.1), "beta"),
        (lambda: grpo_loss(_t(2, 3), _t(2, 3), None, _t(2), _t(2, 3), EPS, beta=0.1), "ref_logp"),
        (lambda: grpo_loss(_t(2, 3), _t(2, 3), _t(2, 4), _t(2), _t(2, 3), EPS, 0.1), r"ref_logp \(2, 4\)"),
        (lambda: grpo_loss(_t(2, 3), _t(2, 3), None, _t(2, 3), _t(2, 3), EPS, 0.0), "advantages"),
        (
            lambda: grpo_loss(_t(2, 3), _t(2, 3), None, _t(2), _t(2, 3), EPS, 0.0, "sum"),
            "aggregation.*seq-mean",
        ),
        (lambda: grpo_loss(_t(2, 3), _t(2, 3), None, _t(2), _t(2, 3), 0.0, 0.0), "eps"),
        (lambda: ppo_clip_loss(_t(2, 3), _t(2, 3), _t(2, 3), _t(2, 3), eps=0.0), "eps"),
        (lambda: ppo_clip_loss(_t(2, 3), _t(2, 3), _t(2, 3), _t(2, 3), eps=-0.2), "eps"),
        (lambda: ppo_clip_loss(_t(2, 3), _t(2, 4), _t(2, 3), _t(2, 3), EPS), r"old_logp \(2, 4\)"),
        (lambda: ppo_clip_loss(_t(2, 3), _t(2, 3), _t(3), _t(2, 3), EPS), "advantages"),
        (lambda: clipped_surrogate(_t(3), _t(3), eps=0.0), "eps"),
        (lambda: reinforce_loss(_t(2, 3), _t(3), _t(2, 3)), "advantages"),
        (lambda: reinforce_loss(_t(2, 3), _t(2), _t(2, 3), aggregation="mean"), "aggregation"),
        (lambda: gae(_t(2, 3), _t(2, 3), _t(2, 3), gamma=1.5, lam=0.9), "gamma"),
        (lambda: gae(_t(2, 3), _t(2, 3), _t(2, 3), gamma=0.9, lam=-0.1), "lam"),
        (lambda: gae(_t(2, 3), _t(2, 2), _t(2, 3), 0.9, 0.9), r"values \(2, 2\)"),
        (lambda: value_loss(_t(2, 3), _t(2, 3), _t(2, 3), _t(2, 3), clip=0.0), "clip"),
        (lambda: value_loss(_t(2, 3), _t(2, 3), _t(3, 3), _t(2, 3)), r"returns \(3, 3\)"),
        (lambda: bradley_terry_loss(_t(2), _t(3)), r"rejected_scores \(3,\)"),
        (lambda: kl_k3(_t(2, 3), _t(2, 2)), r"ref_logp \(2, 2\)"),
        (lambda: masked_mean(_t(2, 3), _t(2, 2)), r"mask \(2, 2\)"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_pair_accuracy_counts_a_tie_as_half():
    chosen = torch.tensor([2.0, 0.0, -1.0, 1.0])
    rejected = torch.tensor([1.0, 0.0, 3.0, 1.0])
    assert pair_accuracy(chosen, rejected) == (1 + 0.5 + 0 + 0.5) / 4
    with pytest.raises(ValueError):
        pair_accuracy(chosen, rejected[:3])
