"""(a) Dr. GRPO's length bias: under GRPO's per-answer mean, wrong answers grow longer.

Under seq-mean each token of answer i carries the weight Â_i / (B·|o_i|): a wrong answer (Â_i < 0) is pushed down
less per token the longer it is, so the policy drifts towards long wrong answers. The constant normaliser
(Â_i / (B·L_max) for every token) has no such preference. The lab's free length channel (filler tokens that never
change correctness) gives the length room to drift without touching the reward.

The bias needs a length that depends on being wrong: when the tail after a right and after a wrong answer follow
one law, the group's advantages sum to zero and so does the expected push on the length (the first lab model, whose
tails were drawn apart from the answer, showed only a random walk). So the runs start from `tiny-lab-long-wrong`
(scripts/build_lab_model.py --variant long-wrong), whose wrong answers run on (27 -> 271) and then write 15-30 filler
tokens, its right ones 0-10: on easy sums about half its answers are right, nearly every group is mixed, and the
wrong answers' tail is a law of its own that only Â_i < 0 reaches.
"""

from __future__ import annotations

from minirlhf.lab.effect import Effect, differences, grpo_run
from minirlhf.lab.observe import column, plot_curves, tail_mean


def settings(quick: bool) -> dict:
    return {"model": "tiny-lab-long-wrong", "task": {"mix": (1.0, 0.0, 0.0), "max_new_tokens": 64},
            "grpo": {"steps": 3 if quick else 100, "lr": 3e-4, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 8, "epochs": 1, "scale": "group"},
            "arms": {"seq-mean": {"aggregation": "seq-mean"}, "constant": {"aggregation": "constant"}}}


def run_seed(seed: int, settings: dict) -> dict:
    arms = {}
    for arm, fields in settings["arms"].items():
        history, seen, _, _ = grpo_run(settings, seed, **fields)
        wrong, right = seen.mean_length(right=False), seen.mean_length(right=True)
        arms[arm] = {"wrong_length": wrong, "right_length": right, "reward": column(history, "reward"),
                     "final_wrong_length": tail_mean(wrong), "final_right_length": tail_mean(right),
                     "start_wrong_length": next((v for v in wrong if v is not None), None),
                     "final_reward": tail_mean(column(history, "reward"))}
    seq_mean, constant = arms["seq-mean"]["final_wrong_length"], arms["constant"]["final_wrong_length"]
    arms["gap"] = None if seq_mean is None or constant is None else seq_mean - constant
    return arms


def plot(ax, seeds: list[dict]) -> None:
    arms, kinds = (("seq-mean", "C3"), ("constant", "C0")), (("wrong", "-"), ("right", ":"))
    lines = [(arm, f"{kind}_length", color, style, f"{arm}, {kind}") for arm, color in arms for kind, style in kinds]
    plot_curves(ax, seeds, lines, ylabel="mean answer length (tokens)", title="(a) length of wrong and right answers")


EFFECT = Effect(
    title="wrong answers grow longer under GRPO's per-answer mean (Dr. GRPO)",
    criterion="mean length of the wrong answers over the last 20 steps: seq-mean exceeds constant by >= 5 tokens",
    notebook="07a_grpo_since_r1.ipynb",
    settings=settings, run_seed=run_seed,
    holds=lambda arms: arms["gap"] is not None and arms["gap"] >= 5,
    across=lambda seeds: differences(seeds, "final_wrong_length", "seq-mean", "constant",
                                     "wrong-answer length, seq-mean minus constant (tokens)"),
    plot=plot)
