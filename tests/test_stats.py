"""minirlhf.course.stats: the seed intervals and the paired comparison notebook 06a prints."""

from __future__ import annotations

import math
import random

import pytest

from minirlhf.course import stats


@pytest.mark.parametrize(("df", "expected"), [(1, 12.7062), (2, 4.3027), (4, 2.7764), (30, 2.0423)])
def test_t_quantile_matches_the_tables(df, expected):
    assert stats.t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)


def test_t_quantile_tends_to_the_normal():
    assert stats.t_quantile(0.975, 2000) == pytest.approx(1.95996, abs=2e-3)


def test_over_seeds_by_hand():
    s = stats.over_seeds([0.7, 0.8, 0.9])
    assert (s.mean, s.low, s.high) == (pytest.approx(0.8), 0.7, 0.9)
    half = 4.3027 * 0.1 / math.sqrt(3)  # sd of (0.7, 0.8, 0.9) is 0.1
    assert (s.t_low, s.t_high) == (pytest.approx(0.8 - half, abs=1e-4), pytest.approx(0.8 + half, abs=1e-4))
    assert "min-max 0.700-0.900" in str(s)


def test_over_seeds_covers_the_mean_about_95_percent_of_the_time():
    rng = random.Random(0)
    trials = 2000
    hits = 0
    for _ in range(trials):
        s = stats.over_seeds([rng.gauss(0, 1) for _ in range(3)])
        hits += s.t_low <= 0 <= s.t_high
    assert 0.93 < hits / trials < 0.97


def test_over_seeds_needs_two_values():
    with pytest.raises(ValueError, match="at least 2"):
        stats.over_seeds([0.5])


def test_paired_counts_and_exact_p_value():
    a = [1, 1, 1, 1, 0, 0, 1, 0]
    b = [0, 0, 0, 1, 0, 1, 1, 0]
    c = stats.paired(a, b)
    assert (c.n, c.only_a, c.only_b) == (8, 3, 1)
    assert c.difference == pytest.approx(2 / 8)
    assert c.p_value == pytest.approx(2 * (1 + 4) / 16)  # P(X <= 1) for X ~ Bin(4, 1/2), both tails
    assert stats.paired(b, a).p_value == pytest.approx(c.p_value)
    assert stats.paired(a, a).p_value == 1.0


def test_paired_p_value_is_small_only_for_a_lopsided_split():
    assert stats.paired([1] * 20 + [0] * 20, [0] * 20 + [1] * 20).p_value == 1.0  # 20 against 20
    assert stats.paired([1] * 20, [0] * 20).p_value == pytest.approx(2 / 2**20)


@pytest.mark.parametrize(("a", "b", "match"), [([1, 0], [1], "equally long"), ([], [], "non-empty"),
                                              ([1, 0.5], [1, 0], "1 \\(right\\) or 0")])
def test_paired_rejects_bad_input(a, b, match):
    with pytest.raises(ValueError, match=match):
        stats.paired(a, b)
