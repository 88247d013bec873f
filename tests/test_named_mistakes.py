"""A user's mistake is named as theirs, before the first step: an error inside their own task shows where in their
file it was raised; a task's drawn prompts, a prompt column's name, a folder or hub name given as prompts, a .json
or .csv pair file and the headless executor's --out are each checked at the door, with generated cases."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirlhf.course.headless import main as headless_main
from minirlhf.data import load_preference_pairs
from minirlhf.errors import UserError
from minirlhf.tasks import REWARD_ARGUMENTS, Task, arithmetic, draw_prompts
from minirlhf.tasks.custom import load_prompt_rows
from minirlhf.tasks.registry import resolve_task

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PAIR = {"prompt": "Hi", "chosen": " good", "rejected": " bad"}


def _config(task: str):
    class Config:
        prompts = reward = reward_weights = None

    config = Config()
    config.task = task
    return config


# ----------------------------------------------------------------------------- an error inside the user's task

ERRORS = ["TypeError('bad operand')", "KeyError('answer')", "ZeroDivisionError('division by zero')",
          "AttributeError('no attribute x')", "ValueError('a value')", "RuntimeError('boom')"]


@FUZZ
@given(st.sampled_from(ERRORS), st.integers(0, 5))
def test_an_error_inside_a_users_task_is_shown_as_theirs_with_its_line(tmp_path, error, padding):
    """Found: a TypeError inside the task's body was reported as "must be callable without arguments", and the
    user's traceback was lost. Now the error, its type and the user's file and line are named, and the original
    exception is chained."""
    body = "\n".join(["def make():"] + ["    x = 1"] * padding + [f"    raise {error}"])
    path = tmp_path / "mytask.py"
    path.write_text(body + "\n")
    with pytest.raises(UserError) as err:
        resolve_task(_config(f"{path}:make"))
    kind = error.split("(")[0]
    assert f"task '{path}:make' raised {kind}" in str(err.value)
    assert f"{path}, line {padding + 2}, in make" in str(err.value)
    assert type(err.value.__cause__).__name__ == kind and "callable without arguments" not in str(err.value)


@pytest.mark.parametrize("signature", ["make(n)", "make(n, m=1)", "make(*, n)"])
def test_a_task_that_needs_arguments_is_a_calling_convention_error(tmp_path, signature):
    path = tmp_path / "mytask.py"
    path.write_text(f"def {signature}:\n    raise AssertionError('never called')\n")
    with pytest.raises(ValueError, match="must be callable without arguments"):
        resolve_task(_config(f"{path}:make"))


# ----------------------------------------------------------------------------- what a task's prompts may be

def _task(drawn) -> Task:
    return Task("mine", lambda n, rng: drawn(n), arithmetic.correctness_reward, 5)


prompt_text = st.text(alphabet="abc+= 12", min_size=1, max_size=6).filter(str.strip)
row = st.fixed_dictionaries({"prompt": prompt_text, "answer": st.text(max_size=2)})
bad_item = st.one_of(st.integers(), st.none(), st.just(""), st.just("  "), st.floats(), st.lists(prompt_text),
                     st.fixed_dictionaries({"answer": st.text()}), st.fixed_dictionaries({"prompt": st.integers()}))


def _draws():
    """(what train_prompts returns for n, whether it is valid)."""
    return st.one_of(
        st.just((lambda n: ["1+1="] * n, True)),
        st.lists(row, min_size=1, max_size=1).map(lambda r: (lambda n: [dict(r[0]) for _ in range(n)], True)),
        st.integers(1, 3).map(lambda extra: (lambda n: ["1+1="] * (n + extra), False)),  # more than asked
        st.integers(1, 3).map(lambda fewer: (lambda n: ["1+1="] * max(0, n - fewer), False)),
        bad_item.map(lambda b: (lambda n: ["1+1="] * (n - 1) + [b], False)),
        bad_item.map(lambda b: (lambda n: [b] * n, False)),
        st.just((lambda n: [{"prompt": "1+1="}] * (n - 1) + ["1+1="], False)),  # rows and strings mixed
        st.just((lambda n: [{"prompt": "1+1=", "a": 1}] * (n - 1) + [{"prompt": "1+1="}], False)),  # columns differ
        st.sampled_from(REWARD_ARGUMENTS).map(lambda c: (lambda n: [{"prompt": "1+1=", c: "x"}] * n, False)),
        st.just((lambda n: ("1+1=" for _ in range(n)), False)),  # a generator
        st.just((lambda n: "1+1=" * n, False)),  # a string
        st.just((lambda n: {i: "1+1=" for i in range(n)}, False)),
    )


@FUZZ
@given(_draws(), st.integers(2, 6))
def test_a_tasks_drawn_prompts_are_exactly_n_of_one_kind_or_named(draw, n):
    """Found: prompts that were ints crashed with a raw TypeError; more prompts than asked for trained silently."""
    drawn, valid = draw
    if valid:
        assert len(draw_prompts(_task(drawn), n, random.Random(0))) == n
    else:
        with pytest.raises(UserError, match=r"task 'mine': train_prompts\(\d+, rng\)"):
            draw_prompts(_task(drawn), n, random.Random(0))


@pytest.mark.parametrize("column", REWARD_ARGUMENTS)
def test_a_prompt_column_named_like_a_reward_argument_is_refused_at_load(tmp_path, column):
    """Found: a column `completions` reached the reward as a keyword and crashed at the first step."""
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", column: "2"}) + "\n")
    with pytest.raises(UserError, match=rf"p\.jsonl, line 1: column '{column}' has the name of a reward"):
        load_prompt_rows(path)


def test_a_folder_of_prompts_reads_its_train_split_and_is_never_called_a_preference_dataset(tmp_path, monkeypatch):
    folder = tmp_path / "myprompts"
    folder.mkdir()
    (folder / "train.jsonl").write_text(json.dumps({"prompt": "1+1="}) + "\n")
    assert load_prompt_rows(folder) == [{"prompt": "1+1="}]
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(Exception) as err:
        load_prompt_rows(empty)
    assert "preference" not in str(err.value) and "chosen" not in str(err.value)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConnectionError) as err:
        load_prompt_rows("someone/some-prompts")
    assert "prompt set 'someone/some-prompts'" in str(err.value) and "'prompt' field" in str(err.value)
    assert "preference" not in str(err.value)


# ----------------------------------------------------------------------------- one JSON rule for every format

pairs = st.lists(st.fixed_dictionaries({"prompt": prompt_text, "chosen": st.sampled_from([" a", " b c", " yes"]),
                                        "rejected": st.sampled_from([" no", " d", " e f"])}),
                 min_size=1, max_size=5).filter(lambda rows: all(r["chosen"] != r["rejected"] for r in rows))


@FUZZ
@given(pairs, st.booleans(), st.data())
def test_a_json_pair_file_follows_the_jsonl_rules(tmp_path, rows, indent, data):
    """Found: a .json file whose object wrote a key twice was accepted (the JSONL loader refused it)."""
    jsonl = tmp_path / "p.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    array = tmp_path / "p.json"
    array.write_text(json.dumps(rows, indent=2 if indent else None))
    lines_json = tmp_path / "lines.json"
    lines_json.write_text(jsonl.read_text())
    expected = load_preference_pairs(jsonl)
    assert load_preference_pairs(array) == expected == load_preference_pairs(lines_json)
    item = data.draw(st.integers(0, len(rows) - 1), label="item")
    key = data.draw(st.sampled_from(sorted(PAIR)), label="key")
    texts = [json.dumps(r) for r in rows]
    texts[item] = texts[item][:-1] + f", {json.dumps(key)}: \"again\"}}"
    array.write_text("[\n" + ",\n".join(texts) + "\n]")
    with pytest.raises(ValueError, match=rf"p\.json, item {item}: key '{key}' appears twice .* \(line {item + 2}\)"):
        load_preference_pairs(array)


def test_a_csv_header_naming_a_column_twice_is_refused(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("prompt,chosen,rejected,chosen\nHi, a, b, c\n")
    with pytest.raises(UserError, match=r"p\.csv, line 1: column 'chosen' appears twice in the header"):
        load_preference_pairs(path)


# ----------------------------------------------------------------------------- the headless executor's --out

NOTEBOOK = {"cells": [{"cell_type": "code", "metadata": {}, "source": "raise SystemExit('must never run')",
                       "outputs": [], "execution_count": None}],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


@pytest.mark.parametrize("where", ["own folder", "own folder, other spelling", "under a file", "a folder in the way",
                                   "a hard link to it"])
def test_the_headless_out_is_checked_before_any_notebook_runs(tmp_path, where, capsys):
    folder = tmp_path / "nbs"
    folder.mkdir()
    notebook = folder / "a.ipynb"
    notebook.write_text(json.dumps(NOTEBOOK))
    before = notebook.read_bytes()
    (tmp_path / "file").write_text("x")
    out = {"own folder": folder, "own folder, other spelling": tmp_path / "nbs" / ".." / "nbs",
           "under a file": tmp_path / "file" / "out", "a folder in the way": tmp_path / "out",
           "a hard link to it": tmp_path / "linked"}[where]
    if where == "a folder in the way":
        (out / "a.ipynb").mkdir(parents=True)
    if where == "a hard link to it":  # the notebook's own file under another name: writing there rewrites it
        out.mkdir()
        (out / "a.ipynb").hardlink_to(notebook)
    with pytest.raises(SystemExit) as exit_:
        headless_main([str(notebook), "--out", str(out)])
    assert exit_.value.code == 2 and "--out" in capsys.readouterr().err
    assert notebook.read_bytes() == before



def test_a_headless_out_under_a_tilde_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    (tmp_path / "a.ipynb").write_text(json.dumps(NOTEBOOK))
    (tmp_path / "home/a.ipynb").hardlink_to(tmp_path / "a.ipynb")  # refused, so no notebook runs
    with pytest.raises(SystemExit):
        headless_main(["a.ipynb", "--out", "~"])
    assert not (tmp_path / "~").exists()
