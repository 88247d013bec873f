"""(b) The symmetric clip lowers entropy even when rewards are random; clip-higher counters it.

With R ~ Bernoulli(0.5) the expected policy gradient is zero, so without a clip nothing should drift. With a batch
reused for several updates the ratio leaves [1 − ε, 1 + ε]: the upper clip stops a rare token's probability from
growing past (1 + ε)·p_old while a likely token can grow to 1, so probability flows to what is already likely and
the entropy falls (Park et al. 2509.26114); the lower clip, which stops a rare token's fall, raises it. A wider upper
clip, ε_high = 0.28 (DAPO), removes part of the first brake. The policy starts peaked (easy and medium sums, no
products), so the tokens the upper edge stops are rare ones; near a uniform choice (tolerance 3: seven right answers
alike) any random push concentrates it instead, and a wider edge lets it concentrate further.

Measured (benchmarks/README.md): both edges act, yet the entropy's drift under sixteen updates on one batch of coin
flips is larger than the gap between the arms, and which arm ends higher changes with the seed and the lr.
"""

from __future__ import annotations

import statistics

from minirlhf.lab.effect import Effect, grpo_run
from minirlhf.lab.observe import column, plot_curves, random_reward, tail_mean

SYMMETRIC, HIGHER = "(0.2, 0.2)", "(0.2, 0.28)"


def settings(quick: bool) -> dict:
    """Easy and medium sums (no products: a peaked policy, whose rare tokens are the ones the upper clip stops),
    answers capped at 6 tokens (the answer and a few filler tokens: cheap steps), and 16 updates per batch
    (4 epochs × 4 minibatches) at lr 1.2e-3, so the ratio leaves [1 − ε, 1 + ε] often."""
    prompts = 4 if quick else 8
    return {"task": {"mix": (0.5, 0.5, 0.0), "max_new_tokens": 6},
            "grpo": {"steps": 3 if quick else 40, "lr": 1.2e-3, "beta": 0.0, "prompts_per_step": prompts,
                     "group_size": 8, "epochs": 4, "minibatch_size": prompts * 8 // 4, "aggregation": "token-mean"},
            "reward": "Bernoulli(0.5), independent of the completion",
            "arms": {SYMMETRIC: {"eps": 0.2, "eps_high": 0.2}, HIGHER: {"eps": 0.2, "eps_high": 0.28}}}


def run_seed(seed: int, settings: dict) -> dict:
    arms = {}
    for arm, fields in settings["arms"].items():
        history, _, _, _ = grpo_run(settings, seed, reward=random_reward(seed), **fields)
        entropy, high = column(history, "entropy"), column(history, "clip_frac_high")
        arms[arm] = {"entropy": entropy, "clip_frac_high": high, "clip_frac_low": column(history, "clip_frac_low"),
                     "start_entropy": entropy[0], "final_entropy": tail_mean(entropy),
                     "mean_clip_frac_high": statistics.fmean(high)}
    return arms


def holds(arms: dict) -> bool:
    return (arms[SYMMETRIC]["mean_clip_frac_high"] >= 0.05
            and arms[SYMMETRIC]["final_entropy"] < arms[HIGHER]["final_entropy"])


def across(seeds: list[dict]) -> dict:
    symmetric = [s["arms"][SYMMETRIC]["final_entropy"] for s in seeds]
    higher = [s["arms"][HIGHER]["final_entropy"] for s in seeds]
    gaps = [h - s for s, h in zip(symmetric, higher, strict=True)]
    return {"size": f"final entropy, {HIGHER} minus {SYMMETRIC}", "mean": statistics.fmean(gaps),
            "range": [min(gaps), max(gaps)], "symmetric_range": [min(symmetric), max(symmetric)],
            "higher_range": [min(higher), max(higher)], "ranges_apart": max(symmetric) < min(higher)}


def ranges_apart(seeds: list[dict]) -> bool:
    """Every seed's final entropy under the symmetric clip below every seed's under clip-higher."""
    return across(seeds)["ranges_apart"]


def plot(ax, seeds: list[dict]) -> None:
    lines = [(arm, "entropy", color, "-", f"ε = {arm}") for arm, color in ((SYMMETRIC, "C3"), (HIGHER, "C0"))]
    plot_curves(ax, seeds, lines, ylabel="entropy (nats per token)", title="(b) random rewards: entropy under the clip")


EFFECT = Effect(
    title="the symmetric clip lowers entropy even when rewards are random; clip-higher counters it",
    criterion=f"upper clip acts on >= 5 % of tokens under {SYMMETRIC}; final entropy under {SYMMETRIC} below "
              f"{HIGHER} in every seed, the seeds' ranges not overlapping",
    notebook="07b_grpo_since_r1.ipynb",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot, holds_across=ranges_apart)
