"""Tests for minirlhf.course.exercises: every checker accepts the library's function and the worked solution,
rejects each classic wrong version with that version's hint, and reports a stub as not implemented yet."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest

from minirlhf.course import exercises, quiz
from minirlhf.course.exercises import engine

IDS = exercises.list_exercises()
MISTAKES = [(e.id, m) for e in exercises.EXERCISES_LIST for m in e.mistakes]
NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"


def test_every_method_notebook_has_two_exercises_with_three_mistakes():
    for topic in ("policy-gradient", "ppo", "grpo", "dpo"):
        assert len(exercises.list_exercises(topic)) >= 2, topic
    for exercise in exercises.EXERCISES_LIST:
        assert len(exercise.mistakes) >= 3, exercise.id


def test_cases_list_their_inputs_in_the_order_of_the_stubs_parameters():
    """The student's function is called positionally, so each case must follow the stub's signature."""
    for exercise in exercises.EXERCISES_LIST:
        parameters = list(inspect.signature(exercise.solution_fn).parameters)
        for case in exercise.cases():
            assert list(case.inputs) == parameters, (exercise.id, case.name)


def test_the_engine_names_no_topic_and_each_topic_has_its_catalogue():
    source = Path(engine.__file__).read_text(encoding="utf-8")
    for word in (*quiz.TOPICS, *IDS, "losses", "toy"):
        assert word not in source, word
    for exercise in exercises.EXERCISES_LIST:
        assert exercise.topic in quiz.TOPICS, exercise.id


@pytest.mark.parametrize("exercise_id", IDS)
def test_checker_accepts_the_library_and_the_solution(exercise_id, capsys):
    exercise = exercises.EXERCISES[exercise_id]
    assert exercises.check_function(exercise_id, exercise.reference) is True
    assert exercises.check_function(exercise_id, exercise.solution_fn) is True
    assert f"passed {len(exercise.cases())} cases" in capsys.readouterr().out


@pytest.mark.parametrize("exercise_id, mistake", MISTAKES, ids=[f"{i}-{m.name}" for i, m in MISTAKES])
def test_checker_rejects_a_classic_mistake_with_its_hint(exercise_id, mistake, capsys):
    assert exercises.check_function(exercise_id, mistake.fn) is False
    out = capsys.readouterr().out
    assert f"✗ {exercise_id}: case '" in out and "  inputs:" in out
    assert engine.names_mistake(out, mistake), out


def test_a_stub_is_not_implemented_yet_and_strict_mode_raises(capsys, monkeypatch):
    def stub(logp, ref_logp):
        raise NotImplementedError

    assert exercises.check_function("k3-estimator", stub) is False
    out = capsys.readouterr().out
    assert "k3-estimator: not implemented yet" in out and "Traceback" not in out
    monkeypatch.setenv(exercises.STRICT_ENV, "1")
    with pytest.raises(exercises.ExerciseFailed, match="not implemented yet"):
        exercises.check_function("k3-estimator", stub)


def test_an_error_in_the_students_code_is_reported_with_the_case(capsys):
    assert exercises.check_function("gae", lambda rewards, values, mask, gamma, lam: rewards.nope) is False
    out = capsys.readouterr().out
    assert "failed: your function raised an error" in out and "AttributeError" in out and "gamma = 1.0" in out


def test_solution_prints_code_that_defines_the_stub(capsys):
    for exercise in exercises.EXERCISES_LIST:
        exercises.solution(exercise.id)
        namespace: dict = {}
        exec(capsys.readouterr().out, namespace)  # noqa: S102 -- our own solution's source
        assert exercises.check_function(exercise.id, namespace[exercise.stub]) is True
        capsys.readouterr()
    with pytest.raises(KeyError, match="valid ids"):
        exercises.solution("ppo")


def test_every_exercise_has_a_tagged_stub_and_fill_solutions_replaces_it():
    tagged = {}
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        nb = json.loads(path.read_text(encoding="utf-8"))
        for cell in nb["cells"]:
            for tag in cell["metadata"].get("tags", []):
                if tag.startswith(exercises.TAG_PREFIX):
                    tagged[tag[len(exercises.TAG_PREFIX):]] = (path, "".join(cell["source"]))
        exercises.fill_solutions(nb)
        for cell in nb["cells"]:
            if any(t.startswith(exercises.TAG_PREFIX) for t in cell["metadata"].get("tags", [])):
                assert "NotImplementedError" not in cell["source"]
    assert sorted(tagged) == sorted(IDS)
    for exercise_id, (path, source) in tagged.items():
        assert "raise NotImplementedError" in source, path.name
        assert f"def {exercises.EXERCISES[exercise_id].stub}(" in source, path.name


def test_run_all_shows_each_stub_not_implemented_and_never_the_answer(capsys):
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            tags = [t for t in cell["metadata"].get("tags", []) if t.startswith(exercises.TAG_PREFIX)]
            if not tags:
                continue
            exercise_id = tags[0][len(exercises.TAG_PREFIX):]
            namespace: dict = {}
            exec("".join(cell["source"]), namespace)  # noqa: S102 -- the notebook's own stub
            exec("".join(cells[i + 1]["source"]), namespace)  # noqa: S102 -- and its check cell
            out = capsys.readouterr().out
            assert f"{exercise_id}: not implemented yet" in out, (path.name, exercise_id)
            assert exercises.solution_source(exercise_id) not in out
