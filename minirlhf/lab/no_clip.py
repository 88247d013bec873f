"""(g) PPO without clipping destroys the policy when a batch is reused many times.

Each batch is reused for epochs × minibatches updates. With the clip, a token whose ratio r_t(θ) has left
[1 − ε, 1 + ε] in the direction its advantage favours gives no more gradient; without it (ε = ∞) nothing stops the
later updates from following the same noisy advantages further and further (PPO paper, §2.1 and Table 1).
"""

from __future__ import annotations

import dataclasses
import statistics

from minirlhf.lab.effect import RUN, Effect, differences
from minirlhf.lab.observe import BatchRatios, column, smooth, tail_mean


def settings(quick: bool) -> dict:
    return {"task": {"mix": (0.5, 0.5, 0.0), "max_new_tokens": 40},
            "ppo": {"steps": 3 if quick else 30, "lr": 3e-4, "beta": 0.0, "prompts_per_step": 16 if quick else 32,
                    "group_size": 1, "epochs": 8, "minibatch_size": 2 if quick else 8},
            "eval_per_kind": 10 if quick else 100,
            "arms": {"eps=0.2": {"eps": 0.2}, "eps=inf": {"eps": 1e9}}}


def run_seed(seed: int, settings: dict) -> dict:
    from minirlhf.models import load_model
    from minirlhf.tasks import lab
    from minirlhf.trainers.ppo import PPOConfig, train_ppo

    task_config = lab.LabConfig(**settings["task"])
    arms = {}
    for arm, fields in settings["arms"].items():
        config = PPOConfig(model=settings["model"], seed=seed, **RUN, **settings["ppo"], **fields)
        model, tokenizer = load_model(settings["model"], device="cpu")
        task = lab.task(task_config)
        ratios = BatchRatios(task.reward_fn, model, tokenizer)
        model, tokenizer, history = train_ppo(dataclasses.replace(task, reward_fn=ratios), config, model, tokenizer,
                                              callbacks=[ratios.after_step])
        final = lab.lab_metrics(model, tokenizer, task_config, per_kind=settings["eval_per_kind"], seed=10_000 + seed)
        reward, approx_kl = column(history, "reward"), column(history, "approx_kl")
        arms[arm] = {"reward": reward, "approx_kl": approx_kl, "ratio_mean": column(history, "ratio_mean"),
                     "batch_max_ratio": ratios.max_ratio, "batch_kl": ratios.kl,
                     "entropy": column(history, "entropy"), "final_reward": tail_mean(reward, 10),
                     "max_approx_kl": max(approx_kl), "max_batch_ratio": max(ratios.max_ratio),
                     "max_batch_kl": max(ratios.kl),
                     "final": final, "final_accuracy": statistics.fmean(final[f"accuracy/{k}"] for k in lab.KINDS)}
    return arms


def plot(ax, seeds: list[dict]) -> None:
    for figures in seeds:
        for arm, color in (("eps=0.2", "C0"), ("eps=inf", "C3")):
            ax.plot(smooth(figures["arms"][arm]["reward"], 5), color=color, alpha=0.8,
                    label=arm if figures is seeds[0] else None)
    ax.set(xlabel="step", ylabel="training reward", title="(g) PPO, 8 epochs x 8 minibatches per batch")
    ax.legend(fontsize=8)


EFFECT = Effect(
    title="PPO without clipping destroys the policy when a batch is reused many times",
    criterion="held-out accuracy (mean over easy, medium, hard) after training: eps = inf ends below eps = 0.2",
    notebook="03b_ppo_in_practice.ipynb",
    settings=settings, run_seed=run_seed,
    holds=lambda arms: arms["eps=inf"]["final_accuracy"] < arms["eps=0.2"]["final_accuracy"],
    across=lambda seeds: differences(seeds, "final_accuracy", "eps=0.2", "eps=inf",
                                     "held-out accuracy, eps = 0.2 minus eps = inf"),
    plot=plot)
