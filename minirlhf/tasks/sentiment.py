"""Ground-truth sentiment for the controlled-sentiment task, using VADER.

VADER (``vaderSentiment``) is a rule-based, lexicon-driven sentiment analyser that ships its own lexicon and
runs offline. It handles negation ("not good"), contrast ("..., but ..."), intensifiers ("extremely") and
downtoners ("somewhat"), which is what the review grammar in :mod:`minirlhf.tasks.reviews` exercises.

Role in the project: VADER is the *ground truth*, the stand-in for human judgement. It is used only

* to label preference pairs (which of two continuations is more positive) for DPO and for training a
  learned reward model, and
* to evaluate every method on held-out prompts.

It is never the training reward of the learned-reward methods: PPO, REINFORCE/RLOO and GRPO in that setting
optimise the reward model trained from VADER-labelled pairs, and measuring the gap between that proxy and
VADER is the point of the exercise (reward over-optimisation). :func:`sentiment_reward` exists so the same
scorer can be plugged into evaluation code, or into an "oracle reward" baseline when one is wanted on purpose.

For the trainers: :func:`evaluate_sentiment` (held-out VADER sentiment and KL to p_ref of sampled
continuations) and :func:`sentiment_task` (the Task whose training reward is a learned reward model).

What gets scored: the prompt joined to its completion, not the completion alone. The task's openings are
neutral (VADER scores them 0), so the opening adds no sentiment of its own, while a negation or a contrast
that straddles the boundary ("The acting was" + " not good") is read correctly.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from minirlhf.logprobs import response_logprobs, sequence_logprobs
from minirlhf.sampling import sample
from minirlhf.tasks import Task
from minirlhf.tasks.reviews import sentiment_prompts

_ANALYZER: Any = None


def _analyzer() -> Any:
    """The VADER analyser, created on first use and cached for the life of the process."""
    global _ANALYZER
    if _ANALYZER is None:
        try:
            from vaderSentiment.vaderSentiment import SentimentIntensityAnalyzer
        except ImportError as err:  # pragma: no cover - depends on the environment
            raise ImportError(
                "The sentiment task needs VADER: install it with `pip install vaderSentiment`."
            ) from err
        _ANALYZER = SentimentIntensityAnalyzer()
    return _ANALYZER


def sentiment_scores(texts: list[str]) -> list[float]:
    """VADER compound score of each text, in [-1, 1] (positive > 0, negative < 0, neutral near 0)."""
    if isinstance(texts, str):
        raise TypeError("sentiment_scores expects a list of strings, not a single string")
    analyzer = _analyzer()
    return [float(analyzer.polarity_scores(text)["compound"]) for text in texts]


def join_prompt_completion(prompt: str, completion: str) -> str:
    """Concatenate a prompt and its completion, adding a space only where two words would otherwise touch."""
    if prompt and completion and not prompt[-1].isspace() and completion[0].isalnum():
        return f"{prompt} {completion}"
    return prompt + completion


def sentiment_reward(prompts: list[str], completions: list[str], **columns: Any) -> list[float]:
    """Reward function in the project's (and TRL's) shape: one float per completion.

    The reward is the VADER compound score of ``prompt + completion`` (see the module docstring for why the
    prompt is included). Extra dataset columns passed as keyword arguments are accepted and ignored.
    """
    if len(prompts) != len(completions):
        raise ValueError(
            f"prompts and completions must have the same length, got len(prompts)={len(prompts)} "
            f"and len(completions)={len(completions)}"
        )
    texts = [join_prompt_completion(p, c) for p, c in zip(prompts, completions, strict=True)]
    return sentiment_scores(texts)


# --------------------------------------------------------------------------------------------------
# The controlled-sentiment task for the trainers: held-out evaluation, and the Task for online methods.
# --------------------------------------------------------------------------------------------------

# The two sentiment tasks' names (a run records its task's name, and a resume compares it): VADER as the reward is the
# shipped task `--task sentiment`; a learned reward model as the reward is made in Python (`sentiment_task`)
VADER_TASK, LEARNED_REWARD_TASK = "sentiment", "sentiment-learned-reward"
MAX_NEW_TOKENS = 32  # continuation budget: 99% of the base model's continuations end (EOS) within it; fits 64 positions


@torch.no_grad()
def evaluate_sentiment(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    ref_model: nn.Module | None = None,
    n_prompts: int = 100,
    samples_per_prompt: int = 4,
    seed: int = 0,
    max_new_tokens: int = MAX_NEW_TOKENS,
    temperature: float = 1.0,
    reward_fn: Callable[..., Sequence[float]] | None = None,
) -> dict[str, float]:
    """Ground-truth quality of a policy on the held-out openings (`sentiment_prompts("test")`).

    Samples `samples_per_prompt` continuations of each of the first `n_prompts` test openings (a fixed seed, so
    two policies, or one policy at two steps, are compared on the same random numbers) and returns

        "sentiment"  mean VADER score of prompt + continuation (the ground truth, in [-1, 1])
        "kl"         with `ref_model`: sequence-level KL(p_θ || p_ref) estimated on the samples y ~ p_θ,
                     (1/N) Σ_i Σ_t [log p_θ(y_i,t | x_i, y_i,<t) - log p_ref(y_i,t | x_i, y_i,<t)]   (k1, summed)
        "reward"     with `reward_fn` (e.g. a learned reward model): its mean score on the same samples
        "response_length", "eos_rate"   how long the continuations are, and how often they end by themselves
    """
    prompts = sentiment_prompts("test", n_prompts)
    generator = torch.Generator().manual_seed(seed)
    rollout = sample(
        model, tokenizer, prompts, group_size=samples_per_prompt, max_new_tokens=max_new_tokens,
        temperature=temperature, generator=generator,
    )
    metrics = {
        "sentiment": sum(sentiment_reward(rollout.prompts, rollout.completions)) / len(rollout.completions),
        "response_length": rollout.response_lengths.float().mean().item(),
        "eos_rate": rollout.ended_with_eos.float().mean().item(),
    }
    if ref_model is not None:
        ref_logp = response_logprobs(
            ref_model, rollout.input_ids, rollout.attention_mask, rollout.response_mask, temperature
        )  # (B, T) log p_ref on the sampled tokens
        kl = sequence_logprobs(rollout.logprobs - ref_logp, rollout.response_mask)  # (B,) Σ_t log p_θ/p_ref
        metrics["kl"] = kl.mean().item()
    if reward_fn is not None:
        metrics["reward"] = sum(map(float, reward_fn(rollout.prompts, rollout.completions))) / len(rollout.prompts)
    return metrics


def train_prompts(n: int, rng: random.Random) -> list[str]:
    """`n` review openings of the train split, drawn with replacement (never a held-out opening)."""
    openings = sentiment_prompts("train")
    return [rng.choice(openings) for _ in range(n)]


def sentiment_task(reward_model, ref_model: nn.Module | None = None, tokenizer=None, **eval_kwargs: Any) -> Task:
    """The sentiment task for the online trainers (`train_grpo`, `train_ppo`, ...), rewarded by a LEARNED model.

    `reward_fn` is `reward_model`'s score of prompt + completion (a `RewardModel` from
    `minirlhf.tasks.reward_models`, or anything with `.score(prompts, completions, tokenizer=...)`), never
    VADER: VADER only judges the held-out evaluation, whose "sentiment" (ground truth) can then be compared with
    "reward" (the proxy being optimised). Pass `ref_model` (p_ref) to also log the held-out KL, and `tokenizer`
    when the reward model does not carry its own. `eval_kwargs` go to `evaluate_sentiment`.
    """
    def learned_reward(prompts: list[str], completions: list[str], **columns: Any) -> list[float]:
        return reward_model.score(prompts, completions, tokenizer=tokenizer)

    learned_reward.__name__ = f"learned_reward({type(reward_model).__name__})"

    def evaluate(model: nn.Module, policy_tokenizer: PreTrainedTokenizerBase) -> dict[str, float]:
        return evaluate_sentiment(model, policy_tokenizer, ref_model=ref_model, reward_fn=learned_reward, **eval_kwargs)

    return Task(
        name=LEARNED_REWARD_TASK,
        train_prompts=train_prompts,
        reward_fn=learned_reward,
        evaluate=evaluate,
        max_new_tokens=eval_kwargs.get("max_new_tokens", MAX_NEW_TOKENS),
        models={"reward_model": reward_model},
    )


def vader_task(**eval_kwargs: Any) -> Task:
    """The sentiment task rewarded by VADER itself (`python -m minirlhf grpo --task sentiment`): the reward is the
    ground truth, so there is no proxy to over-optimise. `eval_kwargs` go to `evaluate_sentiment`."""
    return Task(
        name=VADER_TASK,
        train_prompts=train_prompts,
        reward_fn=sentiment_reward,
        evaluate=lambda model, tokenizer: evaluate_sentiment(model, tokenizer, **eval_kwargs),
        max_new_tokens=eval_kwargs.get("max_new_tokens", MAX_NEW_TOKENS),
    )
