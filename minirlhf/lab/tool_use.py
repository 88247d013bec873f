"""(7) Tool use: with a calculator in the loop, GRPO learns to call it, and beats the same GRPO without it.

The task is long sums (`minirlhf.tasks.calculator`: two 4-5 digit numbers), from `tiny-calculator`, which answers
in its head (almost never right) or writes a call "[a+b]" (64 % of held-out answers), as its SFT demonstrations did. Two
arms, the same model, steps and verifier:

    tool     the environment answers each call: "[12345+67890]" is followed by "=80235", which the policy reads but is
             never trained on (the loss mask is 0 there); a right call then needs only the EOS after it
    plain    nothing answers: after a call the policy writes "=" and the result itself, as it would without one

In the tool arm a call is usually right and an answer in the head is not, so the group advantages favour calling, and
the share of answers that call rises; in the plain arm calling gains nothing. The figure that judges them is the
held-out accuracy after training, each arm sampled as it trained (with and without the calculator).
"""

from __future__ import annotations

import dataclasses
import statistics

from minirlhf.lab.effect import RUN, Effect
from minirlhf.lab.observe import column, plot_curves

TOOL, PLAIN = "tool", "plain"
MARGIN = 0.2  # the tool arm's held-out gain asked for: over 4 standard errors of a difference on 200 problems
RISE = 0.1  # the rise in the tool arm's held-out share of calls asked for: RL learned to call


class SeenCalls:
    """A reward function that also keeps, per call (one per step), the share of the completions that call the
    calculator."""

    def __init__(self, reward_fn):
        self.reward_fn = reward_fn
        self.__name__ = getattr(reward_fn, "__name__", "reward")
        self.calls: list[float] = []

    def __call__(self, prompts, completions, **columns):
        from minirlhf.tasks.calculator import calls

        self.calls.append(sum(map(calls, completions)) / len(completions))
        return self.reward_fn(prompts, completions, **columns)


def settings(quick: bool) -> dict:
    return {"model": "tiny-calculator", "task": "calculator",
            "grpo": {"steps": 2 if quick else 30, "lr": 1e-3, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 8, "epochs": 1},
            "held_out": 32 if quick else 200,  # held-out problems, one answer sampled each
            "arms": {TOOL: {"tool": True}, PLAIN: {"tool": False}}}


def run_seed(seed: int, settings: dict) -> dict:
    """Both arms from the same start on one seed: per step the training reward and share of calls; before and after
    training the held-out accuracy and share of calls, each arm with its own environment."""
    from minirlhf.models import load_model
    from minirlhf.tasks import calculator
    from minirlhf.trainers.grpo import GRPOConfig, train_grpo

    if sorted(settings["arms"]) != sorted((TOOL, PLAIN)):
        raise ValueError(f"arms={list(settings['arms'])!r}: the criterion compares the arms {TOOL!r} and {PLAIN!r}")
    tasks = {arm: calculator.task(**knobs) for arm, knobs in settings["arms"].items()}  # knobs checked before any run
    arms = {}
    for arm, knobs in settings["arms"].items():
        model, tokenizer = load_model(settings["model"], device="cpu")
        held_out = dict(n=settings["held_out"], **knobs)
        start = calculator.calculator_metrics(model, tokenizer, **held_out)
        task = tasks[arm]
        seen = SeenCalls(task.reward_fn)
        config = GRPOConfig(model=settings["model"], seed=seed, **RUN, **settings["grpo"])
        model, tokenizer, history = train_grpo(dataclasses.replace(task, reward_fn=seen, evaluate=None), config,
                                               model, tokenizer)
        final = calculator.calculator_metrics(model, tokenizer, **held_out)
        arms[arm] = {"reward": column(history, "reward"), "calls": seen.calls,
                     "start_accuracy": start["accuracy"], "start_calls": start["calls"],
                     "final_accuracy": final["accuracy"], "final_calls": final["calls"]}
    return arms


def holds(arms: dict) -> bool:
    """The tool arm gains by learning (its own start is the baseline: the model already scores 0.51 with the
    calculator and 0.00 without it before any step, so "above the plain arm" alone would hold untrained)."""
    tool = arms[TOOL]
    return (tool["final_accuracy"] > tool["start_accuracy"] + MARGIN
            and tool["final_accuracy"] > arms[PLAIN]["final_accuracy"]
            and tool["final_calls"] > tool["start_calls"] + RISE)


def gains(seeds: list[dict]) -> dict:
    """The tool arm's held-out accuracy after training minus before, per seed: mean and range."""
    gained = [s["arms"][TOOL]["final_accuracy"] - s["arms"][TOOL]["start_accuracy"] for s in seeds]
    return {"size": "held-out accuracy of the tool arm, after training minus before",
            "mean": statistics.fmean(gained), "range": [min(gained), max(gained)]}


def plot(ax, seeds: list[dict]) -> None:
    lines = [(arm, key, color, style, f"{arm}, {what}") for arm, color in ((TOOL, "C0"), (PLAIN, "C3"))
             for key, style, what in (("reward", "-", "reward"), ("calls", ":", "share of calls"))]
    plot_curves(ax, seeds, lines, window=5, ylabel="training batch (5-step mean)",
                title="(7) long sums, with and without the calculator")


EFFECT = Effect(
    title="with a calculator in the loop, GRPO learns to call it and beats the same GRPO without it",
    criterion=f"held-out accuracy on long sums: the tool arm's rises above its own start by more than {MARGIN} and "
              f"ends above the plain arm's; its share of answers that call rises by more than {RISE}",
    notebook="09a_toolbox.ipynb",
    settings=settings, run_seed=run_seed, holds=holds,
    across=gains,
    plot=plot)
