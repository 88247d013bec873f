"""(2) On-policy distillation (issue 35, item 2): a teacher's per-token signal against GRPO's 0/1 reward, per sample.

The same student (tiny-sft, the arithmetic model, which solves the lab's easy sums "23+4=" about 1 time in 10)
learns them two ways, 32 sampled answers per step each:

    distillation   it samples, and every token of its answer is scored by the teacher (tiny-lab): reverse KL
                   KL(p_θ ‖ p_T) per token (jsd_beta = 1), 32 prompts × 1 answer: no group needed
    GRPO           it samples, and each answer earns the verifier's 0 or 1: 8 prompts × a group of 4, the group
                   the baseline (GRPO's default lr 3e-4; at distillation's 1e-3 it collapses, benchmarks/README.md)

A right answer carries one bit per answer to GRPO, and a group all wrong carries none; the teacher's distribution
carries a full next-token distribution at every token, right or wrong. Held-out accuracy (200 held-out easy sums,
one answer at temperature 1, the same problems for every run) is read against answers sampled; the teacher's on the
same problems is measured beside it.
"""

from __future__ import annotations

import dataclasses
import functools
import time

from minirlhf.lab.effect import Effect

DISTILL, GRPO = "distillation", "GRPO"
STUDENT, TEACHER = "tiny-sft", "tiny-lab"
ANSWERS_PER_STEP = 32  # both arms sample this many answers per step
LAB = {"mix": (1.0, 0.0, 0.0)}  # the easy sums only


def settings(quick: bool) -> dict:
    """60 steps of 32 answers (1920 sampled answers), held-out accuracy every 15 steps (480 answers); the criterion
    compares distillation after `early` answers with GRPO after `late` (twice as many: at four times, first set
    from seeds 0-2, seed 3 tied, benchmarks/README.md)."""
    return {"model": STUDENT, "teacher": TEACHER, "task": LAB,
            "steps": 2 if quick else 60, "eval_every": 1 if quick else 15, "eval_per_kind": 10 if quick else 200,
            "early": ANSWERS_PER_STEP if quick else 960, "late": 2 * ANSWERS_PER_STEP if quick else 1920,
            "arms": {DISTILL: {"jsd_beta": 1.0, "lr": 1e-3, "prompts_per_step": 32, "group_size": 1},
                     GRPO: {"lr": 3e-4, "prompts_per_step": 8, "group_size": 4}}}


def held_out(model, tokenizer, per_kind: int = 200) -> dict[str, float]:
    """Held-out accuracy on `per_kind` easy sums, one answer sampled at temperature 1 each (the same problems for
    every call: `lab.lab_metrics`'s seed 0)."""
    from minirlhf.tasks import lab

    return lab.lab_metrics(model, tokenizer, lab.LabConfig(**LAB), per_kind=per_kind, kinds=("easy",))


def run_arm(method: str, seed: int, steps: int, eval_every: int, per_kind: int = 200, **fields) -> dict:
    """One run from the student: held-out accuracy at each evaluation, against the answers sampled before it."""
    from minirlhf.tasks import lab
    from minirlhf.trainers.distill import DistillConfig, train_distill
    from minirlhf.trainers.grpo import GRPOConfig, train_grpo

    task = dataclasses.replace(lab.task(lab.LabConfig(**LAB)),
                               evaluate=functools.partial(held_out, per_kind=per_kind))
    common = dict(device="cpu", steps=steps, eval_every=eval_every, seed=seed, progress=False, task="lab",
                  task_option=["mix=1,0,0"], model=STUDENT, **fields)
    start = time.process_time()
    if method == DISTILL:
        history = train_distill(task, DistillConfig(teacher=TEACHER, **common))[2]
    elif method == GRPO:
        history = train_grpo(task, GRPOConfig(**common))[2]
    else:
        raise ValueError(f"method={method!r}: the arms are {DISTILL!r} and {GRPO!r}")
    rows = [row for row in history if "eval/accuracy/easy" in row]
    return {"samples": [row["step"] * ANSWERS_PER_STEP for row in rows],
            "accuracy": [row["eval/accuracy/easy"] for row in rows], "cpu_s": round(time.process_time() - start, 1)}


def teacher_accuracy(per_kind: int) -> float:
    from minirlhf.models import load_model

    teacher, tokenizer = load_model(TEACHER, device="cpu")
    return held_out(teacher, tokenizer, per_kind)["accuracy/easy"]


def accuracy_at(figures: dict, samples: int) -> float:
    """An arm's held-out accuracy at the evaluation after `samples` sampled answers."""
    return figures["accuracy"][figures["samples"].index(samples)]


def run_seed(seed: int, settings: dict) -> dict:
    """Both arms, and the teacher as a third row (its held-out accuracy, the bar the issue sets)."""
    arms = {arm: run_arm(arm, seed, settings["steps"], settings["eval_every"], settings["eval_per_kind"], **fields)
            for arm, fields in settings["arms"].items()}
    for figures in arms.values():
        figures |= {"early_samples": settings["early"], "early_accuracy": accuracy_at(figures, settings["early"]),
                    "late_samples": settings["late"], "late_accuracy": accuracy_at(figures, settings["late"]),
                    "final_accuracy": figures["accuracy"][-1]}
    return arms | {"teacher": {"final_accuracy": teacher_accuracy(settings["eval_per_kind"])}}


def holds(arms: dict) -> bool:
    """Distillation after `early` answers above GRPO after `late` (twice as many)."""
    return arms[DISTILL]["early_accuracy"] > arms[GRPO]["late_accuracy"]


def across(seeds: list[dict]) -> dict:
    gaps = [s["arms"][DISTILL]["early_accuracy"] - s["arms"][GRPO]["late_accuracy"] for s in seeds]
    early, late = seeds[0]["arms"][DISTILL]["early_samples"], seeds[0]["arms"][GRPO]["late_samples"]

    def spread(arm: str, key: str) -> list[float]:
        values = [s["arms"][arm][key] for s in seeds]
        return [min(values), max(values)]

    return {"size": f"held-out accuracy, {DISTILL} after {early} answers minus {GRPO} after {late}",
            "mean": sum(gaps) / len(gaps), "range": [min(gaps), max(gaps)],
            "distill_early_range": spread(DISTILL, "early_accuracy"), "grpo_late_range": spread(GRPO, "late_accuracy"),
            "distill_final_range": spread(DISTILL, "final_accuracy"),
            "teacher_range": spread("teacher", "final_accuracy"),
            "teacher_reached": [s["arms"][DISTILL]["final_accuracy"] >= s["arms"]["teacher"]["final_accuracy"]
                                for s in seeds]}


def plot(ax, seeds: list[dict]) -> None:
    for figures in seeds:
        for arm, color in ((DISTILL, "C0"), (GRPO, "C3")):
            curve = figures["arms"][arm]
            ax.plot(curve["samples"], curve["accuracy"], "o-", color=color, alpha=0.8, markersize=3,
                    label=arm if figures is seeds[0] else None)
    ax.axhline(seeds[0]["arms"]["teacher"]["final_accuracy"], color="grey", linestyle="--",
               label=f"teacher ({TEACHER})")
    ax.set(xlabel="answers sampled", ylabel="held-out accuracy (easy sums)",
           title="(2) a teacher per token against a 0/1 reward")
    ax.legend(fontsize=8)


EFFECT = Effect(
    title="on-policy distillation learns far more per sampled answer than GRPO's 0/1 reward",
    criterion="held-out accuracy of on-policy distillation (reverse KL to tiny-lab) after 960 sampled answers above "
              "GRPO's (the lab verifier's 0/1 reward) after 1920, twice as many, in every seed; the teacher's "
              "accuracy on the same problems, and whether distillation reaches it within 1920, reported beside it",
    notebook="none yet (issue 35: the toolbox notebooks)",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot)
