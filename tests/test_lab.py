"""The lab task family: its knobs (checked), its verifier (filler never changes correctness, every listed right answer
scores 1), its splits and SFT data, and the CLI name."""

import random
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minirlhf.models import SHIPPED
from minirlhf.tasks import lab, lab_chain
from minirlhf.tasks.registry import SFT_DATA, TASKS

problem_kinds = st.sampled_from(lab.KINDS)


@st.composite
def lab_problems(draw):
    kind = draw(problem_kinds)
    a, b = draw(st.sampled_from(lab.pairs(kind)))
    return lab.LabProblem(kind, a, b, draw(st.integers(0, lab.MAX_TOLERANCE)))


@given(lab_problems(), st.integers(0, 60), st.integers(0, 60), st.booleans())
def test_filler_never_changes_correctness(problem, before, after, right):
    answer = problem.answers[0] if right else problem.result + problem.tolerance + 1
    bare = lab.lab_reward(filler=True)([problem.prompt], [str(answer)])[0]
    padded = lab.lab_reward(filler=True)([problem.prompt], [lab.FILLER * before + str(answer) + lab.FILLER * after])[0]
    assert bare == padded == (1.0 if right else 0.0)


@given(lab_problems(), st.integers(1, 60))
def test_filler_scores_zero_when_the_knob_is_off(problem, n_filler):
    for completion in (lab.FILLER * n_filler + str(problem.result), str(problem.result) + lab.FILLER * n_filler):
        assert lab.lab_reward(filler=False)([problem.prompt], [completion]) == [0.0]
    assert lab.lab_reward(filler=False)([problem.prompt], [str(problem.result)]) == [1.0]


@given(lab_problems())
def test_every_listed_right_answer_scores_one_and_its_neighbours_zero(problem):
    reward = lab.lab_reward()
    answers = problem.answers
    assert reward([problem.prompt] * len(answers), [str(a) for a in answers]) == [1.0] * len(answers)
    assert len(answers) == 2 * problem.tolerance + 1 - max(0, problem.tolerance - problem.result)
    outside = [a for a in (min(answers) - 1, max(answers) + 1) if a >= 0]
    assert reward([problem.prompt] * len(outside), [str(a) for a in outside]) == [0.0] * len(outside)


@given(lab_problems())
def test_a_prompt_parses_back_to_its_problem(problem):
    assert lab.parse_prompt(problem.prompt) == problem


@pytest.mark.parametrize("completion", ["4.2", "4 2", "-42", "", ".", "42x", "٤٢", "42.7"])
def test_anything_but_filler_then_digits_scores_zero(completion):
    assert lab.lab_reward()(["17+25="], [completion]) == [0.0]


@pytest.mark.parametrize("knobs, named", [
    (dict(mix=(0.5, 0.5)), "mix"), (dict(mix=(0.5, 0.6, -0.1)), "mix"), (dict(mix=(0.2, 0.2, 0.2)), "mix"),
    (dict(mix=(float("nan"), 0.5, 0.5)), "mix"), (dict(filler=1), "filler"), (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(max_new_tokens=200), "max_new_tokens"), (dict(max_new_tokens=2.5), "max_new_tokens"),
    (dict(tolerance=-1), "tolerance"), (dict(tolerance=lab.MAX_TOLERANCE + 1), "tolerance"),
])
def test_bad_knobs_are_refused_naming_the_knob_and_value(knobs, named):
    ((_, value),) = knobs.items()
    with pytest.raises(ValueError, match=re.escape(f"LabConfig.{named}={value!r}")):
        lab.task(**knobs)


def test_mix_decides_the_kinds_of_the_prompts():
    task = lab.task(mix=(0.0, 1.0, 0.0))
    assert set(lab.kinds_of(task.train_prompts(200, random.Random(0)))) == {"medium"}
    kinds = lab.kinds_of(lab.task(mix=(0.5, 0.0, 0.5)).train_prompts(400, random.Random(0)))
    assert set(kinds) == {"easy", "hard"} and 150 < kinds.count("easy") < 250


def test_tolerance_reaches_the_prompts_and_the_cap_the_budget():
    task = lab.task(tolerance=2, max_new_tokens=17)
    assert task.max_new_tokens == 17
    assert all("~2=" in p for p in task.train_prompts(20, random.Random(1)))


def test_each_kind_holds_the_problems_its_docstring_names():
    assert all(10 <= a < 100 and b < 10 and a % 10 + b < 10 for a, b in lab.pairs("easy"))
    for kind in ("medium", "hard"):
        assert lab.pairs(kind) == [(a, b) for a in range(10, 100) for b in range(10, 100)]
    assert [lab.parse_prompt(f"{a}{lab.OPERATOR[k]}{b}=").kind for k in lab.KINDS for a, b in lab.pairs(k)[:50]] == [
        k for k in lab.KINDS for _ in range(50)]


def test_held_out_problems_never_reach_training():
    for kind in lab.KINDS:
        test = set(lab.problems(kind, "test"))
        assert test and not test & set(lab.problems(kind, "train"))
    held_out = {p.prompt for kind in lab.KINDS for p in lab.problems(kind, "test")}
    sft_prompts = {prompt.split("~")[0].rstrip("=") + "=" for prompt, _ in lab.sft_examples(3000)}
    rl_prompts = {p.split("~")[0].rstrip("=") + "=" for p in lab.task().train_prompts(3000, random.Random(0))}
    assert not (sft_prompts | rl_prompts) & held_out


def test_sft_demonstrations_are_right_and_spread_in_length():
    examples = lab.sft_examples(2000, seed=3)
    assert lab.lab_reward()([p for p, _ in examples], [c for _, c in examples]) == [1.0] * len(examples)
    fillers = [len(c) - len(c.rstrip(lab.FILLER)) for _, c in examples]
    assert min(fillers) == 0 and max(fillers) == lab.MAX_FILLER
    assert lab.sft_examples(50, seed=3) == examples[:50]


def test_the_lab_is_a_shipped_task_name():
    assert TASKS["lab"]().name == "lab" and SFT_DATA["lab"]().examples


@pytest.mark.skipif(not (SHIPPED["tiny-lab"] / "config.json").exists(), reason="run scripts/build_lab_model.py")
def test_the_lab_model_solves_easy_prompts_mostly_medium_ones_sometimes_hard_ones_never():
    """The difficulty mix the effects need, in the lab model's own terms (held-out, one answer each at temperature
    1), with its broad length distribution: filler runs of 0-30 tokens after the answer."""
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny-lab", device="cpu")
    metrics = lab.lab_metrics(model, tokenizer, lab.LabConfig())
    assert metrics["accuracy/easy"] >= 0.8 and 0.2 <= metrics["accuracy/medium"] <= 0.65, metrics
    assert metrics["accuracy/hard"] <= 0.05 and 15 <= metrics["response_length"] <= 22, metrics
    assert lab.lab_metrics(model, tokenizer, lab.LabConfig(tolerance=2))["accuracy/medium"] >= 0.2


@pytest.mark.skipif(not (SHIPPED["tiny-lab"] / "config.json").exists(), reason="run scripts/build_lab_model.py")
def test_grpo_runs_on_the_lab_from_the_command_line(tmp_path):
    from minirlhf.__main__ import main

    main(["grpo", "--task", "lab", "--model", "tiny-lab", "--device", "cpu", "--steps", "1", "--prompts-per-step", "2",
          "--group-size", "2", "--eval-every", "0", "--out-dir", str(tmp_path / "run"), "--progress", "false"])
    assert (tmp_path / "run" / "config.json").exists()


def characters(texts, add_special_tokens=False):
    """A tokenizer of one token per character, as the lab model's tokenizer is for digits and filler."""
    return {"input_ids": [list(text) for text in texts]}


chain_problems = st.sampled_from(lab_chain.problems("train") + lab_chain.problems("test"))


@given(chain_problems, st.integers(0, 40), st.integers(1, 40))
def test_the_truncation_effect_scores_only_finished_answers(problem, n_filler, cap):
    from minirlhf.lab.truncation import FinishedOnly

    completion = lab_chain.FILLER * n_filler + problem.work
    seen = FinishedOnly(lab_chain.chain_reward(), characters, cap)
    reward = seen([problem.prompt], [completion])
    assert reward == [0.0 if len(completion) >= cap else 1.0]  # right work, scored only when it ended in time
    assert seen.steps == [([len(completion)], [problem.steps >= lab_chain.LONG_STEPS], reward)]


@given(chain_problems, st.integers(0, 20))
def test_a_chain_is_right_only_with_its_last_total(problem, n_filler):
    reward = lab_chain.chain_reward()
    assert lab_chain.parse_prompt(problem.prompt) == problem and 1 <= problem.steps <= lab_chain.MAX_STEPS
    assert problem.totals[-1] < lab_chain.BOUND <= problem.totals[-1] + problem.b  # the last total below the bound
    assert reward([problem.prompt], [lab_chain.FILLER * n_filler + problem.work]) == [1.0]
    if problem.steps > 1:  # ended early: the work so far, its last total not the answer
        assert reward([problem.prompt], [problem.work.rsplit(lab_chain.SEPARATOR, 1)[0]]) == [0.0]


def test_chain_splits_are_disjoint_and_long_problems_need_long_answers():
    train, test = set(lab_chain.problems("train")), set(lab_chain.problems("test"))
    assert train.isdisjoint(test) and lab_chain.problems("test", long=True)
    long_work = min(len(p.work) for p in lab_chain.problems("train", long=True))
    short_work = max(len(p.work) for p in lab_chain.problems("train", long=False))
    assert long_work > short_work  # one character a token: the long answers are the long ones
    prompts = lab_chain.task(long_share=1.0).train_prompts(20, random.Random(0))
    assert all(lab_chain.long_prompts(prompts))


@pytest.mark.skipif(not (SHIPPED["tiny-lab-chain"] / "config.json").exists(),
                    reason="run scripts/build_lab_model.py --variant chain")
def test_the_chain_model_writes_long_work_that_a_cap_of_30_cuts():
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny-lab-chain", device="cpu")
    room = lab_chain.chain_metrics(model, tokenizer, samples=8)
    capped = lab_chain.chain_metrics(model, tokenizer, max_new_tokens=30, samples=8)
    assert 0.15 <= room["accuracy/long"] <= 0.6 and room["accuracy/short"] >= 0.4 and room["truncated"] == 0, room
    assert capped["truncated"] >= 0.1 and capped["accuracy/long"] < room["accuracy/long"], capped


@pytest.mark.skipif(not (SHIPPED["tiny-lab"] / "config.json").exists(), reason="run scripts/build_lab_model.py")
def test_held_out_metrics_read_only_the_kinds_asked_for():
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny-lab", device="cpu")
    metrics = lab.lab_metrics(model, tokenizer, lab.LabConfig(), per_kind=4, kinds=("medium",))
    assert [k for k in metrics if k.startswith("accuracy/")] == ["accuracy/medium"]
    with pytest.raises(ValueError, match=r"lab_metrics kinds=\['tricky'\]"):
        lab.lab_metrics(model, tokenizer, lab.LabConfig(), kinds=("tricky",))
