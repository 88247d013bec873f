"""(1) Three policies (issue 35, item 1): a sampler μ that is not p_θold, made on purpose, and its correction.

The knob is staleness. Asynchronous trainers sample from weights a step or more behind the ones they train (prime-rl
by default one step). Here each step samples from θ as it was L = 4 steps before (`sampler_lag`), at a learning rate
(6e-4) where four steps move the policy well away: μ = p_θ(k−4), while p_θold = p_θ(k) is the policy the step starts
from. GRPO's loss treats the answers as if p_θold had drawn them; it raises or lowers each drawn token's log-prob by
its advantage, at the frequency μ drew it, not p_θold. The weight ρ_t = p_θold(y_t) / μ(y_t) puts p_θold's frequency
back (TIS: min(ρ_t, C), C = 3), and μ has full support here, so the weight can correct it, unlike a top-p sampler's
(below).

Four arms from the same start, on the same seed: GRPO on-policy, GRPO with the lagging sampler and no correction, and
the same with TIS, or with the sequence mask (ρ_i = Π_t ρ_t, the answer dropped above C; TRL's default), reported
beside. The readout is held-out accuracy of p_θ (one answer per problem at temperature 1) after 40 steps.

Measured (benchmarks/README.md, seeds 0-7): the uncorrected run ends below its own start on every seed, and TIS wins
back 0.11-0.51 of the 0.31-0.56 it loses against on-policy GRPO, ending below on-policy on every seed.

Tried first, and not shown (benchmarks/README.md): top-p 0.7 as the sampler. μ = p_θold / Z_t on the nucleus and 0
outside it, so ρ = Z_t ≤ 1: the weight only shrinks the step where the nucleus cut most, and cannot reach the tail
that μ never draws. The uncorrected run lost accuracy, but neither correction won it back on every seed.
"""

from __future__ import annotations

import math
import statistics

from minirlhf.lab.effect import Effect, grpo_run, held_out_accuracy
from minirlhf.lab.observe import column, plot_curves, tail_mean

ON_POLICY, NONE, TIS, SEQUENCE_MASK = "on-policy", "lag 4, no correction", "lag 4 + TIS", "lag 4 + sequence mask"
LAG = 4
KINDS = ["easy", "medium"]
STDERRS = 2.0  # a gap counts when it exceeds this many standard errors of the difference


def settings(quick: bool) -> dict:
    """Easy and medium sums, cap 20, 8 prompts × G 8, lr 6e-4, one update per batch, token-mean, 40 steps; the held-out
    accuracy (temperature 1) on 300 easy and 300 medium sums after them."""
    return {"task": {"mix": (0.5, 0.5, 0.0), "max_new_tokens": 20},
            "grpo": {"steps": 3 if quick else 40, "lr": 6e-4, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 8, "epochs": 1, "aggregation": "token-mean"},
            "eval_per_kind": 10 if quick else 300,
            "arms": {ON_POLICY: {}, NONE: {"sampler_lag": LAG},
                     TIS: {"sampler_lag": LAG, "behaviour_correction": "token-truncate"},
                     SEQUENCE_MASK: {"sampler_lag": LAG, "behaviour_correction": "sequence-mask"}}}


def accuracy(model, tokenizer, settings: dict, seed: int) -> float:
    """Held-out accuracy of p_θ (one answer per problem at temperature 1), averaged over KINDS."""
    return held_out_accuracy(model, tokenizer, settings["task"], settings["eval_per_kind"], seed, KINDS)


def run_seed(seed: int, settings: dict) -> dict:
    from minirlhf.models import load_model

    start = accuracy(*load_model(settings["model"], device="cpu"), settings, seed)
    arms = {}
    for arm, fields in settings["arms"].items():
        history, _, model, tokenizer = grpo_run(settings, seed, **fields)
        arms[arm] = {"reward": column(history, "reward"), "final_reward": tail_mean(column(history, "reward")),
                     "start_accuracy": start, "held_out_accuracy": accuracy(model, tokenizer, settings, seed),
                     "problems": settings["eval_per_kind"] * len(KINDS)}
        if "sampler_lag" in fields:  # how far μ was from p_θold: |log p_θold − log μ| per token, and ρ's mean
            arms[arm] |= {"logp_diff": statistics.fmean(column(history, "sampler/logp_diff")),
                          "rho_mean": statistics.fmean(column(history, "sampler/rho_mean"))}
    return arms


def gap(arms: dict, first: str, second: str) -> tuple[float, float]:
    """Held-out accuracy of arm `first` minus arm `second`, and the standard error of that difference (each a share
    of n problems: √(p₁(1−p₁)/n + p₂(1−p₂)/n))."""
    p1, p2, n = arms[first]["held_out_accuracy"], arms[second]["held_out_accuracy"], arms[first]["problems"]
    return p1 - p2, math.sqrt((p1 * (1 - p1) + p2 * (1 - p2)) / n)


def holds(arms: dict) -> bool:
    """The uncorrected lagging run ends below on-policy GRPO, and TIS above the uncorrected run, each by more than
    STDERRS standard errors of the difference."""
    return all(difference > STDERRS * stderr
               for difference, stderr in (gap(arms, ON_POLICY, NONE), gap(arms, TIS, NONE)))


def across(seeds: list[dict]) -> dict:
    def spread(first: str, second: str) -> list[float]:
        gaps = [gap(s["arms"], first, second)[0] for s in seeds]
        return [statistics.fmean(gaps), min(gaps), max(gaps)]

    return {"size": f"held-out accuracy (p_θ at temperature 1) of the TIS run minus the uncorrected run, lag {LAG}: "
                    "[mean, min, max] over seeds",
            "recovery": spread(TIS, NONE), "loss_without_correction": spread(ON_POLICY, NONE),
            "sequence_mask_recovery": spread(SEQUENCE_MASK, NONE),
            "accuracy": {arm: [round(s["arms"][arm]["held_out_accuracy"], 3) for s in seeds]
                         for arm in seeds[0]["arms"]},
            "start_accuracy": [round(s["arms"][ON_POLICY]["start_accuracy"], 3) for s in seeds]}


def plot(ax, seeds: list[dict]) -> None:
    lines = [(arm, "reward", color, "-", arm) for arm, color in
             ((ON_POLICY, "C0"), (NONE, "C3"), (TIS, "C2"), (SEQUENCE_MASK, "C1"))]
    plot_curves(ax, seeds, lines, window=5, ylabel="training reward (answers from the sampler)",
                title=f"(1) sampling from weights {LAG} steps old: TIS and no correction")


EFFECT = Effect(
    title=f"three policies: sampling from weights {LAG} steps old costs held-out accuracy; TIS wins much of it back",
    criterion=f"held-out accuracy of p_θ (temperature 1; easy and medium sums): the uncorrected run sampling from "
              f"weights {LAG} steps old below on-policy GRPO, and the same with TIS above the uncorrected run, each "
              f"by more than {STDERRS:g} standard errors of the difference, in every seed",
    notebook="none yet (09b teaches the three policies; this run does not fit its budget)",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot)
