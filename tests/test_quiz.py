"""Tests for minirlhf.course.quiz: the question bank file, registry contents, letter checking, the ask() widget
and numeric exercises."""

from __future__ import annotations

import ast
import json
import math
import random
import re
from collections import Counter
from pathlib import Path

import pytest
import torch

from minirlhf import losses
from minirlhf.course import quiz, toy


def test_lecture_quizzes_present():
    for quiz_id, answer in (("dpo-collapse", "D"), ("ppo-eps-inf", "C"), ("ppo-vs-grpo", "A")):
        q = quiz.QUESTIONS[quiz_id]
        assert q.answer == answer and q.source == "lecture"


def test_registry_is_well_formed():
    assert len(quiz.QUESTIONS) == len(quiz.QUESTIONS_LIST)  # ids are unique
    for q in quiz.QUESTIONS_LIST:
        assert q.topic in quiz.TOPICS
        assert q.answer in q.options and len(q.options) >= 3
        assert list(q.options) == sorted(q.options)
        assert len(q.explanation) > 80
    for topic in quiz.TOPICS:
        new = [quiz_id for quiz_id in quiz.list_quizzes(topic) if quiz.QUESTIONS[quiz_id].source == "new"]
        assert len(new) >= 2, topic


@pytest.mark.parametrize("field, value, message", [
    ("answer", "E", "field 'answer' is 'E'"),
    ("topic", "rlhf", "field 'topic' is 'rlhf'"),
    ("source", "slides", "field 'source' is 'slides'"),
    ("options", None, "field 'answer' is 'B', not one of the letters of 'options'"),
])
def test_question_bank_errors_name_file_question_and_field(tmp_path, field, value, message):
    rows = json.loads(quiz.QUESTIONS_FILE.read_text(encoding="utf-8"))
    assert quiz.load_questions(quiz.QUESTIONS_FILE) == quiz.QUESTIONS_LIST
    rows[1][field] = value
    path = tmp_path / "questions.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(ValueError, match=f"questions.json: question 1 \\('notation-ref-vs-old'\\): {message}"):
        quiz.load_questions(path)


def test_question_bank_rejects_missing_fields_repeated_ids_and_bad_json(tmp_path):
    rows = json.loads(quiz.QUESTIONS_FILE.read_text(encoding="utf-8"))
    path = tmp_path / "questions.json"
    path.write_text(json.dumps([rows[0], {k: v for k, v in rows[1].items() if k != "explanation"}]))
    with pytest.raises(ValueError, match="question 1 .* expected exactly the fields"):
        quiz.load_questions(path)
    path.write_text(json.dumps([rows[0], rows[0]]))
    with pytest.raises(ValueError, match="question 1 \\('notation-ratio'\\): field 'id' repeats"):
        quiz.load_questions(path)
    path.write_text(json.dumps(rows)[:-2])
    with pytest.raises(ValueError, match="questions.json: not valid JSON at line 1"):
        quiz.load_questions(path)


def test_list_quizzes_filters_by_topic():
    assert quiz.list_quizzes() == [q.id for q in quiz.QUESTIONS_LIST]
    assert "dpo-collapse" in quiz.list_quizzes("dpo")
    assert "dpo-collapse" not in quiz.list_quizzes("ppo")
    with pytest.raises(ValueError, match="valid topics"):
        quiz.list_quizzes("rlhf")


@pytest.mark.parametrize("answer", ["D", "d", " d ", "D)", "d) mostly decreased the loser"])
def test_check_accepts_right_letter_in_any_form(answer, capsys):
    assert quiz.check("dpo-collapse", answer) is True
    assert capsys.readouterr().out.startswith("Correct!")


@pytest.mark.parametrize("answer", ["A", "b", "c", "Z", ""])
def test_check_rejects_wrong_letters(answer, capsys):
    assert quiz.check("dpo-collapse", answer) is False
    out = capsys.readouterr().out
    assert out.startswith("Not quite")


def test_wrong_answer_feedback_explains():
    ok, text = quiz.feedback("ppo-eps-inf", "a")
    assert not ok
    assert "the answer is C)" in text and quiz.QUESTIONS["ppo-eps-inf"].explanation in text


def test_unknown_id_names_it_and_lists_valid_ids():
    with pytest.raises(KeyError, match="no-such-quiz") as info:
        quiz.check("no-such-quiz", "A")
    assert "dpo-collapse" in str(info.value)
    with pytest.raises(KeyError, match="valid ids"):
        quiz.check_number("no-such-exercise", 1.0)


def test_format_question_lists_options():
    text = quiz.format_question("ppo-vs-grpo")
    assert text.splitlines()[0] == quiz.QUESTIONS["ppo-vs-grpo"].question
    assert text.splitlines()[1].strip().startswith("A) PPO uses a learned value function")


# ----------------------------------------------------------------------------- ask() widget


def test_ask_widget_feedback_on_click():
    box = quiz.ask("ppo-vs-grpo")
    assert box.feedback.value == ""
    box.button.click()
    assert box.feedback.value == "Pick an option first."
    box.choices.value = "B"
    box.button.click()
    assert "Not quite" in box.feedback.value and "Correct" not in box.feedback.value
    box.choices.value = "A"
    box.button.click()
    assert "Correct!" in box.feedback.value
    assert quiz.QUESTIONS["ppo-vs-grpo"].explanation in box.feedback.value


def test_ask_widget_shows_all_options():
    box = quiz.ask("dpo-collapse")
    assert [value for _, value in box.choices.options] == ["A", "B", "C", "D"]
    assert box.choices.value is None


# ----------------------------------------------------------------------------- numeric exercises


def test_ppo_objective_exercise(capsys):
    assert quiz.check_number("ppo-objective", 1.2)  # lecture table: r = 1.5, Â = +1, ε = 0.2
    assert not quiz.check_number("ppo-objective", 1.5)
    assert quiz.check_number("ppo-objective", -0.8, r=0.5, advantage=-1.0)
    assert quiz.check_number("ppo-objective", -1.5, r=1.5, advantage=-1.0)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Correct!") and out[1].startswith("Not quite")


def test_tolerance():
    assert quiz.check_number("ppo-objective", 1.205)
    assert not quiz.check_number("ppo-objective", 1.25)
    assert quiz.check_number("ppo-objective", 1.25, tol=0.1)


def test_dpo_exercises():
    assert quiz.solution("dpo-margin") == pytest.approx(0.1 * 2.1)
    assert quiz.solution("dpo-margin", beta=0.5) == pytest.approx(1.05)
    assert quiz.check_number("dpo-loss", -math.log(1 / (1 + math.exp(-0.21))))


def test_grpo_advantage_exercise_matches_hand_computation():
    rewards = [1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0]  # two of G = 8 correct
    mean = 0.25
    sample_std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / 7)
    assert quiz.solution("grpo-advantage", rewards=rewards, i=0) == pytest.approx((1 - mean) / sample_std)
    assert quiz.solution("grpo-advantage", rewards=rewards, i=1) == pytest.approx(-mean / sample_std)
    assert quiz.check_number("grpo-advantage", 1.62)
    expected = float(losses.grpo_advantages(torch.tensor([3.0, 1.0, 2.0]), 3, scale="none")[0])
    assert quiz.solution("grpo-advantage", rewards=[3.0, 1.0, 2.0], scale="none") == pytest.approx(expected)


def test_every_exercise_solves_and_describes_itself():
    for exercise_id in quiz.list_exercises():
        value = quiz.solution(exercise_id)
        assert math.isfinite(value)
        assert quiz.check_number(exercise_id, value)
        assert "{" not in quiz.describe(exercise_id)
    assert quiz.list_exercises("grpo") == ["grpo-advantage", "kl-k3", "leave-one-out-scale", "k3-gradient",
                                           "seq-mean-token-weight"]


def test_approx_kl_expectation_is_the_kl_from_the_sampling_policy():
    p_old, p_new = (0.6, 0.3, 0.1), (0.2, 0.5, 0.3)
    value = quiz.solution("approx-kl-expectation", p_old=p_old, p_new=p_new)
    assert value == pytest.approx(float(toy.exact_kl(p_old, p_new)), rel=1e-12)  # KL(p_θold ‖ p_θ) ...
    assert value != pytest.approx(float(toy.exact_kl(p_new, p_old)), rel=1e-2)  # ... not KL(p_θ ‖ p_θold)
    with pytest.raises(ValueError, match="p_new must be"):
        quiz.solution("approx-kl-expectation", p_new=(0.5, 0.6, 0.1))
    with pytest.raises(ValueError, match="p_old must be"):
        quiz.solution("approx-kl-expectation", p_old=(0.9, 0.1, 0.0))


def test_approx_kl_worked_solution_measures_the_spread_it_names():
    # k3's zero-mean (r - 1) term does not always lower the spread: here k3's std under p_θold exceeds k1's
    p_old, p_new = (0.9, 0.1), (0.1, 0.9)
    ratios = [q / p for p, q in zip(p_old, p_new)]

    def std(values):
        mean = sum(p * v for p, v in zip(p_old, values))
        return math.sqrt(sum(p * (v - mean) ** 2 for p, v in zip(p_old, values)))

    k1_std, k3_std = std([-math.log(r) for r in ratios]), std([r - 1 - math.log(r) for r in ratios])
    assert k3_std > k1_std
    worked = quiz.worked_solution("approx-kl-expectation", p_old=p_old, p_new=p_new)
    assert "lowers the spread" not in worked
    assert f"{k3_std:.4f}" in worked and f"{k1_std:.4f}" in worked


def test_a_refused_answer_rounded_too_far_is_told_to_give_more_digits(capsys):
    # 0.3961 nats rounded to 0.40 is outside approx-kl-expectation's tol 1e-3; the reverse KL, 0.3653, is wrong
    assert quiz.check_number("approx-kl-expectation", 0.40) is False
    assert "if you rounded, give 4 significant digits" in capsys.readouterr().out
    assert quiz.check_number("approx-kl-expectation", 0.3653) is False
    assert "rounded" not in capsys.readouterr().out
    assert quiz.check_number("approx-kl-expectation", 0.396) is True


def test_check_number_asks_for_the_digits_of_the_tolerance_it_checks_with(capsys):
    # ppo-objective's own tol 1e-2 asks for 3 digits; checked at 1e-5, 1.2001 needs 6, and only 6 may be named
    assert quiz.check_number("ppo-objective", 1.2001, tol=1e-5) is False
    out = capsys.readouterr().out
    assert "give 6 significant digits" in out and re.findall(r"(\d+) significant digits", out) == ["6"]
    for tol in (0.0, -1e-3, float("nan"), float("inf")):  # 0: no rounding is enough; was "math domain error"
        with pytest.raises(ValueError, match=r"tol must be > 0"):
            quiz.check_number("ppo-objective", 1.2001, tol=tol)
    # the verdict reads "<question> = <value>", not "... Give at least 3 significant digits. = 1.2000"
    assert quiz.check_number("ppo-objective", 1.2) is True
    assert "digits" not in capsys.readouterr().out


@pytest.mark.parametrize("exercise", sorted(quiz.EXERCISES))
def test_every_exercise_asks_for_digits_enough_that_any_rounding_to_them_is_accepted(exercise):
    tol = quiz.EXERCISES[exercise].tol
    digits = quiz.significant_digits(tol)
    assert f"Give at least {digits} significant digits." in quiz.describe(exercise)

    def rounded(value: float, digits: int) -> float:
        scale = 10 ** (math.floor(math.log10(abs(value))) + 1 - digits)
        return round(value / scale) * scale

    # enough: the worst cases round by about half a unit of the last digit, at a leading digit of 1
    for value in (quiz.solution(exercise), 1.0049999, 0.10049999, 9.99):
        assert math.isclose(rounded(value, digits), value, rel_tol=tol, abs_tol=tol)
    # and no more than needed: one digit fewer can leave the tolerance
    worst = 1 + 0.49 * 10 ** (2 - digits)
    assert not math.isclose(rounded(worst, digits - 1), worst, rel_tol=tol, abs_tol=tol)


@pytest.mark.parametrize("tol", [0.5, 0.2, 0.1, 0.05, 0.03, 1e-2, 5e-3, 2e-3, 1e-3, 5e-4, 2.5e-4, 1e-5])
def test_significant_digits_are_the_fewest_whose_worst_rounding_meets_the_tolerance(tol):
    # check_number(..., tol=) names them for any tolerance, not only the exercises' 1e-2 and 1e-3
    def worst(digits: int) -> float:  # relative error of rounding 1.0499.. (or 1.05) to `digits` digits
        return 0.5 * 10.0 ** (1 - digits)

    n = quiz.significant_digits(tol)
    assert worst(n) <= tol and (n == 1 or worst(n - 1) > tol), n


def test_gspo_token_weight_is_the_same_for_every_token_of_an_answer():
    log_ratios = (0.3, -0.1, 0.2, 0.0)
    weights = {quiz.solution("gspo-token-weight", log_ratios=log_ratios, t=t) for t in range(len(log_ratios))}
    assert len({round(w, 12) for w in weights}) == 1  # one weight per answer, -s_i Â_i / (B |y_i|)
    steps = quiz.EXERCISES["gspo-token-weight"].steps(**{**quiz.EXERCISES["gspo-token-weight"].defaults})
    assert len(set(steps["grpo"].strip("()").split(", "))) > 1  # GRPO's token ratios weigh the tokens apart
    with pytest.raises(ValueError, match="t must index"):
        quiz.solution("gspo-token-weight", t=4)


def test_exercise_rejects_unknown_parameters():
    with pytest.raises(TypeError, match="takes"):
        quiz.check_number("ppo-objective", 1.2, ratio=1.5)


def test_grpo_all_same_explanation_matches_the_code():
    import inspect

    eps = inspect.signature(losses.grpo_advantages).parameters["eps"].default
    explanation = quiz.QUESTIONS["grpo-all-same"].explanation
    import re

    assert float(re.search(r"eps = ([0-9.e-]+)", explanation).group(1)) == eps  # the threshold the code uses
    assert "added to the std" not in explanation
    assert (losses.grpo_advantages(torch.tensor([1.0, 1.0 + eps / 10, 1.0, 1.0]), 4) == 0).all()


# ---------------------------------------------------------------------------------------------------------
# The bank as a whole: answerable by understanding only, not by test-taking habits
# ---------------------------------------------------------------------------------------------------------

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
MAX_SHARE = 0.35


def test_no_letter_is_the_answer_of_more_than_35_percent():
    counts = Counter(q.answer for q in quiz.QUESTIONS_LIST)
    letter, count = counts.most_common(1)[0]
    assert count <= MAX_SHARE * len(quiz.QUESTIONS_LIST), f"{letter} answers {count} of {len(quiz.QUESTIONS_LIST)}"


def test_the_answer_is_the_longest_option_in_at_most_35_percent():
    longest = [q.id for q in quiz.QUESTIONS_LIST
               if len(q.options[q.answer]) == max(len(text) for text in q.options.values())]
    assert len(longest) <= MAX_SHARE * len(quiz.QUESTIONS_LIST), longest


def test_options_are_shuffled_with_a_fixed_seed_and_keep_their_answer():
    rows = {row["id"]: row for row in json.loads(quiz.QUESTIONS_FILE.read_text(encoding="utf-8"))}
    assert quiz.load_questions() == quiz.QUESTIONS_LIST  # the same letters on every load
    moved = 0
    for q in quiz.QUESTIONS_LIST:
        row = rows[q.id]
        assert sorted(q.options.values()) == sorted(row["options"].values())
        assert q.options[q.answer] == row["options"][row["answer"]]
        moved += list(q.options.values()) != [row["options"][k] for k in sorted(row["options"])]
        if q.source == "lecture":  # the slides' letters
            assert q.options == row["options"] and q.answer == row["answer"]
    assert moved > len(quiz.QUESTIONS_LIST) / 2


def test_a_shuffled_questions_explanation_cites_no_option_letter():
    """The letters of a shuffled question are not the file's: "(C)" in its explanation would point at another option
    than the author meant (toolbox-tool-arms's "(C)" named the right answer once its options moved)."""
    letters = re.compile(r"\([A-E](?:, [A-E])*\)|\boption [A-E]\b")
    cited = {q.id: letters.findall(q.explanation) for q in quiz.QUESTIONS_LIST if q.source != "lecture"}
    assert {qid: found for qid, found in cited.items() if found} == {}


def _asked_in_notebooks() -> Counter:
    asked = Counter()
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "code":
                source = "".join(cell["source"])
                asked.update(set(re.findall(r'quiz\.(?:ask|format_question)\("([a-z0-9-]+)"\)', source)))
    return asked


def test_every_question_is_asked_in_exactly_one_notebook_cell():
    asked = _asked_in_notebooks()
    assert {quiz_id: n for quiz_id, n in asked.items() if n > 1} == {}
    assert sorted(asked) == sorted(quiz.QUESTIONS)


def test_no_notebook_prefills_an_answer_letter():
    """The "No widgets?" line and the plain-code example show no letter, so none of them can be right by chance."""
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            letters = re.findall(r'quiz\.check\("[a-z0-9-]+", "([A-Za-z])"\)', source)
            assert not letters, f"{path.name}: {source}"


def test_new_conceptual_questions_are_in_the_bank():
    for quiz_id, topic in (("dpo-z-cancels", "dpo"), ("grpo-k3-gradient", "grpo"), ("ppo-critic-bias", "ppo"),
                           ("grpo-vs-rloo", "grpo")):
        assert quiz.QUESTIONS[quiz_id].topic == topic
    assert "KL(p_ref ‖ p_θ)" in quiz.QUESTIONS["grpo-k3-gradient"].options[quiz.QUESTIONS["grpo-k3-gradient"].answer]


# ----------------------------------------------------------------------------- worked solutions

# For every numeric exercise, parameter sets besides its defaults: both signs, ties, edges (a clipped ratio exactly at
# 1 + ε, a constant group, p_θ = p_ref, a strongly negative DPO margin), so a worked solution cannot match the
# library only at the numbers the notebook asks about.
WORKED_CASES = {
    "optimal-policy": [{"beta": 0.1, "i": 4}, {"beta": 2.0, "i": 2},
                       {"p_ref": (0.5, 0.5), "rewards": (0.0, 3.0), "beta": 1.0, "i": 1}],
    "rloo-advantage": [{"rewards": (1.0, 0.0, 1.0, 1.0), "i": 1}, {"rewards": (0.3, -2.0, 5.0), "i": 2},
                       {"rewards": (1.0, 1.0), "i": 0}],
    "ppo-objective": [{"r": 0.7, "advantage": -2.0, "eps": 0.2}, {"r": 0.5, "advantage": 1.0},
                      {"r": 1.5, "advantage": -1.0}, {"r": 1.2, "advantage": 1.0}, {"r": 0.9, "eps": 0.05},
                      {"r": 1.0, "advantage": 0.0}],
    "approx-kl-expectation": [{"p_new": (0.6, 0.3, 0.1)}, {"p_old": (0.5, 0.5), "p_new": (0.9, 0.1)},
                              {"p_old": (0.25, 0.25, 0.25, 0.25), "p_new": (0.7, 0.1, 0.1, 0.1)},
                              {"p_old": (0.98, 0.01, 0.01), "p_new": (0.01, 0.01, 0.98)}],
    "gae-advantage": [{"gamma": 1.0, "lam": 1.0, "t": 0}, {"gamma": 0.9, "lam": 0.95, "t": 3},
                      {"gamma": 0.99, "lam": 0.5, "t": 7}, {"gamma": 0.5, "lam": 0.0, "t": 0}],
    "grpo-advantage": [{"i": 1}, {"rewards": (3.0, 1.0, 2.0), "scale": "none"}, {"rewards": (1.0, 1.0, 1.0, 1.0)},
                       {"rewards": (0.2, 0.9, 0.4), "i": 2, "scale": "batch"}],
    "kl-k3": [{"logp": -2.0, "ref_logp": -0.5}, {"logp": -1.0, "ref_logp": -1.0}, {"logp": -0.1, "ref_logp": -7.0}],
    "all-equal-groups": [{"p": 0.5, "G": 2}, {"p": 0.5, "G": 8}, {"p": 0.3, "G": 3}, {"p": 0.99, "G": 16},
                         {"p": 0.0, "G": 4}, {"p": 1.0, "G": 2}],
    "gspo-token-weight": [{"t": 0}, {"t": 3}, {"advantage": -2.0}, {"advantage": 0.0},
                          {"eps": 3e-4, "eps_high": 4e-4}, {"advantage": -1.0, "eps": 3e-4, "eps_high": 4e-4},
                          {"log_ratios": (-0.5, -0.3), "advantage": -1.0}, {"log_ratios": (-0.5, -0.3), "t": 0},
                          {"log_ratios": (0.0,), "B": 1, "t": 0}, {"log_ratios": (0.01,) * 32, "B": 16, "t": 31}],
    "dpo-margin": [{"beta": 0.5}, {"beta": 0.3, "chosen_logratio": -1.0, "rejected_logratio": 1.0}],
    "dpo-loss": [{"beta": 0.5}, {"beta": 0.3, "chosen_logratio": -1.0, "rejected_logratio": 1.0},
                 {"beta": 1.0, "chosen_logratio": -40.0, "rejected_logratio": 0.0}],
    "leave-one-out-scale": [{"G": 2}, {"G": 3}, {"G": 16}],
    "k3-gradient": [{"j": 2}, {"logits": (0.0, 0.0), "p_ref": (0.5, 0.5), "j": 1},
                    {"logits": (3.0, -2.0, 0.5, 0.0), "p_ref": (0.1, 0.6, 0.2, 0.1), "j": 1}],
    "seq-mean-token-weight": [{"advantage": -2.0}, {"length": 1, "B": 1}, {"advantage": 0.7, "length": 32, "B": 16}],
    "label-smoothing-optimum": [{"eps": 0.5}, {"beta": 0.1, "eps": 0.01}, {"beta": 2.0, "eps": 0.3}],
    "pass-at-k": [{"n": 10, "c": 1, "k": 10}, {"n": 5, "c": 0, "k": 2}, {"n": 200, "c": 7, "k": 50}, {"k": 1}],
    "top-p-weight": [{"token": 0}, {"top_p": 0.45, "token": 0}, {"top_p": 0.75, "token": 1},
                     {"probs": (0.05, 0.6, 0.25, 0.1), "top_p": 0.9, "token": 3}, {"top_p": 0.99, "token": 3}],
    "best-of-n-kl-exact": [{"n": 1}, {"n": 16}, {"probs": (0.25, 0.25, 0.25, 0.25), "n": 2},
                           {"probs": (0.9, 0.1), "n": 3}, {"probs": (0.05, 0.15, 0.3, 0.5), "n": 64}],
    "mcnemar-p": [{"only_a": 0, "only_b": 0}, {"only_a": 5, "only_b": 5}, {"only_a": 0, "only_b": 9},
                  {"only_a": 40, "only_b": 21}],
}


def test_top_p_weight_refuses_a_top_p_on_a_mass_boundary_and_agrees_by_hand_off_it():
    rng = random.Random(0)
    for _ in range(200):
        weights = [rng.randint(1, 20) for _ in range(rng.randint(2, 6))]
        probs = tuple(w / sum(weights) for w in weights)
        ranked = sorted(range(len(probs)), key=lambda j: -probs[j])
        k = rng.randint(1, len(probs) - 1)
        boundary = sum(probs[j] for j in ranked[:k])  # float32 and float64 may round this apart
        for top_p in (boundary, boundary + 5e-7):
            with pytest.raises(ValueError, match="float rounding"):
                quiz.solution("top-p-weight", probs=probs, top_p=top_p, token=ranked[0])
            with pytest.raises(ValueError, match="float rounding"):
                quiz.worked_solution("top-p-weight", probs=probs, top_p=top_p, token=ranked[0])
        top_p = boundary + rng.choice([-1, 1]) * 1e-3
        if 0 < top_p <= 1 and all(abs(top_p - sum(probs[j] for j in ranked[:i])) > 1e-5 for i in range(1, 7)):
            cut = k + 1 if top_p > boundary else k
            for token in ranked[:cut]:
                if any(probs[j] == probs[token] for j in ranked[cut:]):  # kept or not: the sort's order decides
                    with pytest.raises(ValueError, match="same probability"):
                        quiz.solution("top-p-weight", probs=probs, top_p=top_p, token=token)
                    continue
                by_hand = quiz.EXERCISES["top-p-weight"].steps(probs=probs, top_p=top_p, token=token)["answer"]
                assert by_hand == pytest.approx(quiz.solution("top-p-weight", probs=probs, top_p=top_p, token=token))


def test_top_p_weight_answers_top_p_1_and_refuses_what_its_question_leaves_open():
    # top_p = 1 filters nothing: ρ = 1 for every token; the full mass is no boundary, there is no next token
    for top_p in (1.0, 1 - 5e-7):
        assert quiz.solution("top-p-weight", top_p=top_p, token=3) == pytest.approx(1.0)
        assert "ρ = p(y) / μ(y) = Z = 1.0000" in quiz.worked_solution("top-p-weight", top_p=top_p, token=3)
    with pytest.raises(ValueError, match=r"mass of the 2 most probable tokens \(0.8\)"):
        quiz.solution("top-p-weight", top_p=0.8)
    with pytest.raises(ValueError, match=r"mass of the most probable token \(0.5\)"):
        quiz.solution("top-p-weight", top_p=0.5)
    # probs summing to 0.9: the sampler renormalises and cuts at 0.85 before token 2, the hand after it
    with pytest.raises(ValueError, match="probs must be"):
        quiz.solution("top-p-weight", probs=(0.5, 0.3, 0.1), top_p=0.85, token=0)
    # tokens 1, 2, 3 tie at 0.3 and top-p 0.5 keeps two of them: which two, the question does not say
    for token in (1, 2, 3):
        with pytest.raises(ValueError, match=r"tokens \[1, 2, 3\] have the same probability"):
            quiz.solution("top-p-weight", probs=(0.1, 0.3, 0.3, 0.3), top_p=0.5, token=token)
    assert quiz.solution("top-p-weight", probs=(0.1, 0.3, 0.3, 0.3), top_p=0.65, token=3) == pytest.approx(0.9)
    for token in (-1, 4):
        with pytest.raises(ValueError, match="token must index one of the 4"):
            quiz.solution("top-p-weight", token=token)


INDEXED = {"optimal-policy": ("i", "p_ref"), "rloo-advantage": ("i", "rewards"), "grpo-advantage": ("i", "rewards"),
           "k3-gradient": ("j", "logits"), "gspo-token-weight": ("t", "log_ratios"), "top-p-weight": ("token", "probs"),
           "gae-advantage": ("t", None)}


@pytest.mark.parametrize("exercise_id", sorted(INDEXED))
def test_an_index_off_its_items_is_refused_by_name_never_counted_from_the_end(exercise_id):
    name, items = INDEXED[exercise_id]
    n = len(quiz.EXERCISES[exercise_id].defaults[items]) if items else toy.toy_trajectory().rewards.shape[-1]
    for bad in (-1, -n, n, n + 3, 1.0, True):
        with pytest.raises(ValueError, match=f"{name} must index one of the {n}"):
            quiz.solution(exercise_id, **{name: bad})
    assert all(math.isfinite(quiz.solution(exercise_id, **{name: k})) for k in (0, n - 1)
               if exercise_id != "top-p-weight")  # top-p filters some tokens out, with its own message


@pytest.mark.parametrize("value", [-1.6, 0.0768, 0.000123456, 123.456, 0.0, 1.0, 9.99999])
@pytest.mark.parametrize("tol", [1e-2, 1e-3, 1e-5])
def test_a_shown_value_holds_at_least_the_digits_the_question_asks_for(value, tol):
    text = quiz.shown(value, tol)
    decimals = len(text.split(".")[1])
    assert decimals >= 4 and math.isclose(float(text), value, rel_tol=tol, abs_tol=tol)
    if value:
        significant = len(text.lstrip("-").replace(".", "").lstrip("0"))
        assert significant >= quiz.significant_digits(tol), text


def test_every_exercise_has_worked_cases():
    assert set(WORKED_CASES) == set(quiz.list_exercises())


@pytest.mark.parametrize("exercise_id", sorted(WORKED_CASES))
def test_worked_solution_equals_the_library(exercise_id):
    exercise = quiz.EXERCISES[exercise_id]
    for params in [{}] + WORKED_CASES[exercise_id]:
        by_hand = exercise.steps(**{**exercise.defaults, **params})["answer"]
        assert by_hand == pytest.approx(quiz.solution(exercise_id, **params), rel=1e-9, abs=1e-9), params
        text = quiz.worked_solution(exercise_id, **params)
        assert "{" not in text and f"{by_hand:.4f}" in text, text  # the reasoning ends at the number it derives


def test_show_solution_prints_the_reasoning_and_the_value(capsys):
    quiz.show_solution("ppo-objective", r=0.7, advantage=-2.0, eps=0.2)
    out = capsys.readouterr().out
    assert quiz.describe("ppo-objective", r=0.7, advantage=-2.0, eps=0.2) in out
    assert "clip(0.7, 0.8, 1.2) = 0.8" in out and "no gradient" in out
    assert out.rstrip().endswith("The library's value: -1.6000")
    with pytest.raises(TypeError, match="takes"):
        quiz.show_solution("ppo-objective", ratio=1.5)


@pytest.mark.parametrize("placeholder", [None, ...])
def test_unfilled_answer_asks_for_a_number_and_reveals_nothing(capsys, monkeypatch, placeholder):
    monkeypatch.setenv("MINIRLHF_EXERCISES_STRICT", "1")  # as in the headless notebook run: still no error
    assert quiz.check_number("grpo-advantage", placeholder) is False
    out = capsys.readouterr().out
    assert out.startswith("Fill in your answer first") and f"{quiz.solution('grpo-advantage'):.2f}" not in out


def test_wrong_answer_points_at_the_worked_solution(capsys):
    assert not quiz.check_number("ppo-objective", 0.0, r=0.7, advantage=-2.0, eps=0.2)
    out = capsys.readouterr().out
    assert out.startswith("Not quite") and "-1.6" not in out
    assert "quiz.show_solution('ppo-objective', r=0.7, advantage=-2.0, eps=0.2)" in out
    with pytest.raises(TypeError, match="must be a number"):
        quiz.check_number("ppo-objective", "1.2")


# ----------------------------------------------------------------------------- notebooks reveal nothing on "Run all"

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
REVEALING_CALLS = {"show_solution", "solution", "worked_solution"}


def revealed_answers(source: str) -> list[str]:
    """What in one code cell would show a numeric exercise's answer when the cell runs: a "# Solution" comment, a
    call that prints or returns the answer, or check_number given anything but a name the cell sets to None."""
    problems = [line for line in source.splitlines() if re.match(r"\s*#\s*solution\b", line, re.IGNORECASE)]
    code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    tree = ast.parse(code)
    placeholders = {target.id for node in ast.walk(tree) if isinstance(node, ast.Assign)
                    and isinstance(node.value, ast.Constant) and node.value.value is None
                    for target in node.targets if isinstance(target, ast.Name)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in REVEALING_CALLS and isinstance(node.func.value, ast.Name) and node.func.value.id == "quiz":
            problems.append(ast.unparse(node))
        if node.func.attr == "check_number":
            value = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(value, ast.Name) and value.id in placeholders):
                problems.append(ast.unparse(node))
    return problems


def test_revealed_answers_finds_the_ways_to_give_an_answer_away():
    unfilled = 'my_answer = None\nquiz.check_number("kl-k3", my_answer)\n# stuck? quiz.show_solution("kl-k3")'
    assert revealed_answers(unfilled) == []
    assert len(revealed_answers("# Solution: log ρ = -0.5\nquiz.check_number('kl-k3', 0.1065)")) == 2
    assert revealed_answers("my_answer = 0.0\nquiz.check_number('kl-k3', my_answer)")
    assert revealed_answers("quiz.show_solution('kl-k3')")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_never_shows_a_numeric_answer(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    for cell in cells:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            assert not revealed_answers(source), f"{path.name}, cell {cell.get('id')}: reveals an answer:\n{source}"


def test_the_grpo_since_r1_explanations_quote_the_librarys_numbers():
    """Each number an explanation of notebook 07's quizzes states, recomputed (by the library where it has it)."""
    def explanation(question_id: str) -> str:
        return quiz.QUESTIONS[question_id].explanation

    groups = torch.cartesian_prod(*[torch.tensor([0.0, 1.0], dtype=torch.float64)] * 8)  # every 0/1 group, G = 8
    right = groups.sum(-1)
    dropped = ~losses.informative_groups(groups.reshape(-1), 8)
    for p, digits, quoted in ((0.5, 1, "0.8%"), (0.9, 2, "43%")):
        share = float((p**right * (1 - p) ** (8 - right))[dropped].sum())
        assert f"{100 * share:.{digits}g}%" == quoted and quoted in explanation("r1-wasted-groups")
    for eps, quoted in ((0.2, "0.012"), (0.28, "0.0128")):
        assert f"{0.01 * (1 + eps):.3g}" == quoted and f"{quoted} at" in explanation("r1-clip-higher")
    assert f"{1.01 ** 200:.2g}" == "7.3" and "≈ 7.3" in explanation("r1-token-vs-sequence-ratio")
    rewards = torch.tensor([1.0] * 4 + [0.0] * 4, dtype=torch.float64)
    for easy_length, hard_length, quoted in ((4, 4, ("±0.98",)), (3, 10, ("+1.81", "-0.54"))):
        mask = torch.ones(8, 10, dtype=torch.float64)
        mask[:4, easy_length:], mask[4:, hard_length:] = 0, 0
        advantages = losses.reinforce_plus_plus_advantages(rewards, mask)
        easy, hard = float(advantages[0, 0]), float(advantages[4, 0])
        said = (f"±{easy:.2f}",) if math.isclose(easy, -hard) else (f"+{easy:.2f}", f"{hard:.2f}")
        assert said == quoted and all(q in explanation("r1-reinforce-pp-batch") for q in quoted)
    assert not losses.reinforce_plus_plus_advantages(rewards, torch.ones(8, 4), group_size=4).any()
    assert not losses.grpo_advantages(rewards, 4).any()
