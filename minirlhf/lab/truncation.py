"""(c) Truncated answers are noise; overlong masking and the soft overlong penalty handle them.

A verifier reads an answer only once it is finished: an answer cut off at the response cap scores 0, whatever its
work so far (a proof without its last line). On the lab task that noise never mattered: the answer came first and
only a free filler tail followed it, so every arm learned to stop early at no cost, and every arm reached the same
ceiling. Here the answer needs its length, as in DAPO: the chain problems (`minirlhf.tasks.lab_chain`, model
`tiny-lab-chain`) ask "keep adding b to a while below 100", and the answer is the last total of the work, 1 to 9
steps of it as the prompt sets. A filler run of free length comes before the work, so with a cap just above the
long problems' work (7-9 steps) a long answer is cut off when its filler ran long, however right its work; a short
one never is. Three arms, the same verifier:

    none     the cut-off answers stay in the loss with their 0: the right work they hold is pushed down
    mask     DAPO's overlong filtering (mask_truncated_completions): their tokens leave the loss
    soft     DAPO's soft overlong penalty (overlong_cache = L_cache): R_length falls from 0 to -1 over the last
             L_cache tokens before the cap and is added to the reward, so an answer learns to finish in time

The cap, 30 tokens, cuts about half the long answers at the start (their filler ran long) and none of the short
ones; half the training prompts are long. L_cache = 4 starts the penalty at 26 tokens, the longest work (9 steps)
without filler, so that as in DAPO the penalty falls on length beyond what the answer needs.

The figure that judges them is what the model has learned to do on the long problems, not what the verifier saw
under the cap: after training, the accuracy on the held-out long problems with room to finish (`lab_chain.
MAX_NEW_TOKENS`), many answers sampled per problem.
"""

from __future__ import annotations

import functools
import statistics

from minirlhf.lab.effect import Effect, grpo_run
from minirlhf.lab.observe import plot_curves, tail_mean

ARMS = ("none", "mask", "soft")
MODEL = "tiny-lab-chain"
EVAL_SAMPLES = 32  # answers sampled per held-out long problem for the final readout


class FinishedOnly:
    """The verifier that reads finished answers only: the chain's R(x, y), and 0 for an answer that used the whole
    cap (cut off before its end, even where its last total happens to be right). It keeps, per call (one per step),
    each answer's length in tokens, whether its prompt is a long problem, and its reward."""

    def __init__(self, reward_fn, tokenizer, cap: int):
        self.reward_fn, self.tokenizer, self.cap = reward_fn, tokenizer, cap
        self.__name__ = getattr(reward_fn, "__name__", "reward")
        self.steps: list[tuple[list[int], list[bool], list[float]]] = []

    def __call__(self, prompts, completions, **columns):
        from minirlhf.tasks import lab_chain

        lengths = [len(ids) for ids in self.tokenizer(list(completions), add_special_tokens=False)["input_ids"]]
        rewards = [0.0 if n >= self.cap else float(r)
                   for r, n in zip(self.reward_fn(prompts, completions, **columns), lengths, strict=True)]
        self.steps.append((lengths, lab_chain.long_prompts(prompts), rewards))
        return rewards

    def per_step(self) -> dict[str, list[float | None]]:
        """Per step: the share of answers cut off (all, and of the long problems'), the long problems' reward and
        the mean length."""
        curves = {"truncated": [], "truncated_long": [], "right_long": [], "length": []}
        for lengths, long, rewards in self.steps:
            cut = [n >= self.cap for n in lengths]
            curves["truncated"].append(statistics.fmean(cut))
            curves["truncated_long"].append(_mean([c for c, is_long in zip(cut, long, strict=True) if is_long]))
            curves["right_long"].append(_mean([r for r, is_long in zip(rewards, long, strict=True) if is_long]))
            curves["length"].append(statistics.fmean(lengths))
        return curves


def _mean(values: list) -> float | None:
    return statistics.fmean(values) if values else None


def settings(quick: bool) -> dict:
    cap = 30
    return {"model": MODEL, "cap": cap, "long_share": 0.5, "eval_samples": 2 if quick else EVAL_SAMPLES,
            "grpo": {"steps": 3 if quick else 50, "lr": 3e-4, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 8, "epochs": 1, "aggregation": "token-mean"},
            "reward": f"1 for the right last total of a chain, finished before the cap of {cap} tokens, else 0",
            "arms": {"none": {}, "mask": {"mask_truncated_completions": True}, "soft": {"overlong_cache": 4}}}


def run_seed(seed: int, settings: dict) -> dict:
    from minirlhf.tasks import lab_chain

    task = lab_chain.task(settings["cap"], settings["long_share"])  # every arm: the same task and verifier
    observer = functools.partial(FinishedOnly, cap=settings["cap"])
    arms = {}
    for arm, fields in settings["arms"].items():
        _, seen, model, tokenizer = grpo_run(settings, seed, task=task, observer=observer, **fields)
        held_out = lab_chain.chain_metrics(model, tokenizer, samples=settings["eval_samples"], seed=seed)
        curves = seen.per_step()
        arms[arm] = curves | {"start_truncated": curves["truncated"][0],
                              "start_truncated_long": curves["truncated_long"][0],
                              "final_truncated": tail_mean(curves["truncated"]),
                              "final_right_long_capped": tail_mean(curves["right_long"]),
                              "final_length": tail_mean(curves["length"]),
                              "held_out_long": held_out["accuracy/long"], "held_out_short": held_out["accuracy/short"]}
    return arms


def holds(arms: dict) -> bool:
    return (arms["none"]["start_truncated"] >= 0.10
            and min(arms["mask"]["held_out_long"], arms["soft"]["held_out_long"]) > arms["none"]["held_out_long"])


def across(seeds: list[dict]) -> dict:
    gaps = {arm: [s["arms"][arm]["held_out_long"] - s["arms"]["none"]["held_out_long"] for s in seeds]
            for arm in ("mask", "soft")}
    best = max(gaps, key=lambda arm: statistics.fmean(gaps[arm]))
    return {"size": f"held-out accuracy on the long problems after training, {best} minus none",
            "mean": statistics.fmean(gaps[best]), "range": [min(gaps[best]), max(gaps[best])],
            **{f"{arm}_minus_none": gaps[arm] for arm in gaps},
            "start_truncated": [s["arms"]["none"]["start_truncated"] for s in seeds]}


def plot(ax, seeds: list[dict]) -> None:
    lines = [(arm, key, color, style, f"{arm}: {what}") for arm, color in zip(ARMS, ("C3", "C0", "C2"), strict=True)
             for key, style, what in (("right_long", "-", "long problems right (under the cap)"),
                                      ("truncated_long", ":", "long problems cut off"))]
    plot_curves(ax, seeds, lines, ylabel="share of sampled answers",
                title="(c) cut-off answers: none, mask, soft penalty")


EFFECT = Effect(
    title="truncated answers are noise; overlong masking and the soft overlong penalty handle them",
    criterion=">= 10 % of answers cut off at the first step; held-out accuracy on the long problems after training "
              "under each handled arm (mask, soft penalty) above no handling",
    notebook="07a_grpo_since_r1.ipynb",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot)
