"""A shipped task's knobs from the command line (`--task-option NAME=VALUE`, the lab's `LabConfig`): each parsed by
its field's type, a bad one refused naming the option and its value before anything is loaded, and the knobs
recorded with the run, so that a resume with other knobs is refused."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirlhf.checks import BOOL_WORDS
from minirlhf.errors import UserError
from minirlhf.models import SHIPPED
from minirlhf.tasks import lab
from minirlhf.tasks.registry import canonical_task_options, resolve_task, task_options
from minirlhf.trainers.grpo import GRPOConfig
from minirlhf.trainers.online import online_task
from minirlhf.trainers.run.manifest import check_same_data, data_identity

KNOBS = ("mix", "filler", "max_new_tokens", "tolerance")
ROOM = lab.LAB_CONTEXT - lab.MAX_PROMPT_TOKENS  # the largest cap LabConfig takes


@st.composite
def mixes(draw):
    weights = draw(st.lists(st.integers(0, 9), min_size=3, max_size=3).filter(any))
    return tuple(w / sum(weights) for w in weights)


def spelled(name: str, value, draw) -> str:
    """An option as a user may write it: a bool in any of its words and cases, numbers with spaces around."""
    if isinstance(value, bool):
        words = [word for word, meaning in BOOL_WORDS.items() if meaning is value]
        text = draw(st.sampled_from(words))
        text = text.upper() if draw(st.booleans()) else text
    elif isinstance(value, tuple):
        text = ",".join(repr(share) for share in value)
    else:
        text = draw(st.sampled_from(["{}", " {}", "{} "])).format(value)
    return f"{name}={text}"


@st.composite
def good_options(draw):
    values = {"mix": draw(mixes()), "filler": draw(st.booleans()), "max_new_tokens": draw(st.integers(1, ROOM)),
              "tolerance": draw(st.integers(0, lab.MAX_TOLERANCE))}
    names = draw(st.permutations(KNOBS))[:draw(st.integers(1, len(KNOBS)))]
    return [spelled(name, values[name], draw) for name in names], {name: values[name] for name in names}


@given(good_options())
def test_good_options_set_exactly_their_knobs(case):
    options, values = case
    config = lab.LabConfig(**values)
    assert task_options("lab", options) == values
    task = resolve_task(GRPOConfig(task="lab", task_option=options))
    assert task.max_new_tokens == config.max_new_tokens
    assert lab.LabConfig(**task_options("lab", task.options)) == config  # the task's own record rebuilds it
    canonical = canonical_task_options("lab", options)
    assert canonical == (list(config.options()) or None)
    assert canonical_task_options("lab", canonical) == canonical  # one spelling, stable


not_a_number = st.text(alphabet="abcxyz_-+#", min_size=1).filter(lambda text: text.strip("+-") != "")
bad_values = {
    "mix": st.one_of(
        st.lists(st.floats(0, 1), min_size=1, max_size=5).filter(lambda shares: len(shares) != 3)
        .map(lambda shares: ",".join(map(repr, shares))),
        st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1))
        .filter(lambda shares: abs(sum(shares) - 1) > 1e-3).map(lambda shares: ",".join(map(repr, shares))),
        st.tuples(st.floats(-5, -0.01), st.floats(0, 3)).map(lambda s: f"{s[0]!r},{s[1]!r},{1 - s[0] - s[1]!r}"),
        st.sampled_from(["nan,0.5,0.5", "inf,0,0", "0.5,0.5,x", "", "0.5;0.5;0"]),
        not_a_number,
    ),
    "filler": st.text(max_size=6).filter(lambda text: text.strip().lower() not in BOOL_WORDS),
    "max_new_tokens": st.one_of(st.integers(max_value=0), st.integers(min_value=ROOM + 1), st.floats(0.1, 50).filter(
        lambda x: not x.is_integer()), not_a_number).map(str),
    "tolerance": st.one_of(st.integers(max_value=-1), st.integers(min_value=lab.MAX_TOLERANCE + 1),
                           st.sampled_from(["1.5", "one", ""]), not_a_number).map(str),
}


@settings(suppress_health_check=[HealthCheck.too_slow])  # one strategy per knob: the first draws build them all
@given(st.sampled_from(KNOBS).flatmap(lambda name: st.tuples(st.just(name), bad_values[name])))
def test_a_bad_value_is_refused_naming_the_option_and_its_value(case):
    name, text = case
    option = f"{name}={text}"
    with pytest.raises(ValueError, match="^" + re.escape(f"--task-option {option!r}")):
        GRPOConfig(task="lab", task_option=["tolerance=1", option])


@given(st.text(min_size=1, max_size=12).filter(lambda text: text.partition("=")[0] not in KNOBS))
def test_an_unknown_knob_or_a_missing_value_is_refused_listing_the_knobs(option):
    with pytest.raises(ValueError, match=re.escape(f"--task-option {option!r} must be NAME=VALUE")) as caught:
        task_options("lab", [option])
    assert all(name in str(caught.value) for name in KNOBS)


def test_a_knob_given_twice_is_refused():
    with pytest.raises(ValueError, match="tolerance is given twice"):
        task_options("lab", ["tolerance=1", "mix=1,0,0", "tolerance=1"])


@pytest.mark.parametrize("fields, named", [
    (dict(task="arithmetic"), "task 'arithmetic' takes no options"), (dict(), "task 'arithmetic' takes no options"),
    (dict(prompts="p.jsonl", reward=["r.py:f"]), "--prompts has none"),
])
def test_only_a_task_with_knobs_takes_options(fields, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        GRPOConfig(task_option=["tolerance=1"], **fields)


def test_a_bad_option_on_the_command_line_stops_before_any_model_is_loaded(monkeypatch, capsys):
    from minirlhf.__main__ import main

    monkeypatch.setattr("minirlhf.trainers.online.setup_policy", lambda *args: pytest.fail("a model was loaded"))
    with pytest.raises(SystemExit) as exit_:
        main(["grpo", "--task", "lab", "--task-option", "mix=0.5,0.5", "--device", "cpu"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == ("python -m minirlhf grpo: error: --task-option 'mix=0.5,0.5': "
                                               "LabConfig.mix=(0.5, 0.5) must be three shares (easy, medium, hard)")


def _identity(**fields) -> dict:
    return json.loads(json.dumps(data_identity(GRPOConfig(task="lab", **fields).to_dict())))  # as run.json keeps it


def test_the_knobs_are_part_of_what_a_run_learns_from():
    recorded = {"data": _identity(task_option=["mix=0,1,0", "max_new_tokens=24"]), "fingerprints": {}}
    same = GRPOConfig(task="lab", task_option=["max_new_tokens=24", "mix=0.0,1.0,0.0", "tolerance=0"])
    check_same_data(recorded, same.to_dict(), "run")  # another spelling, a knob at its default: the same knobs
    for other in (["mix=0,1,0"], ["mix=0,1,0", "max_new_tokens=25"], None):
        with pytest.raises(UserError, match="the run learns from other data .task_option: "):
            check_same_data(recorded, GRPOConfig(task="lab", task_option=other).to_dict(), "run")
    assert _identity(task_option=["max_new_tokens=40"]) == _identity() and "task_option" not in _identity()


def test_a_lab_task_given_in_python_records_its_knobs():
    config = online_task(lab.task(mix=(0.0, 1.0, 0.0), tolerance=2), GRPOConfig())[1]
    assert (config.task, config.task_option) == ("lab", ["mix=0.0,1.0,0.0", "tolerance=2"])
    assert online_task(lab.task(), GRPOConfig())[1].task_option is None
    with pytest.raises(ValueError, match=re.escape("the task 'lab' given has the knobs ['tolerance=2']")):
        online_task(lab.task(tolerance=2), GRPOConfig(task="lab", task_option=["tolerance=1"]))


@pytest.mark.skipif(not (SHIPPED["tiny-lab"] / "config.json").exists(), reason="run scripts/build_lab_model.py")
def test_a_resume_with_other_knobs_is_refused(tmp_path, capsys):
    from minirlhf.__main__ import main

    out = tmp_path / "run"
    run = ["--model", "tiny-lab", "--device", "cpu", "--prompts-per-step", "2", "--group-size", "2", "--eval-every",
           "0", "--save-every", "1", "--progress", "false"]
    main(["grpo", "--task", "lab", "--task-option", "max_new_tokens=6", "mix=1,0,0", "--steps", "1", *run,
          "--out-dir", str(out)])
    assert json.loads((out / "config.json").read_text())["task_option"] == ["max_new_tokens=6", "mix=1,0,0"]
    capsys.readouterr()
    with pytest.raises(SystemExit):
        main(["grpo", "--resume", str(out), "--steps", "2", "--task-option", "max_new_tokens=7", "mix=1,0,0"])
    assert "task_option: ['mix=1.0,0.0,0.0', 'max_new_tokens=6'] -> ['mix=1.0,0.0,0.0', 'max_new_tokens=7']" in (
        capsys.readouterr().err)
