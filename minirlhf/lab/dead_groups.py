"""(d) Dynamic sampling gains per optimizer step when half the groups are dead.

A group whose G rewards are all equal has Â = 0: it costs its sampling and teaches nothing. The difficulty mix makes
about half of them so: the lab model almost always solves the easy prompts and never the hard ones, so their groups
are all right or all wrong, while the medium ones (about half right) are what it can learn. Three arms, the same
optimizer steps (one update per step):

    GRPO              trains on the whole batch; the dead groups' tokens sit in the loss's average (at Â = 0)
    GRPO-drop         drops them and averages over the informative groups only, sampling nothing more
    dynamic sampling  drops them and samples more prompts until the step holds prompts_per_step informative groups

GRPO-drop tells dynamic sampling's two halves apart: renormalising over the informative groups (which AdamW mostly
undoes: it rescales every step) and refilling (more informative groups per update). Held-out accuracy is read
against optimizer steps and against sampled answers, the currency dynamic sampling pays in.

"Accuracy per optimizer step" is read as the accuracy-per-step curve, not one point of it: the held-out accuracy
at every evaluation after the start (steps k, 2k, ..., N), averaged,

    curve accuracy = (1/m) Σ_j acc(j·k)  ≈  (1/N) ∫_0^N acc(s) ds   (the area under the curve, per step),

the same figure for every arm. A gain per step shows while the arms climb; the last evaluation alone measures
where they all end, and on the medium sums every arm nears the same ceiling (about 0.8) by 60 steps, so there
a sampling-noise tie decides. The run stops at 40 steps, before the ceiling.
"""

from __future__ import annotations

import statistics

from minirlhf.lab.effect import RUN, Effect, held_out_accuracy
from minirlhf.lab.observe import column

GRPO, DROP, REFILL = "GRPO", "GRPO-drop", "dynamic sampling"


def settings(quick: bool) -> dict:
    steps = 2 if quick else 40
    return {"task": {"mix": (0.25, 0.5, 0.25), "max_new_tokens": 40},
            "grpo": {"steps": steps, "lr": 3e-4, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 4, "epochs": 1, "aggregation": "token-mean"},
            "learnable": ["medium"],  # the kinds whose held-out accuracy the criterion reads
            "eval_every": steps if quick else 10, "eval_per_kind": 10 if quick else 200,
            "arms": {GRPO: {}, DROP: {"drop_dead_groups": True},
                     REFILL: {"dynamic_sampling": True, "max_sampling_rounds": 4}}}


def run_arm(settings: dict, seed: int, **fields) -> dict:
    """One arm from the lab model: per step the dead share, groups kept and answers sampled; the held-out accuracy
    of the learnable kinds every eval_every steps (the same problems for every arm)."""
    from minirlhf.models import load_model
    from minirlhf.tasks import lab
    from minirlhf.trainers.grpo import GRPOConfig, train_grpo

    task_config = lab.LabConfig(**settings["task"])
    config = GRPOConfig(model=settings["model"], seed=seed, **RUN, **settings["grpo"], **fields)
    model, tokenizer = load_model(config.model, device="cpu")

    def accuracy() -> float:
        return held_out_accuracy(model, tokenizer, settings["task"], settings["eval_per_kind"], seed,
                                 settings["learnable"])

    curve = [(0, 0, accuracy())]  # (optimizer steps, answers sampled, held-out accuracy)
    sampled = [0]

    def after_step(history) -> None:
        row = history[-1]
        sampled[0] += int(row.get("groups_sampled", config.prompts_per_step)) * config.group_size
        done = row["step"] + 1  # optimizer steps taken (one update per step)
        if done % settings["eval_every"] == 0:
            curve.append((done, sampled[0], accuracy()))

    _, _, history = train_grpo(lab.task(task_config), config, model, tokenizer, callbacks=[after_step])
    kept = column(history, "groups_kept") if fields else [config.prompts_per_step * (1 - z) for z in
                                                          column(history, "zero_std_groups")]
    return {"steps": [c[0] for c in curve], "sampled": [c[1] for c in curve], "accuracy": [c[2] for c in curve],
            "zero_std_groups": column(history, "zero_std_groups"), "groups_kept": kept,
            "curve_accuracy": statistics.fmean(c[2] for c in curve[1:]),  # every evaluation after the start
            "final_accuracy": curve[-1][2], "start_accuracy": curve[0][2], "answers_sampled": sampled[0],
            "mean_zero_std_groups": statistics.fmean(column(history, "zero_std_groups")),
            "mean_groups_kept": statistics.fmean(kept)}


def run_seed(seed: int, settings: dict) -> dict:
    arms = {arm: run_arm(settings, seed, **fields) for arm, fields in settings["arms"].items()}
    for figures in arms.values():  # the cost beside the gain: accuracy points per 1000 answers sampled
        gain = figures["final_accuracy"] - figures["start_accuracy"]
        figures["gain_per_1000_answers"] = 1000 * gain / figures["answers_sampled"]
    return arms


def holds(arms: dict) -> bool:
    """At least 40 % of GRPO's groups dead, and dynamic sampling's accuracy per optimizer step (`curve_accuracy`)
    above GRPO's and above GRPO-drop's."""
    return (arms[GRPO]["mean_zero_std_groups"] >= 0.4
            and arms[REFILL]["curve_accuracy"] > max(arms[GRPO]["curve_accuracy"], arms[DROP]["curve_accuracy"]))


def across(seeds: list[dict]) -> dict:
    def gaps(other: str) -> list[float]:
        return [s["arms"][REFILL]["curve_accuracy"] - s["arms"][other]["curve_accuracy"] for s in seeds]

    over_grpo, over_drop = gaps(GRPO), gaps(DROP)
    cost = [s["arms"][REFILL]["answers_sampled"] / s["arms"][GRPO]["answers_sampled"] for s in seeds]
    return {"size": f"held-out accuracy per optimizer step (mean over the evaluations), {REFILL} minus {GRPO}",
            "mean": statistics.fmean(over_grpo), "range": [min(over_grpo), max(over_grpo)],
            "over_drop_mean": statistics.fmean(over_drop), "over_drop_range": [min(over_drop), max(over_drop)],
            "answers_sampled_ratio_range": [min(cost), max(cost)],
            "dead_share_range": [min(s["arms"][GRPO]["mean_zero_std_groups"] for s in seeds),
                                 max(s["arms"][GRPO]["mean_zero_std_groups"] for s in seeds)]}


COLORS = {GRPO: "C3", DROP: "C1", REFILL: "C0"}


def plot(ax, seeds: list[dict], by: str = "steps") -> None:
    """Held-out accuracy of the learnable kinds against optimizer steps (`by="steps"`) or answers sampled."""
    for figures in seeds:
        for arm, color in COLORS.items():
            curve = figures["arms"][arm]
            ax.plot(curve[by], curve["accuracy"], "o-", color=color, alpha=0.8, markersize=3,
                    label=arm if figures is seeds[0] else None)
    ax.set(xlabel="optimizer steps" if by == "steps" else "answers sampled", ylabel="held-out accuracy",
           title="(d) half the groups dead: accuracy per " + ("step" if by == "steps" else "sampled answer"))
    ax.legend(fontsize=8)


EFFECT = Effect(
    title="dynamic sampling gains per optimizer step when half the groups are dead",
    criterion=f"with >= 40 % of GRPO's groups dead, held-out accuracy of the learnable prompts per optimizer step "
              f"(the mean over the evaluations after the start, the same steps in every arm): {REFILL} above {GRPO} "
              f"and above {DROP} (drop dead groups, no refill) in every seed; answers sampled per arm reported "
              "beside it",
    notebook="07b_grpo_since_r1.ipynb",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot)
