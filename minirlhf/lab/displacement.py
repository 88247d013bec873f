"""(f) DPO's likelihood displacement: the chosen answer's log-probability falls while the margin grows.

The DPO loss sees only the margin β log p_θ/p_ref(y_w) − β log p_θ/p_ref(y_l), so it is as happy to push y_l down as
to pull y_w up. When y_w and y_l are near-duplicates, the gradients of log p_θ(y_w) and log p_θ(y_l) point almost the
same way (Razin et al. 2410.08847: similar hidden embeddings), and pushing y_l down drags y_w down with it.

The knob is how sure p_ref is between the two. The pairs are the lab's hard prompts, two-digit products ("17*25="),
which the lab model never solves: y_w the right answer ("425"), y_l a wrong one that differs from it in the last
digit only ("428", near-duplicate: p_ref finds both about equally likely) or in every digit ("916", disjoint, which
p_ref finds far less likely: an off-policy y_l, Ren & Sutherland 2407.10490). On the medium sums, which it solves
about half the time, p_ref already ranks y_w ~9 nats above its near-duplicate, and DPO can win the margin by
pushing y_l down alone. The fix: RPO adds α · NLL(y_w) to the loss (`DPOConfig.rpo_alpha`), which holds
log p_θ(y_w) up.

Read from the trainer's own history: rewards/chosen = β (log p_θ − log p_ref)(y_w) on each step's batch (so divided by
β it is how far the chosen answers moved, in nats) and eval/logps/chosen on the held-out pairs.
"""

from __future__ import annotations

import random
import statistics

from minirlhf.lab.effect import Effect, differences
from minirlhf.lab.observe import column, plot_curves, smooth, tail_mean

DIGITS = "0123456789"
REJECTED = ("near", "disjoint")  # y_l differs from y_w in its last digit, or in every digit


def wrong_answer(result: int, rejected: str, rng: random.Random) -> str:
    """A wrong answer as long as `result`: its last digit changed ("near"), or every digit, none leading 0
    ("disjoint")."""
    right = str(result)
    if rejected == "near":
        return right[:-1] + rng.choice([d for d in DIGITS if d != right[-1]])
    if rejected == "disjoint":
        return "".join(rng.choice([d for d in DIGITS if d != r and (i or d != "0")]) for i, r in enumerate(right))
    raise ValueError(f"rejected={rejected!r}: the wrong answers are {' or '.join(REJECTED)}")


def answer_pairs(kind: str, split: str, n: int, rejected: str, rng: random.Random):
    """`n` preference pairs (x, y_w, y_l) on one kind of the lab's problems, from one split: y_w the right answer,
    y_l a wrong one (`wrong_answer`). Bare answers, no filler: each ends with EOS."""
    from minirlhf.data import PreferencePair
    from minirlhf.tasks import lab

    pool = lab.problems(kind, split)
    return [PreferencePair(p.prompt, str(p.result), wrong_answer(p.result, rejected, rng)) for p in rng.sample(pool, n)]


def settings(quick: bool) -> dict:
    # the pairs' prompts: products, which p_ref never solves and so cannot rank y_w above its near-duplicate
    return {"kind": "hard", "pairs": {"train": 64 if quick else 512, "test": 16 if quick else 100},
            "dpo": {"steps": 3 if quick else 80, "batch_size": 32, "beta": 0.1, "lr": 5e-4,
                    "eval_every": 1 if quick else 10},
            "arms": {"DPO": {"rejected": "near", "rpo_alpha": 0.0},
                     "DPO + NLL": {"rejected": "near", "rpo_alpha": 1.0},
                     "DPO, disjoint": {"rejected": "disjoint", "rpo_alpha": 0.0}}}


def run_seed(seed: int, settings: dict) -> dict:
    from minirlhf.data import PreferenceData
    from minirlhf.trainers.dpo import DPOConfig, train_dpo

    arms = {}
    for arm, fields in settings["arms"].items():
        rng = random.Random(seed)  # the same training prompts in every arm of a seed (held out: in the near arms)
        kind, sizes = settings["kind"], settings["pairs"]
        data = PreferenceData(answer_pairs(kind, "train", sizes["train"], fields["rejected"], rng),
                              answer_pairs(kind, "test", sizes["test"], fields["rejected"], rng))
        config = DPOConfig(model=settings["model"], seed=seed, rpo_alpha=fields["rpo_alpha"], eval_prompts=0,
                           progress=False, device="cpu", **settings["dpo"])
        _, _, history = train_dpo(data, config)
        beta = config.beta
        chosen = [r / beta for r in column(history, "rewards/chosen")]  # log p_θ − log p_ref of y_w, nats
        rejected = [r / beta for r in column(history, "rewards/rejected")]
        eval_steps, held_out = history.column("eval/logps/chosen")
        arms[arm] = {"chosen_shift": chosen, "rejected_shift": rejected,
                     "eval_steps": eval_steps, "held_out_chosen": held_out,
                     "held_out_rejected": column(history, "eval/logps/rejected"),
                     "final_chosen_shift": tail_mean(chosen), "final_rejected_shift": tail_mean(rejected),
                     "min_chosen_shift": min(smooth(chosen)),
                     "final_held_out_shift": held_out[-1] - held_out[0],
                     "final_held_out_accuracy": history.column("eval/rewards/accuracy")[1][-1]}
    return arms


def holds(arms: dict) -> bool:
    """DPO moves log p_θ(y_w) down on the training batches and the held-out pairs; DPO + NLL moves neither down."""
    dpo, fixed = arms["DPO"], arms["DPO + NLL"]
    return (dpo["final_chosen_shift"] < 0 and dpo["final_held_out_shift"] < 0
            and fixed["final_chosen_shift"] >= 0 and fixed["final_held_out_shift"] >= 0)


def across(seeds: list[dict]) -> dict:
    gap = differences(seeds, "final_chosen_shift", "DPO + NLL", "DPO",
                      "log p(y_w) moved, training batches, last 20 steps: DPO + NLL minus DPO (nats)")
    for arm in ("DPO", "DPO + NLL", "DPO, disjoint"):
        shifts = [s["arms"][arm]["final_chosen_shift"] for s in seeds]
        gap[arm] = {"mean": statistics.fmean(shifts), "range": [min(shifts), max(shifts)]}
    return gap


def plot(ax, seeds: list[dict]) -> None:
    lines = [(arm, "chosen_shift", color, "-", arm)
             for arm, color in (("DPO", "C3"), ("DPO + NLL", "C0"), ("DPO, disjoint", "C1"))]
    plot_curves(ax, seeds, lines, ylabel="log p(y_w) - log p_ref(y_w) (nats)",
                title="(f) the chosen answer's log-prob under DPO")
    ax.axhline(0.0, color="grey", linewidth=0.8)


EFFECT = Effect(
    title="DPO's likelihood displacement: the chosen answer's log-prob falls; the NLL term (RPO) holds it",
    criterion="log p(y_w) - log p_ref(y_w) over the last 20 steps' batches and on the held-out pairs at the end: "
              "below 0 under DPO (near-duplicate pairs), not below 0 under DPO + NLL (rpo_alpha 1)",
    notebook="05b_dpo_family.ipynb",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot)
