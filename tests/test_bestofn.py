"""Best-of-N's KL from its base policy: log N - (N - 1)/N, checked on categorical toys."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from minirlhf.course import bestofn


def test_the_bound_at_small_n():
    assert bestofn.kl_bound(1) == 0.0
    assert bestofn.kl_bound(2) == pytest.approx(math.log(2) - 0.5)
    assert bestofn.kl_bound(16) == pytest.approx(math.log(16) - 15 / 16)


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 64])
def test_the_formula_is_exact_for_many_equally_likely_outcomes(n):
    K = 20000
    probs = torch.full((K,), 1.0 / K, dtype=torch.float64)
    rewards = torch.randn(K, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    p_n = bestofn.best_of_n_probs(probs, rewards, n)
    assert p_n.sum().item() == pytest.approx(1.0)
    assert bestofn.kl(p_n, probs) == pytest.approx(bestofn.kl_bound(n), abs=2e-3)


def test_the_formula_bounds_a_coarse_distribution_and_a_monte_carlo_estimate_agrees():
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    rewards = torch.tensor([0.0, 1.0, 2.0, 3.0], dtype=torch.float64)
    for n in (2, 4, 8):
        assert bestofn.kl(bestofn.best_of_n_probs(probs, rewards, n), probs) < bestofn.kl_bound(n)
    draws = torch.multinomial(probs, 4 * 200000, replacement=True,
                              generator=torch.Generator().manual_seed(1)).view(-1, 4)
    best = draws.gather(1, rewards[draws].argmax(1, keepdim=True)).squeeze(1)  # best of 4, sampled
    empirical = torch.bincount(best, minlength=4).double() / best.numel()
    assert torch.allclose(empirical, bestofn.best_of_n_probs(probs, rewards, 4), atol=5e-3)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        bestofn.kl_bound(0)
    with pytest.raises(ValueError, match="distinct"):
        bestofn.best_of_n_probs(torch.ones(3) / 3, torch.tensor([1.0, 1.0, 2.0]), 2)


def test_expected_best_of_n_matches_every_subset():
    """The order-statistics weights equal the average over all C(M, n) subsets of the one the proxy ranks first."""
    generator = torch.Generator().manual_seed(2)
    proxy, gold = torch.randn(3, 7, generator=generator), torch.randn(3, 7, generator=generator)
    for n in (1, 2, 3, 7):
        subsets = list(itertools.combinations(range(7), n))
        best = [[max(s, key=lambda j: proxy[p, j].item()) for s in subsets] for p in range(3)]
        brute_proxy = sum(proxy[p, j].item() for p in range(3) for j in best[p]) / (3 * len(subsets))
        brute_gold = sum(gold[p, j].item() for p in range(3) for j in best[p]) / (3 * len(subsets))
        assert bestofn.expected_best_of_n(proxy, gold, n) == pytest.approx((brute_proxy, brute_gold))
    assert bestofn.expected_best_of_n(proxy, gold, 1)[1] == pytest.approx(gold.mean().item())
    with pytest.raises(ValueError, match=r"n must lie in \[1, 7\] \(M, the samples per prompt\), got 8"):
        bestofn.expected_best_of_n(proxy, gold, 8)


def test_distinct_rewards_do_not_make_the_formula_exact_one_likely_outcome_keeps_the_kl_below_it():
    """Beirami et al. (2024): log N - (N-1)/N bounds the KL for every base policy, and distinct rewards are not
    enough to reach it: a likely outcome keeps the KL well below."""
    generator = torch.Generator().manual_seed(2)
    for K in (2, 3, 5, 50):
        for _ in range(20):
            probs = torch.rand(K, generator=generator, dtype=torch.float64) + 1e-3
            probs = probs / probs.sum()
            rewards = torch.randperm(K, generator=generator).double()
            for n in (2, 4, 16):
                assert bestofn.kl(bestofn.best_of_n_probs(probs, rewards, n), probs) <= bestofn.kl_bound(n) + 1e-12
    likely = torch.tensor([0.02, 0.03, 0.05, 0.9], dtype=torch.float64)  # distinct rewards, the best one likely
    assert bestofn.kl(bestofn.best_of_n_probs(likely, torch.arange(4.0, dtype=torch.float64), 16), likely) < (
        0.2 * bestofn.kl_bound(16))
