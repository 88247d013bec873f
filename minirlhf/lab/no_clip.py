"""(g) PPO without clipping destroys the policy when a batch is reused many times.

Each batch is reused for epochs × minibatches updates (8 × 8 here). With the clip, a token whose ratio r_t(θ) has
left [1 − ε, 1 + ε] in the direction its advantage favours gives no more gradient; without it (ε = ∞) nothing stops
the later updates from following the same noisy advantages further and further (PPO paper, §2.1 and Table 1). The
clip bounds how far one batch moves p_θ; it does nothing to the variance of the gradient estimate.

It runs on arithmetic from `tiny-sft` (held-out greedy accuracy 0.60), whatever model the lab's other effects use:
the effect needs a clipped arm that learns, and there PPO learns within tens of steps on answers of 3-4 tokens, so
64 updates per batch stay cheap. The lab task adds nothing this effect needs (no length, difficulty or truncation
knob is involved), and on the lab model PPO learned nothing in either arm within the time.
"""

from __future__ import annotations

import dataclasses

from minirlhf.lab.effect import RUN, Effect, differences
from minirlhf.lab.observe import BatchRatios, column, plot_curves, tail_mean

CLIPPED, UNCLIPPED = "eps=0.2", "eps=inf"
MARGIN = 0.05  # the accuracy gap asked for: over twice the standard error of a difference on ~1000 problems


def settings(quick: bool) -> dict:
    return {"model": "tiny-sft", "task": "arithmetic",
            "ppo": {"steps": 2 if quick else 30, "lr": 1e-4, "beta": 0.0, "prompts_per_step": 8 if quick else 64,
                    "group_size": 1, "epochs": 2 if quick else 8, "minibatch_size": 4 if quick else 8},
            "held_out": 64 if quick else None,  # problems scored (greedy); None = every held-out problem (~1000)
            "arms": {CLIPPED: {"eps": 0.2}, UNCLIPPED: {"eps": 1e9}}}


def run_seed(seed: int, settings: dict) -> dict:
    """Both arms from the same start on one seed: per step the training reward, approx_kl and ratio_max (the
    trainer's means over the step's updates), and the batch's largest ratio and KL after all its updates; at the end
    the held-out greedy accuracy."""
    from minirlhf.models import load_model
    from minirlhf.tasks import arithmetic
    from minirlhf.trainers.ppo import PPOConfig, train_ppo

    held_out = arithmetic.problems("test")[: settings["held_out"]]
    arms = {}
    for arm, fields in settings["arms"].items():
        config = PPOConfig(model=settings["model"], seed=seed, **RUN, **settings["ppo"], **fields)
        model, tokenizer = load_model(settings["model"], device="cpu")
        if "before" not in arms:
            arms["before"] = arithmetic.accuracy(model, tokenizer, held_out)
        task = arithmetic.task()
        ratios = BatchRatios(task.reward_fn, model, tokenizer)
        model, tokenizer, history = train_ppo(dataclasses.replace(task, reward_fn=ratios), config, model, tokenizer,
                                              callbacks=[ratios.after_step])
        reward, approx_kl = column(history, "reward"), column(history, "approx_kl")
        arms[arm] = {"reward": reward, "approx_kl": approx_kl, "ratio_max": column(history, "ratio_max"),
                     "batch_max_ratio": ratios.max_ratio, "batch_kl": ratios.kl,
                     "final_reward": tail_mean(reward, 5), "max_approx_kl": max(approx_kl),
                     "mean_approx_kl": sum(approx_kl) / len(approx_kl), "max_batch_ratio": max(ratios.max_ratio),
                     "final_accuracy": arithmetic.accuracy(model, tokenizer, held_out)}
    return arms


def holds(arms: dict) -> bool:
    return arms[UNCLIPPED]["final_accuracy"] < arms[CLIPPED]["final_accuracy"] - MARGIN


def plot(ax, seeds: list[dict]) -> None:
    lines = [(arm, "reward", color, "-", arm) for arm, color in ((CLIPPED, "C0"), (UNCLIPPED, "C3"))]
    plot_curves(ax, seeds, lines, window=5, ylabel="training reward (5-step mean)",
                title="(g) PPO on arithmetic, 8 epochs x 8 minibatches per batch")


EFFECT = Effect(
    title="PPO without clipping destroys the policy when a batch is reused many times",
    criterion=f"held-out greedy accuracy on arithmetic after training: eps = inf ends more than {MARGIN} below "
              "eps = 0.2",
    notebook="03b_ppo_in_practice.ipynb",
    settings=settings, run_seed=run_seed, holds=holds,
    across=lambda seeds: differences(seeds, "final_accuracy", CLIPPED, UNCLIPPED,
                                     "held-out accuracy, eps = 0.2 minus eps = inf"),
    plot=plot)
