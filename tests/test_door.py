"""Every input is checked at the door (docs/door.md, "What is checked at the door"): one generated
(property or fuzz) test per boundary. Each draws bad values of its class, not only the known examples, and
checks that they are refused before the first step with an error naming the file, line, field and value."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from _checkpoints import restamp_checkpoint
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from minirlhf.__main__ import main
from minirlhf.course.headless import _out_clash, _positive_seconds
from minirlhf.data import check_example_lengths, check_prompt_room, load_preference_pairs
from minirlhf.errors import CheckpointDamaged, UserError, env_flag, is_user_error
from minirlhf.tasks import call_reward
from minirlhf.tasks.custom import load_prompt_rows
from minirlhf.trainers.grpo import GRPOConfig
from minirlhf.trainers.run.checkpoint import STATE_FILE, TRAINER_STATE_FILE, Checkpointer, list_checkpoints
from minirlhf.trainers.run.manifest import MANIFEST_FILE, read_manifest, write_manifest

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                                       max_size=3), max_leaves=6)
names = st.text(alphabet="abcdefgh_", min_size=1, max_size=6).filter(lambda n: n != "prompt")


def write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


# ----------------------------------------------------------------------------- prompt rows (JSONL)


@FUZZ
@given(st.lists(st.sets(names, max_size=3), min_size=1, max_size=6))
def test_prompt_rows_must_share_one_column_set_or_the_first_differing_line_is_named(column_sets):
    rows = [{"prompt": f"{i}+1=", **{name: i for name in columns}} for i, columns in enumerate(column_sets)]
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), "p.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())
        first_differing = next((i for i, c in enumerate(column_sets) if c != column_sets[0]), None)
        if first_differing is None:
            assert load_prompt_rows(path) == rows
        else:
            with pytest.raises(UserError, match=rf"p\.jsonl, line {first_differing + 1}: the columns differ"):
                load_prompt_rows(path)


@FUZZ
@given(st.integers(0, 3), st.binary(min_size=1, max_size=4).filter(lambda b: b"\n" not in b),
       st.sampled_from(["prompts", "pairs"]))
def test_bytes_that_are_not_utf8_name_the_file_and_line(line, junk, kind):
    assume(not _is_utf8(junk))
    rows = [{"prompt": f"{i}+1=", "chosen": " yes", "rejected": " no"} for i in range(4)]
    lines = [json.dumps(r).encode() for r in rows]
    lines[line] = lines[line][:-2] + junk + lines[line][-2:]
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), "rows.jsonl", b"\n".join(lines) + b"\n")
        with pytest.raises(ValueError, match=rf"rows\.jsonl, line {line + 1}: not UTF-8 text"):
            load_prompt_rows(path) if kind == "prompts" else load_preference_pairs(path)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@FUZZ
@given(st.integers(0xD800, 0xDFFF), st.integers(0, 2), st.sampled_from(["prompt", "chosen", "rejected"]),
       st.text(alphabet="ab +", max_size=5))
def test_a_lone_surrogate_names_the_file_line_and_field(surrogate, line, field, around):
    rows = [{"prompt": f"{i}+1=", "chosen": " yes", "rejected": " no"} for i in range(3)]
    rows[line][field] = around + chr(surrogate) + around
    with tempfile.TemporaryDirectory() as folder:
        path = write(Path(folder), "rows.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())  # \\udXXX
        with pytest.raises(ValueError, match=rf"rows\.jsonl, line {line + 1}: field '{field}' holds a lone surrogate"):
            load_preference_pairs(path)
        if field == "prompt":
            with pytest.raises(UserError, match=rf"rows\.jsonl, line {line + 1}: field 'prompt' holds a lone"):
                load_prompt_rows(path)


# ----------------------------------------------------------------------------- rows too long for the model


@FUZZ
@given(st.lists(st.integers(1, 40), min_size=1, max_size=5), st.integers(1, 30), st.integers(8, 60))
def test_every_prompt_and_example_is_checked_against_the_context_before_the_first_step(tiny, words, budget, context):
    _, tokenizer = tiny
    prompts = [" ".join(["seven"] * n) for n in words]
    lengths = [len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    sources = [f"p.jsonl, line {i + 1}" for i in range(len(prompts))]
    too_long = [i for i, n in enumerate(lengths) if n + budget > context]
    if too_long:
        with pytest.raises(UserError, match=rf"p\.jsonl, line {too_long[0] + 1}: field 'prompt' .* has "
                                            rf"{lengths[too_long[0]]} tokens"):
            check_prompt_room(tokenizer, prompts, budget, context, sources)
    else:
        check_prompt_room(tokenizer, prompts, budget, context, sources)
    examples = [(p, " 7") for p in prompts]
    completion = len(tokenizer(" 7", add_special_tokens=False)["input_ids"])
    too_long = [i for i, n in enumerate(lengths) if n + completion + 1 > context]
    if too_long:
        with pytest.raises(UserError, match=rf"line {too_long[0] + 1}: prompt \+ completion \+ EOS are"):
            check_example_lengths(tokenizer, examples, context, sources)
    else:
        check_example_lengths(tokenizer, examples, context, sources)


# ----------------------------------------------------------------------------- what a reward function returns


def _reward_behaviours():
    """Reward functions that break the contract in each way: (function, whether it may succeed)."""
    number = st.floats(allow_nan=True, allow_infinity=True) | st.integers(-10**40, 10**40) | st.none() | \
        st.text(max_size=3) | st.booleans()
    returns = st.one_of(
        st.lists(number, max_size=6).map(lambda values: lambda p, c, **k: values),
        st.lists(number, max_size=6).map(lambda values: lambda p, c, **k: (v for v in values)),  # a generator
        number.map(lambda value: lambda p, c, **k: value),  # a single value
        st.dictionaries(st.text(max_size=2), number, max_size=3).map(lambda d: lambda p, c, **k: d),
        st.integers(-3, 3).map(lambda code: lambda p, c, **k: sys.exit(code)),  # a reward that exits
        st.sampled_from(["append", "clear", "reverse", "column"]).map(_mutating),  # a reward with side effects
    )
    return returns


def _mutating(how: str):
    def reward(prompts, completions, **columns):
        if how == "append":
            completions.append("x")
        elif how == "clear":
            prompts.clear()
        elif how == "reverse":
            completions.reverse()
        else:
            columns["answer"][0] = "changed"
        return [1.0] * 4
    return reward


@FUZZ
@given(_reward_behaviours())
def test_a_reward_function_returns_one_finite_float_per_completion_or_is_named(reward):
    prompts, completions, answers = ["1+1="] * 4, ["2", "3", "2", " 2"], ["2"] * 4
    given_in = (list(prompts), list(completions), list(answers))
    try:
        rewards = call_reward(reward, prompts, completions, answer=answers)
    except ValueError as err:
        assert "reward function" in str(err) and is_user_error(err)
    else:
        assert rewards.shape == (4,) and torch.isfinite(rewards).all()
    assert (prompts, completions, answers) == given_in  # the run's own lists are never changed


# ----------------------------------------------------------------------------- checkpoint files


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run")
    saver = _checkpointer(out)
    saver.resume()
    saver.save(1, [{"step": 0, "loss": 1.0}])
    return list_checkpoints(out)[-1]


def _checkpointer(out: Path, **overrides) -> Checkpointer:
    config = GRPOConfig(out_dir=str(out), save_every=1, **overrides)
    torch.manual_seed(0)
    module = torch.nn.Linear(3, 2)
    return Checkpointer(config, torch.optim.AdamW(module.parameters()), {}, model=module)


def _resume_copy(checkpoint: Path, damage) -> None:
    from minirlhf.trainers.run.checkpoint import release_run_folder
    with tempfile.TemporaryDirectory() as folder:
        import shutil
        run = Path(folder) / "run"
        shutil.copytree(checkpoint.parent.parent, run, ignore=shutil.ignore_patterns(".run.lock"))
        damage(run / "checkpoints" / checkpoint.name)
        try:
            _checkpointer(run, resume=str(run / "checkpoints" / checkpoint.name)).resume()
        finally:
            release_run_folder(run)


STATE_TYPES = {  # what each field of state.json must hold, written out here independently of the library
    "step": lambda v: type(v) is int and v >= 0,
    "method": lambda v: isinstance(v, str),
    "config": lambda v: isinstance(v, dict),
    "history": lambda v: isinstance(v, list) and all(isinstance(r, dict) and type(r.get("step")) is int for r in v),
    "run_id": lambda v: v is None or isinstance(v, str),
}


@FUZZ
@given(st.sampled_from(sorted(STATE_TYPES)), json_values | st.lists(st.dictionaries(st.just("step"), json_values)))
def test_a_tampered_state_json_is_a_damaged_checkpoint_naming_the_file_and_field(checkpoint, field, value):
    """A value of the wrong type is a damaged checkpoint naming state.json and the field; a value of the right type
    resumes, or is refused as another run's (another method, run id, config or step): never a raw KeyError."""
    def damage(path: Path) -> None:
        state = json.loads((path / STATE_FILE).read_text())
        state[field] = value
        (path / STATE_FILE).write_text(json.dumps(state))
    try:
        _resume_copy(checkpoint, damage)
    except CheckpointDamaged as err:
        assert not STATE_TYPES[field](value) and f"{STATE_FILE}: field '{field}'" in str(err)
    except ValueError as err:
        assert STATE_TYPES[field](value) and is_user_error(err), err
    else:
        assert STATE_TYPES[field](value)


@FUZZ
@given(st.dictionaries(st.sampled_from(["optimizer", "scaler", "rng", "loop", "other"]),
                       st.none() | st.integers() | st.text(max_size=3) | st.dictionaries(st.text(max_size=3),
                                                                                          st.integers(), max_size=2),
                       max_size=5))
def test_a_tampered_trainer_state_is_a_damaged_checkpoint_naming_the_field(checkpoint, trainer_state):
    with pytest.raises(CheckpointDamaged, match=rf"{TRAINER_STATE_FILE}.*field '(optimizer|scaler|rng|loop)'"):
        _resume_copy(checkpoint, lambda path: (torch.save(trainer_state, path / TRAINER_STATE_FILE),
                                               restamp_checkpoint(path)))


@FUZZ
@given(st.sampled_from(["run_id", "method", "data", "fingerprints", "files", "rewinds"]), json_values)
def test_a_tampered_manifest_is_refused_naming_the_field(tmp_path, field, value):
    write_manifest(tmp_path, {"run_id": "a", "method": "GRPOConfig", "data": {}, "fingerprints": {},
                              "files": [MANIFEST_FILE], "rewinds": []} | {field: value})
    try:
        read_manifest(tmp_path)
    except CheckpointDamaged as err:
        assert f"{MANIFEST_FILE} is damaged: field '{field}'" in str(err)
    else:
        assert field != "files" or all(isinstance(n, str) and n and "/" not in n for n in value)


# ----------------------------------------------------------------------------- flags and environment variables


@FUZZ
@given(st.sampled_from(["--out-dir", "--resume", "--model", "--fork-to"]), st.text(alphabet=" \t\n", max_size=3))
def test_an_empty_path_flag_is_one_line_of_error(capsys, flag, blank):
    with pytest.raises(SystemExit) as exit_info:
        main(["grpo", flag, blank] + (["--resume", "x"] if flag == "--fork-to" else []))
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and err.startswith("python -m minirlhf grpo: error: ")
    assert "must be a path, got" in err or "no checkpoint at" in err


@FUZZ
@given(st.sampled_from(["--steps", "--lr", "--prompts-per-step", "--group-size", "--save-every", "--temperature"]),
       st.one_of(st.integers(-5, 0).map(str), st.sampled_from(["nan", "-inf", "inf"])))
def test_a_bad_flag_value_is_one_line_naming_the_field_and_value(capsys, flag, value):
    if flag == "--save-every" and value in ("0", "inf"):
        value = "-1"
    if flag in ("--steps", "--prompts-per-step", "--group-size", "--save-every") and not value.lstrip("-").isdigit():
        value = "-3"
    with pytest.raises(SystemExit) as exit_info:
        main(["grpo", f"{flag}={value}"])  # "--lr=-inf": argparse would read a bare "-inf" as a flag
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and flag[2:].replace("-", "_") in err and value in err


@FUZZ
# what an environment variable can hold: any text but NUL (and no lone surrogates)
@given(st.text(st.characters(exclude_characters="\x00", exclude_categories=("Cs",)), max_size=4))
def test_on_off_environment_variables_take_0_or_1_only(monkeypatch, value):
    monkeypatch.setenv("MINIRLHF_TEST_FLAG", value)
    if value in ("", "0", "1"):
        assert env_flag("MINIRLHF_TEST_FLAG") == (value == "1")
    else:
        with pytest.raises(UserError, match="environment variable MINIRLHF_TEST_FLAG="):
            env_flag("MINIRLHF_TEST_FLAG")


# ----------------------------------------------------------------------------- the headless executor


@FUZZ
@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-5, 5))
def test_headless_timeout_must_be_a_positive_number_of_seconds(seconds):
    import argparse
    if math.isfinite(seconds) and seconds > 0:
        assert _positive_seconds(str(seconds)) == float(seconds)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match="must be a number of seconds > 0"):
            _positive_seconds(str(seconds))


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y"])), min_size=1, max_size=4))
def test_headless_out_never_replaces_another_folders_notebook(placed):
    with tempfile.TemporaryDirectory() as folder:
        _check_out_clash(Path(folder), placed)


def _check_out_clash(tmp_path: Path, placed: list[tuple[str, str]]) -> None:
    import nbformat
    notebooks = []
    for folder, name in placed:
        path = tmp_path / folder / f"{name}.ipynb"
        path.parent.mkdir(exist_ok=True)
        nbformat.write(nbformat.v4.new_notebook(), path)
        notebooks.append(path)
    names = {}
    clash = any(names.setdefault(p.name, p) != p for p in notebooks)
    problem = _out_clash(notebooks, tmp_path / "out")
    assert (problem is not None) == clash
    if problem:
        assert "would both be written as" in problem
    # an executed copy from another folder in --out is refused, one from the same notebook is not
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    first = notebooks[0]
    copy = nbformat.v4.new_notebook(metadata={"minirlhf_executed_from": str(first.resolve())})
    nbformat.write(copy, out / first.name)
    assert _out_clash([first], out) is None
    other = tmp_path / "other" / first.name
    other.parent.mkdir(exist_ok=True)
    nbformat.write(nbformat.v4.new_notebook(), other)
    assert "exists (executed from" in _out_clash([other], out)
    nbformat.write(nbformat.v4.new_notebook(), out / first.name)  # a copy that records no source (older runs)
    assert _out_clash([other], out) is None
