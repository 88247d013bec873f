"""The lab's over-optimisation effect (e): how a gold curve's turn is read, and its criterion."""

from __future__ import annotations

import pytest

from minirlhf.lab import ensembles, overoptimisation
from minirlhf.lab.overoptimisation import NEEDS, check_settings, holds, turn


def test_the_turn_is_the_rise_to_the_peak_and_the_fall_after_it_with_their_paired_standard_errors():
    # three openings, four evaluations: gold rises to evaluation 2 by 0.5, 0.4 and 0.6, then falls by 0.3, 0.2, 0.4
    gold = [[0.0, 0.0, 0.0], [0.2, 0.1, 0.3], [0.5, 0.4, 0.6], [0.2, 0.2, 0.2]]
    found = turn(gold)
    assert found["peak"] == 2 and found["peak_gold"] == pytest.approx(0.5)
    assert found["rise"] == pytest.approx(0.5) and found["rise_stderr"] == pytest.approx(0.1 / 3**0.5)
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


def test_a_curve_that_peaks_at_the_first_evaluation_has_not_risen():
    found = turn([[0.5, 0.6], [0.2, 0.3]])  # falls by 0.3 on both openings: a fall, but no rise before it
    assert found["peak"] == 0 and found["fall"] == pytest.approx(0.3) and found["fall"] > found["fall_stderr"]
    assert found["rise"] == 0 and not holds({"weak": found})


def test_a_rise_within_its_standard_error_does_not_hold():
    found = turn([[0.0, 0.0], [0.5, -0.3], [0.0, -0.6]])  # per opening: +0.5 and -0.3 to the peak, then -0.5, -0.3
    assert found["rise"] == pytest.approx(0.1) and found["rise_stderr"] == pytest.approx(0.4)
    assert found["fall"] == pytest.approx(0.4) and found["fall_stderr"] == pytest.approx(0.1)
    assert not holds({"weak": found})


@pytest.mark.parametrize("key", ["e", "6"])
def test_the_shipped_settings_of_e_and_6_pass_their_check(key):
    from minirlhf.lab import settings_of

    for quick in (True, False):
        check_settings(settings_of(key, quick), NEEDS if key == "e" else tuple(ensembles.ARMS))


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.update(arms=["weak", "ensmble"]), r"arms\[1\] must be one of: weak, strong, ensemble; got 'ensmble'"),
    (lambda s: s.update(arms="weak,ensemble"), r"arms='weak,ensemble': a list"),
    (lambda s: s.update(arms=[]), r"arms=\[\]: distinct arms, holding weak and ensemble"),
    (lambda s: s.update(arms=["weak", "ensemble", "weak"]), r"distinct arms"),
    (lambda s: s.update(arms=["strong", "ensemble"]), r"holding weak and ensemble"),
    (lambda s: s["ensemble"].update(members=1), r"ensemble.members must be an integer >= 2 .*got 1"),
    (lambda s: s["ensemble"].update(members=0), r"ensemble.members .* got 0"),
    (lambda s: s["ensemble"].update(rule="median"), r"ensemble.rule must be one of: .*; got 'median'"),
    (lambda s: s["ensemble"].update(of="weakest"), r"ensemble.of must be one of: weak, strong; got 'weakest'"),
    (lambda s: s["ensemble"].update(lam=-0.5), r"ensemble.lam .*-0.5"),
    (lambda s: s["ensemble"].update(bootstrap="yes"), r"ensemble.bootstrap='yes': true or false"),
])
def test_the_ensemble_effect_refuses_bad_settings_naming_the_field_before_any_training(edit, message, monkeypatch):
    from minirlhf.lab import run_seed, settings_of

    def no_training(*args, **kwargs):
        raise AssertionError("a reward model trained before the settings were checked")

    monkeypatch.setattr(overoptimisation, "train_proxy", no_training)
    settings = settings_of("6", quick=True)
    edit(settings)
    with pytest.raises(ValueError, match=message):
        run_seed("6", 0, settings, verbose=False)


def test_a_bootstrap_resample_keeps_the_data_budget_and_repeats_some_pairs():
    pairs = list(range(250))
    resample = overoptimisation.bootstrap(pairs, seed=7)
    assert len(resample) == 250 and set(resample) <= set(pairs)
    assert 0.55 < len(set(resample)) / 250 < 0.72  # about 1 - 1/e of the pairs drawn at least once
    assert resample == overoptimisation.bootstrap(pairs, seed=7) != overoptimisation.bootstrap(pairs, seed=8)
