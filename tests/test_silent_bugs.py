"""Find the silent bug (minirlhf.course.silent_bugs): each planted bug shows in the curve it is meant to, and
naming a run's bug says right or wrong without giving the answer away."""

from __future__ import annotations

import pytest

from minirlhf import diagnostics
from minirlhf.course import silent_bugs


@pytest.fixture(scope="module")
def curves():
    return {name: silent_bugs.run(name, steps=2, prompts_per_step=8)
            for name in ("none", "stale-old-logprobs", "padding-counted")}


def test_stale_old_logprobs_keep_the_ratio_at_exactly_one(curves):
    assert curves["stale-old-logprobs"]["ratio_mean"] == [1.0, 1.0]
    assert curves["stale-old-logprobs"]["clip_frac"] == [0.0, 0.0]
    assert curves["none"]["ratio_mean"] != [1.0, 1.0]  # the healthy run's policy moved before its second epoch


def test_counted_padding_breaks_the_debug_check_before_any_update(curves):
    """The curve and the words the notebook points at: the healthy forward reproduces the sampling log-probs, the
    one without position ids does not, and `--debug`'s warning names the cause."""
    assert max(curves["none"]["logp_max_abs_diff"]) < diagnostics.LOGP_TOLERANCE
    assert min(curves["padding-counted"]["logp_max_abs_diff"]) > 100 * diagnostics.LOGP_TOLERANCE
    assert silent_bugs.DEBUG_WORDS["none"] == []
    assert "position ids that count padding" in silent_bugs.DEBUG_WORDS["padding-counted"][0]


def test_every_run_hides_a_known_bug_and_each_bug_is_hidden_once():
    assert sorted(silent_bugs.RUNS.values()) == sorted(silent_bugs.BUGS)


def test_naming_the_bug(capsys):
    name, bug = next(iter(silent_bugs.RUNS.items()))
    assert silent_bugs.name_the_bug(name, bug) is True
    wrong = next(b for b in silent_bugs.BUGS if b != bug)
    assert silent_bugs.name_the_bug(name, wrong) is False
    assert silent_bugs.name_the_bug(name, "your guess") is False
    out = capsys.readouterr().out
    assert out.count(silent_bugs.BUGS[bug]) == 1  # explained only when named right
    with pytest.raises(ValueError, match="unknown run"):
        silent_bugs.run("Z")
