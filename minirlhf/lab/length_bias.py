"""(a) Dr. GRPO's length bias: under GRPO's per-answer mean, wrong answers grow longer.

Under seq-mean each token of answer i carries the weight Â_i / (B·|o_i|): a wrong answer (Â_i < 0) is pushed down
less per token the longer it is, so the policy drifts towards long wrong answers. The constant normaliser
(Â_i / (B·L_max) for every token) has no such preference. A free length channel (tail tokens that never change
correctness) gives the length room to drift without touching the reward.

The bias needs a policy that knows, while it writes its tail, whether it was wrong. Under seq-mean, the EOS of a
wrong answer that ends at token t is pushed down with weight |Â_i|/t, the tail token of one that goes on to
|o_j| > t with |Â_j|/|o_j|, less: in a wrong context the end is pushed down more than going on, so wrong tails grow;
in a right context the end is pushed up more, so right ones shrink. The constant normaliser weighs both alike: no
drift. On the lab's sums the tiny model cannot tell its own slips, so right and wrong contexts are one to it, the two
pushes cancel, and the length only walks at random (the first lab model); a model taught to follow its wrong answers
by long tails (a digit too many, then 15-30 filler tokens) unlearned those answers first (benchmarks/README.md).

So the runs use the coin task (`minirlhf.tasks.coin`): a guess the environment judges aloud ("=H!" or "=T?"), a coin
for the reward (half the answers are wrong at every step, whatever the policy learns), and a tail of "." after a
right guess and "," after a wrong one, of a length that the SFT data (`tiny-lab-coin`) draw uniform in 0-15 tokens
for both. The two tail tokens are the knob: with one tail token after either verdict, the tiny model's decision to
end stayed one decision, and right and wrong lengths walked together (benchmarks/README.md).

A length here is the whole completion's in tokens, re-read from its text (`SeenCompletions`): the guess, the call's
end, the environment's three tokens and the tail, EOS not counted, so at least 5 for an answer with a guess and its
flip. One without (no guess, or a call that is more than a guess: 1 in 2000 answers of tiny-lab-coin before GRPO)
is wrong at its own length. No two of the format's characters make one token, so the text gives back the count of
sampled tokens.
"""

from __future__ import annotations

from minirlhf.lab.effect import Effect, differences, grpo_run
from minirlhf.lab.observe import column, plot_curves, tail_mean


def settings(quick: bool) -> dict:
    return {"model": "tiny-lab-coin",
            "grpo": {"steps": 3 if quick else 80, "lr": 2e-4, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 8, "epochs": 1, "scale": "group"},
            "arms": {"seq-mean": {"aggregation": "seq-mean"}, "constant": {"aggregation": "constant"}}}


def run_seed(seed: int, settings: dict) -> dict:
    from minirlhf.tasks import coin

    arms = {}
    for arm, fields in settings["arms"].items():
        history, seen, _, _ = grpo_run(settings, seed, task=coin.task(seed), **fields)  # flips from the seed
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
