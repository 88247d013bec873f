"""(c) Truncated answers are noise; overlong masking and the soft overlong penalty handle them.

A verifier reads an answer only once it is finished: an answer cut off at the response cap scores 0, whatever it
says (a proof without its last line). The lab model writes its answer first and then a filler run of any length, so
with a cap below its natural lengths a right answer that ran long is scored like a wrong one: its group pushes the
right digits down. Three arms, the same verifier:

    none     the cut-off answers stay in the loss with their 0
    mask     DAPO's overlong filtering (mask_truncated_completions): their tokens leave the loss
    soft     DAPO's soft overlong penalty (overlong_cache = L_cache): R_length falls from 0 to -1 over the last
             L_cache tokens before the cap and is added to the reward, so an answer learns to finish in time

The figure that judges them is what the model knows, not what the verifier saw: the share of sampled answers whose
digits are right, finished or not.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from minirlhf.lab.effect import Effect, grpo_run
from minirlhf.lab.observe import SeenCompletions, plot_curves, tail_mean

ARMS = ("none", "mask", "soft")


def finished_only(seen: SeenCompletions, cap: int) -> Callable[..., list[float]]:
    """The verifier that reads finished answers only: R(x, y) from `seen` (which keeps every answer's length and its
    right-or-wrong), and 0 for an answer that used the whole cap (cut off before its end)."""

    def finished_answers(prompts, completions, **columns):
        rewards = seen(prompts, completions, **columns)
        lengths = seen.steps[-1][0]
        return [0.0 if n >= cap else r for r, n in zip(rewards, lengths, strict=True)]

    return finished_answers


def settings(quick: bool) -> dict:
    cap = 24
    return {"task": {"mix": (1.0, 0.0, 0.0), "max_new_tokens": cap},
            "grpo": {"steps": 3 if quick else 100, "lr": 3e-4, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 8, "epochs": 1, "aggregation": "token-mean"},
            "reward": f"1 for a right answer that finished before the cap of {cap} tokens, else 0",
            "arms": {"none": {}, "mask": {"mask_truncated_completions": True}, "soft": {"overlong_cache": 8}}}


def run_seed(seed: int, settings: dict) -> dict:
    from minirlhf.models import load_tokenizer
    from minirlhf.tasks import lab

    cap = settings["task"]["max_new_tokens"]
    arms = {}
    for arm, fields in settings["arms"].items():
        answers = SeenCompletions(lab.lab_reward(), load_tokenizer(settings["model"]))
        grpo_run(settings, seed, reward=finished_only(answers, cap), **fields)  # `answers` keeps what it saw
        right = [statistics.fmean(rewards) for _, rewards in answers.steps]
        truncated = [statistics.fmean(n >= cap for n in lengths) for lengths, _ in answers.steps]
        length = [statistics.fmean(lengths) for lengths, _ in answers.steps]
        arms[arm] = {"right": right, "truncated": truncated, "length": length,
                     "start_truncated": truncated[0], "final_truncated": tail_mean(truncated),
                     "start_right": right[0], "final_right": tail_mean(right), "final_length": tail_mean(length)}
    return arms


def holds(arms: dict) -> bool:
    return (arms["none"]["start_truncated"] >= 0.10
            and min(arms["mask"]["final_right"], arms["soft"]["final_right"]) > arms["none"]["final_right"])


def across(seeds: list[dict]) -> dict:
    gaps = {arm: [s["arms"][arm]["final_right"] - s["arms"]["none"]["final_right"] for s in seeds]
            for arm in ("mask", "soft")}
    best = max(gaps, key=lambda arm: statistics.fmean(gaps[arm]))
    return {"size": f"right answers (last 20 steps), {best} minus none", "mean": statistics.fmean(gaps[best]),
            "range": [min(gaps[best]), max(gaps[best])],
            **{f"{arm}_minus_none": gaps[arm] for arm in gaps},
            "start_truncated": [s["arms"]["none"]["start_truncated"] for s in seeds]}


def plot(ax, seeds: list[dict]) -> None:
    lines = [(arm, key, color, style, f"{arm}: {what}") for arm, color in zip(ARMS, ("C3", "C0", "C2"), strict=True)
             for key, style, what in (("right", "-", "right answers"), ("truncated", ":", "cut off"))]
    plot_curves(ax, seeds, lines, ylabel="share of sampled answers",
                title="(c) cut-off answers: none, mask, soft penalty")


EFFECT = Effect(
    title="truncated answers are noise; overlong masking and the soft overlong penalty handle them",
    criterion=">= 10 % of answers cut off at the first step; right answers (last 20 steps) under each handled arm "
              "(mask, soft penalty) above no handling",
    notebook="07a_grpo_since_r1.ipynb",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot)
