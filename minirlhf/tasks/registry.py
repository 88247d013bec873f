"""The shipped tasks and pair sets by name, and the task a run's config names.

A config records what its run learns from as plain values (`task`, `prompts`, `reward`, `reward_weights`), so that
`config.json` keeps it and a resume restores it; `resolve_task` and `resolve_sft_data` turn those values into the
`Task` (or `SFTData`) the trainer reads, the same for the command line and the Python API.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable, Sequence
from typing import Any

from minirlhf.data import Evaluation, PreferenceData, PreferencePair, SFTData, preference_data
from minirlhf.errors import UserError, raised_at
from minirlhf.tasks import Task, arithmetic, lab, sentiment
from minirlhf.tasks.custom import load_object, located_prompt_rows, prompts_task

DEFAULT_TASK = "arithmetic"  # what an online run or SFT learns from when its config names no task and no prompts
TASKS: dict[str, Callable[[], Task]] = {
    "arithmetic": arithmetic.task, sentiment.VADER_TASK: sentiment.vader_task, "lab": lab.task,
}
# tasks a name cannot rebuild (their reward is a model): a run that learned from one resumes given the Task again
MADE_IN_PYTHON = {sentiment.LEARNED_REWARD_TASK: "minirlhf.tasks.sentiment.sentiment_task(reward_model)"}
SFT_DATA: dict[str, Callable[[], SFTData]] = {"arithmetic": arithmetic.sft_data, "lab": lab.sft_data}
# a shipped pair set -> its sampling evaluation (model, tokenizer, ref_model=, n_prompts=, ...) -> dict (DPO)
PAIR_EVALUATIONS: dict[str, Evaluation] = {"sentiment": sentiment.evaluate_sentiment}


def resolve_task(config: Any) -> Task:
    """The `Task` of an online config: `config.prompts` scored by the `config.reward` functions (weighted by
    `config.reward_weights`), else `config.task`: a shipped name or a module:function / path.py:function that
    returns a Task (default: arithmetic). A ValueError says what is wrong."""
    _check_task_fields(config.task, config.prompts, config.reward, config.reward_weights)
    if config.prompts and not config.reward:
        raise ValueError("--prompts needs at least one --reward module:function to score the completions")
    if config.prompts:
        rewards = [load_object(spec, "reward function") for spec in config.reward]
        return prompts_task(config.prompts, rewards, config.reward_weights)
    return _made(config.task or DEFAULT_TASK, TASKS, Task)


def resolve_sft_data(config: Any) -> SFTData:
    """The `SFTData` of an SFT config: the (prompt, completion) rows of `config.prompts`, else `config.task`: a
    shipped name or a module:function that returns an SFTData (default: arithmetic)."""
    _check_task_fields(config.task, config.prompts)
    if config.prompts:
        rows = located_prompt_rows(config.prompts, required=("prompt", "completion"))
        return SFTData([(row["prompt"], row["completion"]) for _, row in rows], sources=[where for where, _ in rows])
    return _made(config.task or DEFAULT_TASK, SFT_DATA, SFTData)


def shipped_preference_data(source: PreferenceData | Sequence[PreferencePair] | str | os.PathLike) -> PreferenceData:
    """`data.preference_data(source)`, with the sampling evaluation a shipped pair set comes with (sentiment:
    VADER on continuations of held-out openings)."""
    data = preference_data(source)
    if data.evaluate is None and isinstance(source, str) and source in PAIR_EVALUATIONS:
        data = dataclasses.replace(data, evaluate=PAIR_EVALUATIONS[source])
    return data


def _check_task_fields(task: str | None, prompts: str | None, reward=None, weights=None) -> None:
    """The task fields' rules, in the command line's words (config.task is --task, and so on)."""
    if prompts and task:
        raise ValueError("give either --task or --prompts, not both")
    if (reward or weights) and not prompts:
        raise ValueError("--reward and --reward-weights go with --prompts (a --task brings its own reward)")


def _made(name: str, shipped: dict[str, Callable[[], Any]], expected: type) -> Any:
    if name in MADE_IN_PYTHON:
        raise ValueError(f"task {name!r} is made in Python by {MADE_IN_PYTHON[name]}: pass that Task to the trainer "
                         f"(a name cannot rebuild its reward model); the tasks a name gives: {', '.join(shipped)}")
    make = shipped.get(name) or load_object(name, "task")
    try:  # the calling convention is checked apart from the call: an error inside the task is the task's own
        inspect.signature(make).bind()
    except TypeError as err:
        raise ValueError(f"task {name!r} must be callable without arguments and return a {expected.__name__}: "
                         f"{err}") from None
    except ValueError:  # a callable without a signature (a builtin): the call itself tells
        pass
    try:
        made = make()
    except Exception as err:
        raise UserError(f"task {name!r} raised {type(err).__name__}: {err} ({raised_at(err)}); --traceback shows "
                        "the whole traceback") from err
    if not isinstance(made, expected):
        raise ValueError(f"task {name!r} returned a {type(made).__name__}; a {expected.__name__} is needed here")
    return made
