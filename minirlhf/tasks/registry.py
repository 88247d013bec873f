"""The shipped tasks and pair sets by name, and the task a run's config names.

A config records what its run learns from as plain values (`task`, `task_option`, `prompts`, `reward`,
`reward_weights`), so that `config.json` keeps it and a resume restores it; `resolve_task` and `resolve_sft_data`
turn those values into the `Task` (or `SFTData`) the trainer reads, the same for the command line and the Python API.
A shipped task with knobs (the lab) takes them as NAME=VALUE strings (`--task-option mix=0.5,0.5,0`), each parsed by
the type of its field in the task's config class (`TASK_OPTIONS`), which checks them.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from minirlhf.checks import parse_bool
from minirlhf.data import Evaluation, PreferenceData, PreferencePair, SFTData, preference_data
from minirlhf.errors import UserError, raised_at
from minirlhf.tasks import Task, arithmetic, calculator, lab, reward_models, sentiment
from minirlhf.tasks.custom import load_object, located_prompt_rows, prompts_task

DEFAULT_TASK = "arithmetic"  # what an online run or SFT learns from when its config names no task and no prompts
TASKS: dict[str, Callable[[], Task]] = {
    "arithmetic": arithmetic.task, sentiment.VADER_TASK: sentiment.vader_task, "lab": lab.task,
    "calculator": calculator.task, reward_models.REWARD_MODELS_TASK: reward_models.task,
}
# tasks a name cannot rebuild (their reward is a model in memory; `reward-models` rebuilds saved ones from their
# folders): a run that learned from one resumes given the Task again
MADE_IN_PYTHON = {sentiment.LEARNED_REWARD_TASK: "minirlhf.tasks.sentiment.sentiment_task(reward_model)"}
# the shipped tasks with knobs: each --task-option NAME=VALUE sets a field of this config class, made by the task's
# function as its one argument; each class has .options(): its moved knobs as NAME=VALUE
# (a class may check a knob alone with .checked_knob(name, value), when it has knobs that must be given, and name
# the knobs that hold folders in FOLDER_KNOBS)
TASK_OPTIONS: dict[str, type] = {"lab": lab.LabConfig, "calculator": calculator.CalculatorConfig,
                                 reward_models.REWARD_MODELS_TASK: reward_models.RewardModelsConfig}
SFT_DATA: dict[str, Callable[[], SFTData]] = {"arithmetic": arithmetic.sft_data, "lab": lab.sft_data,
                                              "calculator": calculator.sft_data}
# a shipped pair set -> its sampling evaluation (model, tokenizer, ref_model=, n_prompts=, ...) -> dict (DPO)
PAIR_EVALUATIONS: dict[str, Evaluation] = {"sentiment": sentiment.evaluate_sentiment}


def resolve_task(config: Any) -> Task:
    """The `Task` of an online config: `config.prompts` scored by the `config.reward` functions (weighted by
    `config.reward_weights`), else `config.task`: a shipped name (its knobs set by `config.task_option`) or a
    module:function / path.py:function that returns a Task (default: arithmetic). A ValueError says what is wrong."""
    _check_task_fields(config.task, config.prompts, config.reward, config.reward_weights)
    if config.prompts and not config.reward:
        raise ValueError("--prompts needs at least one --reward module:function to score the completions")
    if config.prompts:
        rewards = [load_object(spec, "reward function") for spec in config.reward]
        return prompts_task(config.prompts, rewards, config.reward_weights)
    name = config.task or DEFAULT_TASK
    if name in TASK_OPTIONS:
        return TASKS[name](TASK_OPTIONS[name](**task_options(name, config.task_option)))
    return _made(name, TASKS, Task)


def task_options(task: str | None, options: Sequence[str] | None) -> dict[str, Any]:
    """The knobs that `options` set: ["mix=0.5,0.5,0", "max_new_tokens=24"] -> {"mix": (0.5, 0.5, 0.0),
    "max_new_tokens": 24}, each value parsed by the type of its field in the task's config class (`TASK_OPTIONS`)
    and checked by that class. A ValueError names the option and its value; {} when none are given."""
    name = task or DEFAULT_TASK
    if not options:
        if name in TASK_OPTIONS:
            _whole_config(name, {})  # a task with a knob that must be given (reward-models: models)
        return {}
    if name not in TASK_OPTIONS:
        raise ValueError(f"--task-option {options[0]!r}: task {name!r} takes no options (the tasks that take them: "
                         f"{', '.join(TASK_OPTIONS)})")
    config_cls = TASK_OPTIONS[name]
    types = typing.get_type_hints(config_cls)
    values: dict[str, Any] = {}
    for option in options:
        key, sep, text = option.partition("=")
        if not sep or key not in types:
            raise ValueError(f"--task-option {option!r} must be NAME=VALUE, NAME one of the {name} task's knobs: "
                             f"{', '.join(types)}")
        if key in values:
            raise ValueError(f"--task-option {option!r}: {key} is given twice")
        try:
            values[key] = _option_value(types[key], text)
            check_alone = getattr(config_cls, "checked_knob", None) or (lambda k, v: config_cls(**{k: v}))
            check_alone(key, values[key])  # each knob checked alone, so that the error names its option
        except ValueError as err:
            raise ValueError(f"--task-option {option!r}: {err}") from None
    _whole_config(name, values)
    return values


def _whole_config(name: str, values: dict[str, Any]) -> None:
    """The task's config with these knobs, checked whole: a knob that must be given, and knobs that must agree."""
    try:
        TASK_OPTIONS[name](**values)
    except ValueError as err:
        raise ValueError(f"--task {name} --task-option: {err}") from None


def absolute_task_options(task: str | None, options: Any) -> Any:
    """`options` with each knob that names folders (the task config's FOLDER_KNOBS) spelled with absolute paths, so
    that a run resumed from another working directory reads the same folders; the others, and anything that is no
    list of NAME=VALUE strings (the config's check says what is wrong), as they are."""
    folders = folder_knobs(task)
    if not folders or not isinstance(options, list):
        return options

    def absolute(option: Any) -> Any:
        key, sep, text = option.partition("=") if isinstance(option, str) else ("", "", "")
        if not sep or key not in folders:
            return option
        parts = [part.strip() for part in text.split(",")]  # an empty one stays empty, for the check to name
        return f"{key}=" + ",".join(str(Path(part).expanduser().resolve()) if part else part for part in parts)

    return [absolute(option) for option in options]


def folder_knobs(task: str | None) -> tuple[str, ...]:
    """The knobs of a shipped task that name folders (its config's FOLDER_KNOBS; reward-models: models), () when
    it has none."""
    return getattr(TASK_OPTIONS.get(task or DEFAULT_TASK), "FOLDER_KNOBS", ())


def canonical_task_options(task: str | None, options: Sequence[str] | None) -> list[str] | None:
    """`options` in one spelling, in the knobs' order, without those left at their defaults (None when no knob is
    moved): two runs set the same knobs exactly when these are equal ("mix=.5,.5,0" and "mix=0.5,0.5,0.0" are one)."""
    values = task_options(task, options)
    moved = TASK_OPTIONS[task or DEFAULT_TASK](**values).options() if values else ()
    return list(moved) or None


def _option_value(declared: Any, text: str) -> Any:
    """One knob's value from its text, by the type its field declares: a bool (true/false), an int, a float, or a
    tuple of them written with commas ("0.5,0.5,0")."""
    if typing.get_origin(declared) is tuple:
        item = typing.get_args(declared)[0]
        return tuple(_option_value(item, part) for part in text.split(","))
    if declared is bool:
        return parse_bool("the value", text)
    try:
        return declared(text.strip())
    except ValueError:
        what = {int: "a whole number", float: "a number"}.get(declared, f"a {declared.__name__}")
        raise ValueError(f"the value must be {what}, got {text!r}") from None


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
