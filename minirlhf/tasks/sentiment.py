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

What gets scored: the prompt joined to its completion, not the completion alone. The task's openings are
neutral (VADER scores them 0), so the opening adds no sentiment of its own, while a negation or a contrast
that straddles the boundary ("The acting was" + " not good") is read correctly.
"""

from __future__ import annotations

from typing import Any

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
