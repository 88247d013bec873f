"""A task of your own: prompts from a JSONL file (or a `datasets` name) and reward functions you wrote.

    python -m minirlhf grpo --prompts prompts.jsonl --reward my_rewards.py:exact --reward my_rewards.py:short \
        --reward-weights 1.0 0.2

A reward function has TRL's shape, `reward(prompts, completions, **columns) -> list[float]`: one float per
completion. Each row of the prompt file is a JSON object with a "prompt"; its other fields (e.g. "answer") reach
the reward functions as keyword lists, one value per completion. Several functions add up with their weights:

    R(x, y) = Σ_k w_k · R_k(x, y)

`module:name` names a function of an importable module, `path/to/file.py:name` one of a file. A name that does
not resolve is an error that says what was given and what was found.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from minirlhf.data import BYTE_ORDER_MARK, DuplicateKeyError, _rows_from_datasets, check_text, load_json_line
from minirlhf.errors import UserError
from minirlhf.tasks import REWARD_ARGUMENTS, RewardFn, Task, WeightedReward, reward_name

PROMPT_SET = ("prompt set", "a 'prompt' field")  # what the rows are, for the errors
MAX_NEW_TOKENS = 32  # response budget of a task of your own unless --max-new-tokens says otherwise (fits `tiny`)


def load_object(spec: str, what: str = "function") -> Callable[..., Any]:
    """The callable named by `module:name` or `path/to/file.py:name`; a clear error when any part is missing."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ValueError(f"{what} {spec!r} must be written module:name or path/to/file.py:name")
    if where.endswith(".py"):
        path = Path(where).expanduser()
        if not path.is_file():
            raise FileNotFoundError(f"{what} {spec!r}: there is no file {path} (relative to {Path.cwd()})")
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(where)
        except ModuleNotFoundError as err:
            if err.name is None or not (where == err.name or where.startswith(err.name + ".")):
                raise  # the module exists, but one of its own imports failed: show that error as it is
            raise ValueError(
                f"{what} {spec!r}: no module named {err.name!r} can be imported "
                "(for a file, write path/to/file.py:name)"
            ) from err
    if not hasattr(module, name):
        found = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        close = difflib.get_close_matches(name, found, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{what} {spec!r}: {where} has no {name!r}{hint}; it defines: {', '.join(found) or 'nothing'}")
    obj = getattr(module, name)
    if not callable(obj):
        raise ValueError(f"{what} {spec!r} is a {type(obj).__name__}, not a function")
    return obj


def weighted_reward(reward_fns: Sequence[RewardFn], weights: Sequence[float] | None = None) -> RewardFn:
    """One reward function from several: R(x, y) = Σ_k w_k · R_k(x, y) (every w_k = 1 when `weights` is None), a
    `WeightedReward` whose terms are named after the functions (a repeated name gets its position: exact#2)."""
    weights = [1.0] * len(reward_fns) if weights is None else [float(w) for w in weights]
    if not reward_fns:
        raise ValueError("a task needs at least one reward function")
    if len(weights) != len(reward_fns):
        raise ValueError(f"{len(weights)} reward weights were given for {len(reward_fns)} reward functions")
    if len(reward_fns) == 1 and weights == [1.0]:
        return reward_fns[0]
    names = [reward_name(fn) for fn in reward_fns]
    names = [name if names.count(name) == 1 else f"{name}#{k + 1}" for k, name in enumerate(names)]
    return WeightedReward(list(zip(names, weights, reward_fns)))


def load_prompt_rows(source: str | Path, required: Sequence[str] = ("prompt",)) -> list[dict[str, Any]]:
    """The rows of a prompt file: a `.jsonl` file with one JSON object per line, or a `datasets` name (its "train"
    split). Every row must hold the `required` fields as non-empty strings of valid text, and the same columns as
    the first row; a bad row names its file and line."""
    return [row for _, row in located_prompt_rows(source, required)]


def located_prompt_rows(source: str | Path, required: Sequence[str] = ("prompt",)) -> list[tuple[str, dict]]:
    """(where, row) for each row of `load_prompt_rows`, where = "file, line N" (or "name (train split), row i"):
    every row is checked here, before the first step."""
    path = Path(source).expanduser()
    if path.is_dir() and (path / "train.jsonl").is_file():  # a folder of splits: its train split
        path = path / "train.jsonl"
    if path.suffix == ".jsonl" or path.is_file():
        if not path.is_file():
            raise FileNotFoundError(f"prompt file {str(source)!r} does not exist (relative to {Path.cwd()})")
        numbered = []
        for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise UserError(f"{path}, line {number}: not UTF-8 text (byte {err.start + 1}: "
                                f"{raw[err.start : err.start + 1]!r})") from None
            if number == 1:
                line = line.removeprefix(BYTE_ORDER_MARK)  # a mark at the file's start is no part of the data
            if line.strip():
                try:
                    numbered.append((f"{path}, line {number}", load_json_line(line)))
                except DuplicateKeyError as err:
                    raise UserError(f"{path}, line {number}: {err}") from None
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path}, line {number}: invalid JSON ({err.msg} at column {err.colno})") from err
                except (ValueError, RecursionError) as err:  # an integer of 5000 digits, nesting 10^5 deep
                    raise UserError(f"{path}, line {number}: invalid JSON ({type(err).__name__}: "
                                    f"{str(err)[:80]})") from None
    else:  # a folder `datasets` reads, or a hub name
        numbered = [(f"{source} (train split), row {i}", row) for i, row in enumerate(
            _rows_from_datasets(str(path if path.is_dir() else source), "train", local=path.is_dir(), kind=PROMPT_SET))]
    if not numbered:
        raise ValueError(f"{source} holds no prompts")
    for where, row in numbered:
        if not isinstance(row, dict):
            raise ValueError(f"{where}: expected a JSON object with {', '.join(required)}, got {type(row).__name__}")
        for field in required:
            value = row.get(field)
            if not isinstance(value, str) or not value.strip():
                raise ValueError(f"{where}: field {field!r} must be a non-empty string, got {value!r}"
                                 + (" (white space only)" if isinstance(value, str) and value else ""))
            check_text(row[field], where, field)
    columns = set(numbered[0][1])
    taken = sorted(columns & set(REWARD_ARGUMENTS))
    if taken:
        raise UserError(f"{numbered[0][0]}: column {taken[0]!r} has the name of a reward function's own argument "
                        f"({', '.join(REWARD_ARGUMENTS)}), so the reward could not be called: rename the column")
    for where, row in numbered:
        if set(row) != columns:
            missing, extra = sorted(columns - set(row)), sorted(set(row) - columns)
            raise UserError(f"{where}: the columns differ from the first row's ({', '.join(sorted(columns))}): "
                            + "; ".join(filter(None, [missing and f"missing {', '.join(missing)}",
                                                      extra and f"extra {', '.join(extra)}"]))
                            + " (every row needs the same columns: the reward functions get one list per column)")
    return numbered


def prompts_task(
    source: str | Path,
    reward_fns: Sequence[RewardFn],
    weights: Sequence[float] | None = None,
    max_new_tokens: int = MAX_NEW_TOKENS,
    evaluate: Callable[..., dict[str, float]] | None = None,
) -> Task:
    """The `Task` of a prompt file (see `load_prompt_rows`) rewarded by Σ_k w_k R_k; prompts are drawn with
    replacement, and their rows' other fields reach the reward functions as keyword lists."""
    located = located_prompt_rows(source)
    rows = [row for _, row in located]
    reward = weighted_reward(reward_fns, weights)

    def train_prompts(n: int, rng: random.Random) -> list[dict[str, Any]]:
        return [rng.choice(rows) for _ in range(n)]

    return Task(name=Path(str(source)).stem, train_prompts=train_prompts, reward_fn=reward,
                max_new_tokens=max_new_tokens, evaluate=evaluate,
                prompts=[(where, row["prompt"]) for where, row in located])
