"""(3) Entropy control (issue 35, item 3): GRPO's entropy falls as it learns; a bonus, Clip-Cov or KL-Cov hold it.

The knob is answer multiplicity. With tolerance 3 every sum has seven right answers ("23+4~3=" takes 24 to 30), and
the lab model was SFT'd on one of them drawn uniformly (`lab.sft_examples`). Nothing in the 0/1 reward prefers one
right answer to another, yet under GRPO the policy's next-token entropy falls: the tokens that are already likely
and earn a positive advantage grow likelier (Cui et al. 2505.22617: the entropy moves by about
−η · Cov(log p_θ, p_θ · Â)). With one right answer a falling entropy is the task being learnt. The cap of 6 tokens
keeps the entropy on the answer: at a cap of 20 most of an answer's tokens are the filler after it, which no reward
sees, and plain GRPO's entropy fell in seeds 0-4 but rose in seeds 5, 7 and 9 and barely moved in 6 and 8. Each
control acts on the fall (minirlhf.losses.entropy):

    entropy bonus   L − c_H · H over every token: a push back towards spread
    Clip-Cov        the gradient of a few tokens of large Cov(log p, Â) cut (the clip kept)
    KL-Cov          |log r_t| penalised on the tokens of largest Cov(log p, Â) (no clip)

The batch is reused for 4 updates (2 epochs × 2 minibatches), so the ratio leaves 1 and KL-Cov's leash |log r_t| has
something to hold (on a batch's first update it is 0, and so is its gradient). Held-out accuracy after training says
what the entropy kept cost: the controls must not buy it with the task.

Measured (benchmarks/README.md, seeds 0-9): plain GRPO's entropy falls in nine seeds of ten; Clip-Cov ends above it
in all ten, the bonus in nine, KL-Cov in six; none costs more accuracy on average than ACCURACY_SLACK (Clip-Cov the
most, 0.023). Forty steps of one seed move the entropy by as much as the controls do, so it does not show on every
seed.
"""

from __future__ import annotations

import statistics

from minirlhf.lab.effect import Effect, grpo_run, held_out_accuracy
from minirlhf.lab.observe import column, plot_curves, tail_mean

PLAIN, BONUS, CLIP_COV, KL_COV = "GRPO", "entropy bonus", "Clip-Cov", "KL-Cov"
CONTROLS = (BONUS, CLIP_COV, KL_COV)
FINAL = 10  # the last steps averaged for an arm's final entropy
ACCURACY_SLACK = 0.05  # a control's held-out accuracy may be at most this much below plain GRPO's


def settings(quick: bool) -> dict:
    """Easy and medium sums (no products: every prompt learnable) with tolerance 3 (seven right answers each), cap 6
    (the answer and little filler), 8 prompts × G 8, lr 3e-4, 2 epochs × 2 minibatches (4 updates per batch), 40
    steps; KL-Cov on a share of 0.2 of the tokens; held-out accuracy on 500 easy and 500 medium problems at the
    end."""
    prompts = 4 if quick else 8
    return {"task": {"mix": (0.5, 0.5, 0.0), "max_new_tokens": 6, "tolerance": 3},
            "grpo": {"steps": 3 if quick else 40, "lr": 3e-4, "beta": 0.0, "prompts_per_step": prompts,
                     "group_size": 8, "epochs": 2, "minibatch_size": prompts * 8 // 2, "aggregation": "token-mean"},
            "eval_kinds": ["easy", "medium"], "eval_per_kind": 10 if quick else 500,
            "arms": {PLAIN: {}, BONUS: {"entropy_coef": 0.01},
                     CLIP_COV: {"policy_loss": "clip-cov", "cov_ratio": 0.05},
                     KL_COV: {"policy_loss": "kl-cov", "cov_ratio": 0.2}}}


def run_seed(seed: int, settings: dict) -> dict:
    arms = {}
    for arm, fields in settings["arms"].items():
        history, _, model, tokenizer = grpo_run(settings, seed, **fields)
        entropy, reward = column(history, "entropy"), column(history, "reward")
        arms[arm] = {"entropy": entropy, "reward": reward, "start_entropy": entropy[0],
                     "final_entropy": tail_mean(entropy, FINAL), "final_reward": tail_mean(reward, FINAL),
                     "held_out_accuracy": held_out_accuracy(model, tokenizer, settings["task"],
                                                            settings["eval_per_kind"], seed, settings["eval_kinds"])}
        if "policy_loss" in fields:
            arms[arm]["mean_cov_frac"] = statistics.fmean(column(history, "cov_frac"))
    return arms


def holds(arms: dict) -> bool:
    """Plain GRPO's entropy falls, and every control ends with more entropy than it."""
    plain = arms[PLAIN]
    return (plain["final_entropy"] < plain["start_entropy"]
            and all(arms[c]["final_entropy"] > plain["final_entropy"] for c in CONTROLS))


def accuracy_kept(seeds: list[dict]) -> bool:
    """Over the seeds, every control's held-out accuracy is on average no more than ACCURACY_SLACK below plain
    GRPO's. The mean, not each seed: one run's accuracy spreads more from seed to seed than the slack (plain GRPO's
    own, 0.81-0.90 over seeds 0-9), so a per-seed slack judges the spread of training, not the control."""
    mean_gap = {c: gap[0] for c, gap in across(seeds)["accuracy_gap"].items()}  # [mean, min, max] per control
    return all(mean_gap[c] >= -ACCURACY_SLACK for c in CONTROLS)


def across(seeds: list[dict]) -> dict:
    def spread(control: str, key: str) -> list[float]:
        gaps = [s["arms"][control][key] - s["arms"][PLAIN][key] for s in seeds]
        return [statistics.fmean(gaps), min(gaps), max(gaps)]

    plain = [s["arms"][PLAIN] for s in seeds]

    def plain_range(key: str) -> list[float]:
        return [min(p[key] for p in plain), max(p[key] for p in plain)]

    return {"size": f"final entropy (last {FINAL} steps), each control minus {PLAIN}: [mean, min, max] over seeds",
            "entropy_gap": {c: spread(c, "final_entropy") for c in CONTROLS},
            "accuracy_gap": {c: spread(c, "held_out_accuracy") for c in CONTROLS},
            "plain_entropy_start_range": plain_range("start_entropy"),
            "plain_entropy_final_range": plain_range("final_entropy"),
            "plain_accuracy_range": plain_range("held_out_accuracy")}


def plot(ax, seeds: list[dict]) -> None:
    lines = [(arm, "entropy", color, "-", arm) for arm, color in
             ((PLAIN, "C3"), (BONUS, "C0"), (CLIP_COV, "C2"), (KL_COV, "C1"))]
    plot_curves(ax, seeds, lines, window=5, ylabel="entropy (nats per token)",
                title="(3) seven right answers: entropy under GRPO and three controls")


EFFECT = Effect(
    title="entropy control: GRPO's entropy falls as it learns; a bonus, Clip-Cov and KL-Cov hold it",
    criterion=f"plain GRPO's entropy falls (last {FINAL} steps below the first); the final entropy under each control "
              f"({', '.join(CONTROLS)}) above plain GRPO's, in every seed; and each control's held-out accuracy (easy "
              f"and medium sums) no more than {ACCURACY_SLACK} below plain GRPO's on average over the seeds",
    notebook="none yet (issue 35: the toolbox notebooks)",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot, holds_across=accuracy_kept)
