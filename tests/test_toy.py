"""Tests for minirlhf.course.toy: every derivation step of the lecture, checked with exact sums and sampling."""

from __future__ import annotations

import math

import pytest
import torch

from minirlhf import losses
from minirlhf.course import toy

LABELS, P_REF, REWARDS = toy.toy_bandit()


# ----------------------------------------------------------------------------- optimal policy


@pytest.mark.parametrize("beta", [0.05, 0.3, 1.0, 5.0])
def test_optimal_policy_matches_closed_form(beta):
    unnormalised = P_REF * torch.exp(REWARDS / beta)
    z = unnormalised.sum()
    torch.testing.assert_close(toy.optimal_policy(P_REF, REWARDS, beta), unnormalised / z)
    torch.testing.assert_close(toy.log_partition(P_REF, REWARDS, beta), z.log())


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_optimal_policy_maximises_kl_regularised_objective(beta):
    p_star = toy.optimal_policy(P_REF, REWARDS, beta)
    best = toy.kl_regularised_objective(p_star, P_REF, REWARDS, beta)
    # the maximum value is β log Z
    torch.testing.assert_close(best, beta * toy.log_partition(P_REF, REWARDS, beta))
    generator = torch.Generator().manual_seed(0)
    for scale in (1e-3, 0.1, 1.0):
        noise = torch.randn(500, len(P_REF), generator=generator, dtype=torch.float64)
        perturbed = torch.softmax(p_star.log() + scale * noise, dim=-1)
        values = toy.kl_regularised_objective(perturbed, P_REF, REWARDS, beta)
        assert bool((values < best).all())


def test_optimal_policy_limits_and_support():
    torch.testing.assert_close(toy.optimal_policy(P_REF, REWARDS, 1e6), P_REF, atol=1e-6, rtol=0)
    greedy = toy.optimal_policy(P_REF, REWARDS, 1e-3)  # tiny β: no overflow, all mass on argmax R
    assert torch.isfinite(greedy).all()
    assert greedy[int(REWARDS.argmax())] > 1 - 1e-9
    p_ref = toy.as_tensor([0.0, 0.5, 0.5])
    p_star = toy.optimal_policy(p_ref, [10.0, 0.0, 1.0], 0.1)
    assert p_star[0] == 0  # no mass where p_ref has none, however high the reward


def test_exact_kl_and_expected_reward():
    assert float(toy.exact_kl(P_REF, P_REF)) == 0.0
    p, q = toy.as_tensor([0.0, 0.25, 0.75]), toy.as_tensor([0.2, 0.3, 0.5])
    expected = 0.25 * math.log(0.25 / 0.3) + 0.75 * math.log(0.75 / 0.5)  # 0 log 0 = 0
    assert float(toy.exact_kl(p, q)) == pytest.approx(expected)
    assert float(toy.expected_reward(p, [1.0, 2.0, 3.0])) == pytest.approx(0.5 + 2.25)


def test_reward_recovered_and_partition_cancels():
    beta = 0.4
    check = toy.reward_recovery(P_REF, REWARDS, beta)
    assert check.reward_error < 1e-12
    assert check.bt_error < 1e-12
    # the implicit reward alone is off by the constant β log Z ...
    torch.testing.assert_close(check.rewards - check.implicit, check.beta_log_z.expand(len(REWARDS)))
    assert abs(float(check.beta_log_z)) > 1e-3
    # ... which Bradley–Terry never sees: differences of implicit rewards are differences of rewards
    torch.testing.assert_close(check.implicit[:, None] - check.implicit[None, :],
                               REWARDS[:, None] - REWARDS[None, :])
    torch.testing.assert_close(toy.implicit_reward(P_REF, P_REF, beta), torch.zeros_like(P_REF))


# ----------------------------------------------------------------------------- KL estimators


def test_kl_estimator_study_bias_and_spread():
    n_trials = 2000
    far = toy.optimal_policy(P_REF, REWARDS, 0.3)
    study = toy.kl_estimator_study(far, P_REF, sample_sizes=(1, 16), n_trials=n_trials, seed=0)
    assert study.exact == pytest.approx(float(toy.exact_kl(far, P_REF)))
    for name in ("k1", "k3"):  # unbiased: within 4 standard errors of the exact KL
        for bias, std in zip(study.bias[name], study.std[name], strict=True):
            assert abs(bias) < 4 * std / math.sqrt(n_trials)
    # k2 is biased: its mean stays away from the KL even when averaged over many samples
    assert abs(study.bias["k2"][1]) > 4 * study.std["k2"][1] / math.sqrt(n_trials)
    # spread shrinks like 1/sqrt(N) (k3 too, but this far from p_ref its heavy tail makes the std itself noisy)
    for name in ("k1", "k2"):
        assert study.std[name][1] == pytest.approx(study.std[name][0] / 4, rel=0.2)


def test_k3_has_lower_variance_than_k1_close_to_reference():
    near = toy.optimal_policy(P_REF, REWARDS, 5.0)
    study = toy.kl_estimator_study(near, P_REF, sample_sizes=(8,), n_trials=2000)
    assert study.std["k3"][0] < 0.5 * study.std["k1"][0]


# ----------------------------------------------------------------------------- policy gradient

LOGITS = toy.as_tensor([0.5, -0.2, 0.1, 0.0, -1.0])
OFFSET_REWARDS = REWARDS + 3.0  # all positive: the case where a baseline matters most


def test_exact_policy_gradient_matches_analytic_form():
    p = torch.softmax(LOGITS, -1)
    analytic = p * (REWARDS - (p * REWARDS).sum())  # ∂/∂θ_k Σ p R = p_k (R_k - E[R])
    torch.testing.assert_close(toy.exact_policy_gradient(LOGITS, REWARDS), analytic)


@pytest.mark.parametrize("baseline", [None, "value", "loo"])
def test_score_function_gradient_is_unbiased(baseline):
    exact = toy.exact_policy_gradient(LOGITS, OFFSET_REWARDS)
    grads = toy.score_function_gradients(LOGITS, OFFSET_REWARDS, 40_000, baseline=baseline, seed=1)
    summary = toy.summarise_estimates(grads)
    assert grads.shape == (40_000, len(LOGITS))
    assert bool(((summary.mean - exact).abs() < 4 * summary.std_error).all())


def test_group_mean_baseline_shrinks_gradient_by_g_minus_one_over_g():
    group_size = 4
    exact = toy.exact_policy_gradient(LOGITS, OFFSET_REWARDS)
    grads = toy.score_function_gradients(LOGITS, OFFSET_REWARDS, 40_000, baseline="mean", group_size=group_size)
    summary = toy.summarise_estimates(grads)
    shrunk = exact * (group_size - 1) / group_size
    assert bool(((summary.mean - shrunk).abs() < 4 * summary.std_error).all())


def test_baselines_reduce_variance():
    variance = {
        baseline: toy.summarise_estimates(
            toy.score_function_gradients(LOGITS, OFFSET_REWARDS, 20_000, baseline=baseline, seed=2)
        ).total_variance
        for baseline in toy.BASELINES
    }
    assert variance["value"] < 0.2 * variance[None]
    assert variance["loo"] < 0.2 * variance[None]
    assert variance["value"] < variance["loo"]  # a perfect critic beats a noisy 3-sample estimate


def test_score_function_rejects_unknown_baseline():
    with pytest.raises(ValueError, match="baseline"):
        toy.score_function_gradients(LOGITS, REWARDS, 8, baseline="critic")


# ----------------------------------------------------------------------------- PPO clip curve


def test_clip_curve_reproduces_lecture_tables():
    ratios = [0.5, 1.0, 1.5]
    good, good_grad = toy.clip_curve(ratios, +1.0, 0.2)
    bad, bad_grad = toy.clip_curve(ratios, -1.0, 0.2)
    torch.testing.assert_close(good, toy.as_tensor([0.5, 1.0, 1.2]))
    torch.testing.assert_close(bad, toy.as_tensor([-0.8, -1.0, -1.5]))
    torch.testing.assert_close(good_grad, toy.as_tensor([1.0, 1.0, 0.0]))  # capped when too greedy
    torch.testing.assert_close(bad_grad, toy.as_tensor([0.0, -1.0, -1.0]))  # stops once suppressed


# ----------------------------------------------------------------------------- GRPO group baseline


@pytest.mark.parametrize("G", [2, 8, 32])
def test_group_baseline_noise_matches_theory(G):
    noise = toy.group_baseline_noise(0.3, G, n_trials=4000, seed=0)
    assert noise.baseline_std == pytest.approx(noise.baseline_std_theory, rel=0.1)
    assert noise.zero_signal == pytest.approx(noise.zero_signal_theory, abs=0.03)
    assert noise.correct_advantage_mean > 0


def test_group_baseline_noise_example_group():
    # one correct answer out of G = 4: the advantage equals grpo_advantages on that group
    rewards = toy.as_tensor([1.0, 0.0, 0.0, 0.0])
    mean, std = 0.25, float(rewards.std())
    torch.testing.assert_close(losses.grpo_advantages(rewards, 4)[0], toy.as_tensor((1 - mean) / std),
                               rtol=1e-3, atol=0)
    with pytest.raises(ValueError):
        toy.group_baseline_noise(0.5, 1)


# ----------------------------------------------------------------------------- GAE


def test_toy_gae_limits():
    traj = toy.toy_trajectory()
    r, v = traj.rewards[0], traj.values[0]
    next_v = torch.cat([v[1:], v.new_zeros(1)])
    td, _ = toy.toy_gae(1.0, 0.0)
    torch.testing.assert_close(td, r + next_v - v)  # λ = 0: one-step TD errors
    mc, returns = toy.toy_gae(1.0, 1.0)
    reward_to_go = r.flip(0).cumsum(0).flip(0)
    torch.testing.assert_close(mc, reward_to_go - v)  # λ = γ = 1: return minus V
    torch.testing.assert_close(returns, reward_to_go)


def test_grad_wrt_logp_matches_analytic_gradients():
    logp = torch.tensor([[-0.5, -1.0, -2.0], [-0.1, -0.3, -4.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    advantages = torch.tensor([1.0, -2.0])
    # REINFORCE, seq-sum: dL/dlogp_t = -Â_i / B on real tokens, 0 on padding
    g = toy.grad_wrt_logp(lambda lp: losses.reinforce_loss(lp, advantages, mask), logp)
    assert torch.allclose(g, -advantages[:, None] * mask / 2)
    assert not logp.requires_grad  # the input is left untouched
    # k3 penalty alone (Â = 0): β (1 - p_ref/p_θ) / |y| per token
    ref = torch.tensor([[-0.9, -1.0, -1.2]])
    one = torch.ones(1, 3)
    g = toy.grad_wrt_logp(lambda lp: losses.grpo_loss(lp, logp[:1], ref, torch.zeros(1), one, eps=0.2, beta=0.1)[0],
                          logp[:1])
    assert torch.allclose(g, 0.1 * (1 - (ref - logp[:1]).exp()) / 3)


# ----------------------------------------------------------------------------- k3 inside a loss


@pytest.mark.parametrize("beta", [0.1, 0.5, 2.0])
def test_in_loss_k3_gradient_is_forward_kl_gradient(beta):
    logits = toy.optimal_policy(P_REF, REWARDS, beta).log()
    g = toy.kl_gradients(logits, P_REF)
    torch.testing.assert_close(g.in_loss_k3, g.forward_kl)
    torch.testing.assert_close(g.in_loss_k1, torch.zeros_like(g.in_loss_k1), atol=1e-12, rtol=0)
    assert (g.in_loss_k3 - g.reverse_kl).abs().max() > 1e-3  # away from p_ref the two KLs pull differently
    # by hand: Σ_y p_θ(y) (1 - p_ref(y)/p_θ(y)) ∇log p_θ(y) with ∇_θ log p_θ(y) = e_y - p_θ
    p = torch.softmax(logits, -1)
    score = torch.eye(len(p), dtype=p.dtype) - p
    torch.testing.assert_close(g.in_loss_k3, ((p - P_REF)[:, None] * score).sum(0))


def test_kl_gradients_vanish_at_reference():
    g = toy.kl_gradients(P_REF.log(), P_REF)
    for grad in (g.in_loss_k3, g.reverse_kl, g.forward_kl):
        torch.testing.assert_close(grad, torch.zeros_like(grad), atol=1e-12, rtol=0)


@pytest.mark.parametrize("beta", [0.05, 0.5, 3.0])
def test_k3_penalty_optimum_is_stationary_and_beats_competitors(beta):
    q = toy.k3_penalty_optimum(P_REF, REWARDS, beta)
    assert float(q.sum()) == pytest.approx(1.0) and bool((q > 0).all())

    def objective(p):
        return toy.expected_reward(p, REWARDS) - beta * toy.exact_kl(P_REF, p)

    theta = q.log().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(objective(torch.softmax(theta, -1)), theta)
    assert grad.abs().max() < 1e-10
    noise = torch.randn(500, len(q), generator=torch.Generator().manual_seed(0), dtype=q.dtype)
    assert bool((objective(torch.softmax(q.log() + 0.3 * noise, -1)) < objective(q)).all())
    assert bool((objective(toy.optimal_policy(P_REF, REWARDS, beta)) <= objective(q)).all())


def test_k3_penalty_optimum_keeps_zero_support_and_rejects_bad_beta():
    q = toy.k3_penalty_optimum([0.0, 0.5, 0.5], [10.0, 0.0, 1.0], 0.1)
    assert q[0] == 0 and q[2] > q[1]
    with pytest.raises(ValueError, match="beta"):
        toy.k3_penalty_optimum(P_REF, REWARDS, 0.0)


# ----------------------------------------------------------------------------- GRPO's exact expected gradient


def test_expected_grpo_gradient_matches_brute_force_and_monte_carlo():
    logits = toy.optimal_policy(P_REF, REWARDS, 0.7).log()
    g = toy.expected_grpo_gradient(logits, P_REF, REWARDS, group_size=2, beta=0.3)
    # brute force for G = 2: 25 groups, by hand, with the sample std of two rewards |R_1 - R_2| / √2
    p = torch.softmax(logits, -1)
    score = torch.eye(len(p), dtype=p.dtype) - p  # row y: ∇_θ log p_θ(y)
    by_hand = torch.zeros_like(p)
    for a in range(len(p)):
        for b in range(len(p)):
            pair = REWARDS[[a, b]]
            std = (pair[0] - pair[1]).abs() / 2**0.5
            adv = torch.zeros(2, dtype=p.dtype) if std < 1e-4 else (pair - pair.mean()) / std
            pull = [(1 - P_REF[y] / p[y]) for y in (a, b)]  # d k3 / d log p_θ
            by_hand += p[a] * p[b] * sum((adv[k] - 0.3 * pull[k]) * score[y] for k, y in enumerate((a, b))) / 2
    torch.testing.assert_close(g, by_hand)
    # and the mean of many sampled groups agrees with it
    gen = torch.Generator().manual_seed(0)
    groups = torch.multinomial(p, 200_000 * 2, replacement=True, generator=gen).view(-1, 2)
    adv = losses.grpo_advantages(REWARDS[groups].reshape(-1), 2).view_as(groups)
    pull = 1 - P_REF[groups] / p[groups]
    sampled = (((adv - 0.3 * pull)[..., None] * score[groups]).mean(1)).mean(0)
    assert (sampled - g).abs().max() < 0.01


def test_grpo_fixed_point_numbers_of_notebook_04():
    group = toy.grpo_fixed_point(P_REF, REWARDS, group_size=4, beta=0.5, scale="group")
    unscaled = toy.grpo_fixed_point(P_REF, REWARDS, group_size=4, beta=0.5, scale="none")
    formula = toy.k3_penalty_optimum(P_REF, REWARDS, 0.5)
    for p in (group, unscaled):
        grad = toy.expected_grpo_gradient(p.log(), P_REF, REWARDS, 4, 0.5, scale="group" if p is group else "none")
        assert grad.norm() < 1e-10
    assert float(group[0]) == pytest.approx(0.679, abs=5e-4) and float(formula[0]) == pytest.approx(0.516, abs=5e-4)
    # R_i - mean = (G-1)/G (R_i - mean_-i): without the std, the fixed point is the formula at β G/(G-1)
    torch.testing.assert_close(unscaled, toy.k3_penalty_optimum(P_REF, REWARDS, 0.5 * 4 / 3), atol=1e-8, rtol=0)
    assert (unscaled - formula).abs().max() > 0.05


def test_expected_grpo_gradient_refuses_batch_scale():
    with pytest.raises(ValueError, match="scale"):
        toy.expected_grpo_gradient(P_REF.log(), P_REF, REWARDS, 2, 0.1, scale="batch")
