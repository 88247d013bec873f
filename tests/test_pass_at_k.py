"""pass@k (minirlhf.tasks.pass_at_k): the unbiased estimator of Chen et al. 2021 by its properties and against the
brute-force mean over every k-subset, its checker run on the wrong versions people write (each must be refused),
and the held-out evaluators of the arithmetic and lab tasks."""

from __future__ import annotations

import itertools
import math

import pytest

from minirlhf.models import load_model
from minirlhf.tasks import arithmetic, lab
from minirlhf.tasks.pass_at_k import count_correct, mean_pass_at_k, pass_at_k


def brute_force(n: int, c: int, k: int) -> float:
    """The share of the k-subsets of n samples (the first c right) that hold a right one."""
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(i < c for i in subset) for subset in subsets) / len(subsets)


def check_estimator(estimator) -> None:
    """k = 1 is c/n; monotone in k; 1 when n - c < k; the brute-force mean over all k-subsets for n ≤ 8; finite
    and in [0, 1] at n = 2000."""
    for n in range(1, 9):
        for c in range(n + 1):
            values = [estimator(n, c, k) for k in range(1, n + 1)]
            assert values[0] == pytest.approx(c / n)
            assert all(a <= b + 1e-12 for a, b in itertools.pairwise(values)), (n, c, values)
            for k, value in enumerate(values, start=1):
                assert value == pytest.approx(brute_force(n, c, k), abs=1e-12), (n, c, k)
                if n - c < k:
                    assert value == 1.0, (n, c, k)
    large = estimator(2000, 3, 1000)
    assert 0.0 <= large <= 1.0 and large == pytest.approx(1 - math.comb(1997, 1000) / math.comb(2000, 1000))


def test_pass_at_k_is_the_unbiased_estimator():
    check_estimator(pass_at_k)


def _float_binomials(n, c, k):  # the closed form in floats: right until the binomials overflow
    return 1.0 if n - c < k else 1.0 - float(math.comb(n - c, k)) / float(math.comb(n, k))


@pytest.mark.parametrize("wrong", [
    lambda n, c, k: 1 - (1 - c / n) ** k,  # draws with replacement: biased low
    lambda n, c, k: min(1.0, k * c / n),  # k independent chances added up
    lambda n, c, k: 1.0 - math.prod(1.0 - k / i for i in range(n - c, n + 1)) if n - c >= k else 1.0,  # one i too many
    lambda n, c, k: 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n)) if n - c >= k else 1.0,  # stops at n-1
    _float_binomials,  # overflows at n = 2000
], ids=["with-replacement", "k-times-c-over-n", "product-from-n-c", "product-to-n-1", "float-binomials"])
def test_the_estimator_checker_refuses_the_wrong_versions(wrong):
    with pytest.raises((AssertionError, OverflowError, ZeroDivisionError)):
        check_estimator(wrong)


@pytest.mark.parametrize("n, c, k, match", [
    (4, 5, 1, "c ≤ n"), (4, 2, 5, "k ≤ n"), (4, 2, 0, "k must be an integer >= 1"), (0, 0, 1, "n must be"),
    (4, -1, 1, "c must be"), (4, 2.0, 1, "c must be an integer"),
])
def test_bad_counts_are_named(n, c, k, match):
    with pytest.raises(ValueError, match=match):
        pass_at_k(n, c, k)


def test_mean_pass_at_k_averages_over_problems():
    assert mean_pass_at_k([0, 2, 4], n=4, ks=(1, 4)) == {"pass@1": pytest.approx(0.5), "pass@4": pytest.approx(2 / 3)}
    with pytest.raises(ValueError, match="counts is empty"):
        mean_pass_at_k([], n=4, ks=(1,))


@pytest.fixture(scope="module")
def tiny_sft():
    return load_model("tiny-sft", device="cpu")


def test_count_correct_counts_each_prompts_passing_samples(tiny_sft):
    """A reward that passes everything counts n, one that passes nothing 0; the counts are seeded."""
    model, tokenizer = tiny_sft
    prompts = [p.prompt for p in arithmetic.problems("test")[:5]]

    def every(prompts, completions, **columns):
        return [1.0] * len(completions)

    def none(prompts, completions, **columns):
        return [0.0] * len(completions)

    assert count_correct(model, tokenizer, prompts, every, n=3, max_new_tokens=5, prompts_per_batch=2) == [3] * 5
    assert count_correct(model, tokenizer, prompts, none, n=3, max_new_tokens=5) == [0] * 5
    right = [count_correct(model, tokenizer, prompts, arithmetic.correctness_reward, n=6, max_new_tokens=5, seed=1)
             for _ in range(2)]
    assert right[0] == right[1] and all(0 <= c <= 6 for c in right[0])


def test_arithmetic_held_out_pass_at_k_reads_the_counts(tiny_sft):
    """pass@1 is the share of right samples, pass@n the share of problems with one right sample at least, and
    pass@k grows with k."""
    model, tokenizer = tiny_sft
    held_out = arithmetic.problems("test")[:40]
    metrics = arithmetic.held_out_pass_at_k(model, tokenizer, n=8, ks=(1, 2, 8), held_out=held_out, seed=0)
    counts = count_correct(model, tokenizer, [p.prompt for p in held_out], arithmetic.correctness_reward, 8,
                           max_new_tokens=arithmetic.MAX_NEW_TOKENS, seed=0)
    assert metrics["pass@1"] == pytest.approx(sum(counts) / (8 * 40))
    assert metrics["pass@8"] == pytest.approx(sum(c > 0 for c in counts) / 40)
    assert metrics["pass@1"] < metrics["pass@2"] < metrics["pass@8"]


def test_lab_held_out_pass_at_k_has_one_entry_per_k_and_kind():
    model, tokenizer = load_model("tiny-lab", device="cpu")
    metrics = lab.held_out_pass_at_k(model, tokenizer, n=2, ks=(1, 2), per_kind=3, config=lab.LabConfig(
        max_new_tokens=8))
    assert set(metrics) == {f"pass@{k}/{kind}" for k in (1, 2) for kind in lab.KINDS}
    assert all(0.0 <= v <= 1.0 for v in metrics.values())


@pytest.mark.parametrize("ks, match", [((1, 32), "k must lie in"), ((), "ks is empty"), ((0,), "k must be")])
def test_bad_ks_are_refused_before_sampling(ks, match):
    """The model is never touched (None here): k is checked against n first."""
    with pytest.raises(ValueError, match=match):
        arithmetic.held_out_pass_at_k(None, None, n=16, ks=ks)
    with pytest.raises(ValueError, match=match):
        lab.held_out_pass_at_k(None, None, n=16, ks=ks)


@pytest.mark.parametrize("ks, match", [
    ((), "ks is empty"), ((0,), "k must be"), ((5,), "k must lie in"), ((1.5,), "k must be")])
def test_mean_pass_at_k_refuses_bad_ks_even_with_right_counts(ks, match):
    with pytest.raises(ValueError, match=match):
        mean_pass_at_k([1, 2], n=4, ks=ks)
