"""Is a difference between two training runs real? Intervals over seeds, and a paired test on the same problems.

Notebook 06 trains every method with a few seeds and evaluates each run on the same held-out problems:

    from minirlhf.course import stats
    stats.over_seeds([0.81, 0.78, 0.80])        # mean, min-max and a 95% t-interval of the three
    stats.paired(correct_a, correct_b)          # 1/0 per problem, the same problems in the same order

`over_seeds` describes the spread that retraining with another seed gives. With 3 seeds the t-interval is wide
(the 97.5% quantile of Student's t with 2 degrees of freedom is 4.30, against 1.96 for a normal), and it assumes the
seed-to-seed values are roughly normal, which 3 values cannot check: the min-max range is the plainer summary.

`paired` compares two models problem by problem. Only the problems where they disagree carry information: if
the models were equally good, each disagreement would go either way with probability 1/2 (McNemar's exact test).
It says whether two trained models differ on this held-out set; it says nothing about retraining with another seed,
which is what `over_seeds` measures.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from minirlhf.checks import check_count, check_interval


@dataclass(frozen=True)
class SeedSummary:
    """One number measured once per seed: its mean, its range and a 95% t-interval for the mean."""

    values: tuple[float, ...]
    mean: float
    low: float  # min over seeds
    high: float  # max over seeds
    t_low: float  # mean - t_{0.975, n-1} * sd / sqrt(n)
    t_high: float

    def __str__(self) -> str:
        return (f"{self.mean:.3f} (min-max {self.low:.3f}-{self.high:.3f}; "
                f"95% t-interval {self.t_low:.3f}-{self.t_high:.3f})")


@dataclass(frozen=True)
class PairedComparison:
    """Two models scored 1/0 on the same problems: where they disagree, and how surprising that split would be if
    they were equally good."""

    n: int  # problems
    difference: float  # accuracy of a minus accuracy of b
    only_a: int  # problems a solved and b did not
    only_b: int  # problems b solved and a did not
    p_value: float  # two-sided exact sign test on the disagreements (McNemar), 1.0 when there are none

    def __str__(self) -> str:
        return (f"difference {self.difference:+.3f} on {self.n} problems: {self.only_a} solved only by the first, "
                f"{self.only_b} only by the second; p = {self.p_value:.3g} (exact McNemar)")


@functools.cache
def t_quantile(probability: float, df: int) -> float:
    """The `probability` quantile of Student's t with `df` degrees of freedom (probability in (0.5, 1)).

    The density integrated by Simpson's rule, inverted by bisection: accurate to about 1e-6, with no scipy."""
    check_interval("probability", probability, 0.5, 1.0, low_included=False, high_included=False)
    check_count("df", df)
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def density(t: float) -> float:
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(t * t / df))

    def cdf(x: float, intervals: int = 2000) -> float:  # P(T <= x) for x >= 0
        h = x / intervals
        odd = sum(density((2 * i - 1) * h) for i in range(1, intervals // 2 + 1))
        even = sum(density(2 * i * h) for i in range(1, intervals // 2))
        return 0.5 + h / 3 * (density(0.0) + 4 * odd + 2 * even + density(x))

    low, high = 0.0, 1.0
    while cdf(high) < probability:
        low, high = high, 2 * high
    for _ in range(50):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < probability else (low, middle)
    return (low + high) / 2


def over_seeds(values: Sequence[float]) -> SeedSummary:
    """Mean, min-max and 95% t-interval of one measurement repeated with different seeds (at least 2 values)."""
    values = tuple(float(v) for v in values)
    n = len(values)
    if n < 2:
        raise ValueError(f"over_seeds needs at least 2 values (one per seed), got {n}: {values}")
    mean = sum(values) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.975, n - 1) * sd / math.sqrt(n)
    return SeedSummary(values, mean, min(values), max(values), mean - half, mean + half)


def paired(correct_a: Sequence[float], correct_b: Sequence[float]) -> PairedComparison:
    """Compare two models on the same problems, given 1/0 (right/wrong) per problem for each, in the same order."""
    if len(correct_a) != len(correct_b) or not correct_a:
        raise ValueError(f"paired needs two equally long, non-empty lists, got {len(correct_a)} and {len(correct_b)}")
    if any(v not in (0, 1) for v in (*correct_a, *correct_b)):
        raise ValueError("paired needs 1 (right) or 0 (wrong) per problem")
    only_a = sum(1 for a, b in zip(correct_a, correct_b) if a == 1 and b == 0)
    only_b = sum(1 for a, b in zip(correct_a, correct_b) if a == 0 and b == 1)
    disagreements = only_a + only_b
    tail = sum(math.comb(disagreements, k) for k in range(min(only_a, only_b) + 1)) / 2**disagreements
    return PairedComparison(len(correct_a), (only_a - only_b) / len(correct_a), only_a, only_b, min(1.0, 2 * tail))
