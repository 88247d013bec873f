"""What a run does not log, read around it: the reward function sees every sampled completion, and a callback runs
after each step. Plus the few reductions every effect uses on per-step curves."""

from __future__ import annotations

import random
from collections.abc import Callable

WINDOW = 20  # last steps averaged for a run's final value of a per-step figure


class SeenCompletions:
    """A reward function that also keeps, per call (one per step), each completion's length in tokens and its
    reward: what the trainers' history does not split (the length of right and of wrong answers)."""

    def __init__(self, reward_fn: Callable, tokenizer):
        self.reward_fn, self.tokenizer = reward_fn, tokenizer
        self.__name__ = getattr(reward_fn, "__name__", "reward")
        self.steps: list[tuple[list[int], list[float]]] = []

    def __call__(self, prompts, completions, **columns):
        rewards = self.reward_fn(prompts, completions, **columns)
        lengths = [len(ids) for ids in self.tokenizer(list(completions), add_special_tokens=False)["input_ids"]]
        self.steps.append((lengths, [float(r) for r in rewards]))
        return rewards

    def mean_length(self, right: bool) -> list[float | None]:
        """Per step: the mean length of the right (reward > 0) or of the wrong answers; None when there were none."""
        curve = []
        for lengths, rewards in self.steps:
            chosen = [n for n, r in zip(lengths, rewards, strict=True) if (r > 0) == right]
            curve.append(sum(chosen) / len(chosen) if chosen else None)
        return curve


class BatchRatios:
    """How far one batch's updates moved p_θ on that batch's own tokens. The reward function (called right after
    sampling, before any update) records log p_θold of each completion; the callback after the step's updates
    computes log p_θ on the same tokens. Per step: the largest ratio r_t = p_θ / p_θold over the batch's tokens and
    the mean per-token KL(p_θold || p_θ) (k1)."""

    def __init__(self, reward_fn: Callable, model, tokenizer):
        self.reward_fn, self.model, self.tokenizer = reward_fn, model, tokenizer
        self.__name__ = getattr(reward_fn, "__name__", "reward")
        self.batch, self.max_ratio, self.kl = None, [], []

    def _logp(self):
        import torch

        from minirlhf.logprobs import response_logprobs

        with torch.no_grad():
            return response_logprobs(self.model, **self.batch)

    def __call__(self, prompts, completions, **columns):
        from minirlhf.data import encode_prompt_completion

        self.batch = encode_prompt_completion(self.tokenizer, list(prompts), list(completions))
        self.old_logp = self._logp()
        return self.reward_fn(prompts, completions, **columns)

    def after_step(self, history) -> None:
        mask = self.batch["response_mask"].bool()
        log_ratio = (self._logp() - self.old_logp)[mask]
        self.max_ratio.append(float(log_ratio.max().exp()))
        self.kl.append(float(-log_ratio.mean()))


def random_reward(seed: int) -> Callable:
    """R ~ Bernoulli(0.5), independent of the completion (seeded): no signal, so any drift is the update's own."""
    rng = random.Random(seed)

    def random_bernoulli(prompts, completions, **columns):
        return [float(rng.random() < 0.5) for _ in completions]

    return random_bernoulli


def tail_mean(values: list[float | None], window: int = WINDOW) -> float | None:
    """The mean of the last `window` values that are not None (None when there are none)."""
    kept = [v for v in values[-window:] if v is not None]
    return sum(kept) / len(kept) if kept else None


def column(history, key: str) -> list[float]:
    """One per-step figure of a run's history, as a list."""
    return list(history.column(key)[1])


def smooth(values: list[float | None], window: int = 10) -> list[float | None]:
    """A trailing mean over `window` steps, skipping None."""
    out = []
    for i in range(len(values)):
        kept = [v for v in values[max(0, i - window + 1) : i + 1] if v is not None]
        out.append(sum(kept) / len(kept) if kept else None)
    return out


def plot_curves(ax, seeds: list[dict], lines: list[tuple[str, str, str, str, str]], window: int = 10,
                **labels: str) -> None:
    """Every seed's per-step curves, smoothed over `window` steps, on one matplotlib Axes. `lines`: (arm, figure
    key, colour, line style, legend label) each; the legend names each line once. `labels`: ylabel, title."""
    for figures in seeds:
        for arm, key, color, style, label in lines:
            ax.plot(smooth(figures["arms"][arm][key], window), color=color, alpha=0.8, linestyle=style,
                    label=label if figures is seeds[0] else None)
    ax.set(xlabel="step", **labels)
    ax.legend(fontsize=8)
