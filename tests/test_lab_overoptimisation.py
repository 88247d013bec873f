"""The lab's over-optimisation effect (e): how a gold curve's turn is read, and its criterion."""

from __future__ import annotations

import pytest

from minirlhf.lab.overoptimisation import holds, turn


def test_the_turn_is_the_fall_from_the_peak_to_the_last_evaluation_with_its_paired_standard_error():
    # three openings, four evaluations: gold rises to evaluation 2, then falls by 0.3, 0.2 and 0.4
    gold = [[0.0, 0.0, 0.0], [0.2, 0.1, 0.3], [0.5, 0.4, 0.6], [0.2, 0.2, 0.2]]
    found = turn(gold)
    assert found["peak"] == 2 and found["peak_gold"] == pytest.approx(0.5)
    assert found["final_gold"] == pytest.approx(0.2) and found["fall"] == pytest.approx(0.3)
    assert found["fall_stderr"] == pytest.approx(0.1 / 3**0.5)  # the falls 0.3, 0.2, 0.4 have standard deviation 0.1
    assert holds({"weak": found})


def test_a_curve_that_ends_at_its_peak_has_not_turned():
    found = turn([[0.0, 0.1], [0.3, 0.2], [0.5, 0.6]])
    assert found["fall"] == 0 and found["fall_stderr"] == 0 and not holds({"weak": found})


def test_a_fall_within_its_standard_error_does_not_hold():
    found = turn([[0.0, 0.0], [0.5, 0.3], [0.6, 0.0]])  # per opening: +0.1 then -0.3 from the peak at evaluation 1
    assert found["fall"] == pytest.approx(0.1) and found["fall_stderr"] == pytest.approx(0.2)
    assert not holds({"weak": found})
