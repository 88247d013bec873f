"""The lab's over-optimisation effect (e): how a gold curve's turn is read, and its criterion."""

from __future__ import annotations

import shutil

import hypothesis
import pytest
import torch
from hypothesis import strategies as st

from minirlhf.lab import ensembles, overoptimisation
from minirlhf.lab.overoptimisation import NEEDS, check_settings, holds, turn
from minirlhf.models import SHIPPED


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
    (lambda s: s.update(arms=["weak", "ensmble"]),
     r"arms\[1\] must be one of: weak, strong, ensemble, pooled; got 'ensmble'"),
    (lambda s: s.update(arms="weak,ensemble"), r"arms='weak,ensemble': a list"),
    (lambda s: s.update(arms=[]), r"arms=\[\]: distinct arms, holding weak and ensemble"),
    (lambda s: s.update(arms=["weak", "ensemble", "weak"]), r"distinct arms"),
    (lambda s: s.update(arms=["strong", "ensemble"]), r"holding weak and ensemble"),
    (lambda s: s["ensemble"].update(members=1), r"ensemble.members must be an integer >= 2 .*got 1"),
    (lambda s: s["ensemble"].update(members=0), r"ensemble.members .* got 0"),
    (lambda s: s["ensemble"].update(rule="median"), r"ensemble.rule must be one of: .*; got 'median'"),
    (lambda s: s["ensemble"].update(of="weakest"), r"ensemble.of must be one of: weak, strong; got 'weakest'"),
    (lambda s: s["ensemble"].update(lam=-0.5), r"ensemble.lam .*-0.5"),
    (lambda s: s["ensemble"].update(pairs="resampled"), r"ensemble.pairs must be one of: same, bootstrap, fresh"),
    (lambda s: s["ensemble"].update(pairs=True), r"ensemble.pairs must be one of: .*; got True"),
    (lambda s: s["proxies"]["weak"].update(pairs=0), r"proxies.weak.pairs must be an integer >= 1, got 0"),
    (lambda s: s["proxies"]["weak"].update(pairs=2001), r"proxies.weak.pairs=2001: at most the 2000 shipped"),
    (lambda s: s["proxies"]["weak"].update(pairs=250.0), r"proxies.weak.pairs must be an integer"),
    (lambda s: s["proxies"]["weak"].update(pairs=True), r"proxies.weak.pairs must be an integer"),
    (lambda s: s["proxies"]["weak"].update(noise=1.5), r"proxies.weak.noise must lie in \[0.0, 1.0\].*got 1.5"),
    (lambda s: s["proxies"]["weak"].update(noise=float("nan")), r"proxies.weak.noise must lie in .*got nan"),
    (lambda s: s["proxies"]["weak"].update(noise="25%"), r"proxies.weak.noise must lie in .*got '25%'"),
    (lambda s: s["proxies"]["weak"].update(min_accuracy=1.0), r"proxies.weak.min_accuracy must lie in \[0.0, 1.0\)"),
    (lambda s: s["proxies"]["weak"].update(min_accuracy=-0.1), r"proxies.weak.min_accuracy must lie in .*got -0.1"),
    (lambda s: s["proxies"]["strong"].pop("min_accuracy"), r"proxies.strong.min_accuracy: missing"),
    (lambda s: s.update(arms=["weak", "pooled"]), r"holding weak and ensemble"),
    # an older record's settings: ensemble.bootstrap was silently ignored, a missing ensemble.pairs a KeyError
    (lambda s: s["ensemble"].update(bootstrap=True),
     r"ensemble.bootstrap=True: no such setting \(replaced by ensemble.pairs: 'bootstrap' for true, 'same' for"),
    (lambda s: s["ensemble"].pop("pairs"), r"ensemble.pairs: missing \(the fields of ensemble"),
    (lambda s: s["ensemble"].update(member=3), r"ensemble.member=3: no such setting \(the fields of ensemble: of,"),
    (lambda s: s["proxies"]["weak"].pop("noise"), r"proxies.weak.noise: missing"),
    (lambda s: s.pop("arms"), r"^arms: missing \(the fields of the settings: model, proxies"),
    (lambda s: s.update(ensemble_bootstrap=True), r"^ensemble_bootstrap=True: no such setting \(the fields of the"),
    (lambda s: s["proxies"]["weak"].update(flips=0.25), r"proxies.weak.flips=0.25: no such setting"),
    (lambda s: s["proxies"].update(weak=250), r"proxies.weak=250: a dict of pairs, noise"),
    (lambda s: s["proxies"].update(pooled={"pairs": 10, "noise": 0.0}), r"proxies.pooled: the name of the arm"),
    # one held-out opening has no standard error: the run ended on a StatisticsError after its first RL run
    (lambda s: s["evaluation"].update(prompts=1), r"evaluation.prompts must be an integer >= 2 .*got 1"),
    (lambda s: s["evaluation"].update(prompts=500), r"evaluation.prompts=500: at most the 100 held-out openings"),
    (lambda s: s["evaluation"].update(samples=0), r"evaluation.samples must be an integer >= 1 .*got 0"),
    # the RL runs' settings: the reward models all trained before GRPOConfig refused them
    (lambda s: s["grpo"].update(betta=0.1), r"grpo=.*unexpected keyword argument 'betta'"),
    (lambda s: s["grpo"].update(seed=3), r"grpo=.*multiple values for keyword argument 'seed'"),
    (lambda s: s["grpo"].update(lr=-1.0), r"GRPOConfig.lr must be > 0, got -1.0"),
    (lambda s: s["evaluation"].update(every=0), r"evaluation.every must be an integer >= 1 .*got 0"),
    # 0 held-out pairs recorded every accuracy as None, more than the 300 shipped ones silently read 300
    (lambda s: s.update(held_out_pairs=0), r"held_out_pairs must be an integer >= 1 .*got 0"),
    (lambda s: s.update(held_out_pairs=301), r"held_out_pairs=301: at most the 300 shipped test pairs"),
    (lambda s: s.update(held_out_pairs=True), r"held_out_pairs must be an integer"),
    # (6) judges the ensemble against the weak arm: an ensemble of the strong proxy would be compared with no member
    (lambda s: s["ensemble"].update(of="strong", pairs="same"), r"ensemble.of='strong': \(6\) compares the ensemble"),
    # a fresh draw of all the shipped pairs, none flipped, is the same pairs: "fresh" would be "same"
    (lambda s: s["ensemble"].update(of="strong"), r"ensemble.pairs='fresh' with proxies.strong \(2000 pairs, none"),
    (lambda s: s["ensemble"].update(members=1) or s.update(arms=["weak", "ensemble"]), r"ensemble.members"),
    (lambda s: s["ensemble"].update(backbones="tiny"), r"ensemble.backbones='tiny': \[\] or a list of 1 models"),
    (lambda s: s["ensemble"].update(backbones=["tiny", "tiny"]), r"a list of 1 models"),
    (lambda s: s["ensemble"].update(members=3, backbones=["tiny"]), r"backbones=\['tiny'\]: \[\] or a list of 2"),
    (lambda s: s["ensemble"].update(backbones=["gpt2"]), r"ensemble.backbones\[0\]='gpt2': a shipped model"),
    (lambda s: s["ensemble"].update(backbones=["/no/such/folder"]), r"backbones\[0\]='/no/such/folder': a shipped"),
    (lambda s: s["ensemble"].update(backbones=[None]), r"backbones\[0\]=None: a shipped model"),
    (lambda s: s["ensemble"].update(backbones=("tiny",)), r"ensemble.backbones=\('tiny',\)"),
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


class _Scorer(torch.nn.Module):
    def score(self, prompts, completions, tokenizer=None):
        return [float(len(c)) for c in completions]


@pytest.fixture
def trained(monkeypatch) -> list[tuple]:
    """Each reward model the run trains, as (its pairs, seed, settings), in order; nothing trains and no RL runs.
    The k-th model's held-out accuracy is 0.5 + k/100."""
    calls = []

    def train_proxy(pairs, seed, settings):
        calls.append((pairs, seed, settings))
        return _Scorer(), 0.5 + len(calls) / 100

    monkeypatch.setattr(overoptimisation, "train_proxy", train_proxy)
    monkeypatch.setattr(overoptimisation, "rl_run", lambda proxy, settings, seed: {"steps": [0], "peak": 0})
    return calls


def test_each_member_after_the_first_learns_from_its_own_backbone_on_the_same_pairs(trained):
    from minirlhf.lab import settings_of

    calls = trained
    settings = settings_of("6", quick=False)
    assert settings["ensemble"]["backbones"] == []  # the record: every member from the policy's own model
    settings["ensemble"]["pairs"], settings["arms"] = "same", ["weak", "ensemble"]
    overoptimisation.run_seed(5, settings, tuple(ensembles.ARMS))
    assert [config["model"] for _, _, config in calls] == ["tiny"] * 4
    calls.clear()
    others = ["tiny-sft", str(SHIPPED["tiny-lab"]), "tiny-calculator"]  # the policy's tokenizer, other weights
    settings["ensemble"]["backbones"] = others
    arms = overoptimisation.run_seed(5, settings, tuple(ensembles.ARMS))
    assert [config["model"] for _, _, config in calls] == ["tiny", *others]
    assert [seed for _, seed, _ in calls] == [5, 2005, 3005, 4005]  # the weak proxy's seed, then one per member
    assert all(pairs == calls[0][0] for pairs, _, _ in calls)  # the weak proxy's 250 pairs, flips included
    assert arms["ensemble"]["member_accuracy"] == [0.51, 0.52, 0.53, 0.54] and arms["weak"]["rm_accuracy"] == 0.51


def test_a_backbone_with_another_tokenizer_is_refused_before_any_training(tmp_path, monkeypatch):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from minirlhf.lab import run_seed, settings_of

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(["a good film", "a bad film"] * 20, trainers.BpeTrainer(vocab_size=300,
                                                                                    special_tokens=["<|endoftext|>"]))
    PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>").save_pretrained(tmp_path)
    for name in ("config.json", "model.safetensors"):  # tiny's weights: only the tokenizer is wrong
        shutil.copy(SHIPPED["tiny"] / name, tmp_path / name)
    monkeypatch.setattr(overoptimisation, "train_proxy", lambda *a: pytest.fail("a reward model trained first"))
    settings = settings_of("6", quick=True)
    settings["ensemble"]["backbones"] = [str(tmp_path)]
    with pytest.raises(ValueError, match=r"ensemble.backbones\[0\]=.*its tokenizer is not the policy's \('tiny'\)"):
        run_seed("6", 0, settings, verbose=False)


@pytest.mark.parametrize("left_out, message", [
    ("model.safetensors", r"ensemble.backbones\[0\]=.*: no model.safetensors"),
    ("tokenizer", r"ensemble.backbones\[0\]=.*: .* has no tokenizer files"),
])
def test_a_backbone_folder_missing_its_weights_or_tokenizer_is_refused_before_any_training(left_out, message, tmp_path,
                                                                                          monkeypatch):
    """A folder of tiny's files but one: without its weights it passed the check and failed only when the member
    loaded, after the proxies trained; without its tokenizer, transformers made one of EOS alone."""
    from minirlhf.lab import run_seed, settings_of

    folder = tmp_path / "backbone"
    shutil.copytree(SHIPPED["tiny"], folder)
    for path in folder.iterdir():
        if path.name == left_out or left_out == "tokenizer" and path.name.startswith("tokenizer"):
            path.unlink()
    monkeypatch.setattr(overoptimisation, "train_proxy", lambda *a: pytest.fail("a reward model trained first"))
    settings = settings_of("6", quick=True)
    settings["ensemble"]["backbones"] = [str(folder)]
    with pytest.raises(ValueError, match=message):
        run_seed("6", 0, settings, verbose=False)


def test_another_pre_training_never_writes_over_the_shipped_tiny_model(capsys, monkeypatch):
    """build_tiny_model.py --init-seed K without --out would have replaced data/tiny-gpt2, the model every shipped
    one was fine-tuned from: the arguments are refused; the default build keeps --seed for both seeds."""
    import importlib
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).parents[1] / "scripts"))
    build = importlib.import_module("build_tiny_model")
    with pytest.raises(SystemExit) as refused:
        build.parse_args(["--init-seed", "1"])
    assert refused.value.code == 2 and "--init-seed 1 builds another pre-training" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        build.parse_args(["--init-seed", "1", "--out", str(SHIPPED["tiny"] / ".." / SHIPPED["tiny"].name)])
    assert build.parse_args([]).init_seed == 0 and build.parse_args(["--seed", "3"]).init_seed == 3
    assert build.parse_args(["--init-seed", "0"]).init_seed == 0  # the shipped build, spelt out
    assert build.parse_args(["--init-seed", "1", "--out", "elsewhere"]).init_seed == 1


def _key(pair) -> tuple:
    return pair.prompt, pair.chosen, pair.rejected


@pytest.mark.parametrize("members", [2, 4])
def test_members_learn_from_the_same_pairs_a_resample_or_a_fresh_draw_each(members):
    from minirlhf.lab import settings_of

    settings = settings_of("6", quick=False)
    settings["ensemble"]["members"] = members
    spec = settings["proxies"]["weak"]
    first = overoptimisation.proxy_pairs(spec, 7)
    drawn = {}
    for kind in overoptimisation.MEMBER_PAIRS:
        settings["ensemble"]["pairs"] = kind
        drawn[kind] = overoptimisation.member_pairs(settings, 7, first)
        assert len(drawn[kind]) == members and drawn[kind][0] == first  # member 0 is the weak proxy itself
        assert all(len(pairs) == spec["pairs"] for pairs in drawn[kind])  # each member's budget is one member's
        assert drawn[kind] == overoptimisation.member_pairs(settings, 7, first)  # the same seed draws the same pairs
    assert all(pairs == first for pairs in drawn["same"])
    for k, pairs in enumerate(drawn["bootstrap"][1:], start=1):
        assert pairs == overoptimisation.bootstrap(first, overoptimisation.member_seed(k, 7)) != first
    for k, pairs in enumerate(drawn["fresh"][1:], start=1):
        assert pairs == overoptimisation.proxy_pairs(spec, overoptimisation.member_seed(k, 7))
        # another draw of the 2000: about 250 · 250 / 2000 ≈ 31 pairs in common with the first, each flipped apart
        assert len({_key(p) for p in pairs} & {_key(p) for p in first}) < 60
    assert len({overoptimisation.member_seed(k, 7) for k in range(1, members)} | {7}) == members


def test_fresh_members_flip_their_own_quarter_of_the_labels():
    from minirlhf.data import load_preference_pairs

    shipped = {(p.prompt, p.chosen): p.rejected for p in load_preference_pairs("sentiment", "train")}
    spec = {"pairs": 250, "noise": 0.25}
    flips = []
    for k in range(1, 4):
        pairs = overoptimisation.proxy_pairs(spec, overoptimisation.member_seed(k, 3))
        flipped = [(p.prompt, p.chosen) not in shipped for p in pairs]
        assert 0.15 < sum(flipped) / len(pairs) < 0.35
        flips.append({_key(p) for p, f in zip(pairs, flipped) if f})
    assert not flips[0] & flips[1] & flips[2]


def test_the_pooled_arm_learns_from_every_members_pairs_for_as_many_steps_as_the_members(trained):
    from minirlhf.lab import settings_of

    settings = settings_of("6", quick=False)
    assert settings["arms"] == ["weak", "ensemble", "pooled"] and settings["ensemble"]["pairs"] == "fresh"
    arms = overoptimisation.run_seed(5, settings, tuple(ensembles.ARMS))
    assert list(arms) == ["weak", "ensemble", "pooled"]
    calls = [(seed, [_key(p) for p in pairs], config["reward_model"]["steps"]) for pairs, seed, config in trained]
    first = overoptimisation.proxy_pairs(settings["proxies"]["weak"], 5)  # seed 5's weak proxy keeps its first draw
    members = [[_key(p) for p in pairs] for pairs in overoptimisation.member_pairs(settings, 5, first)]
    assert [(seed, pairs) for seed, pairs, _ in calls[:4]] == list(zip([5, 2005, 3005, 4005], members, strict=True))
    pooled_seed, pooled_pairs, pooled_steps = calls[4]
    assert pooled_pairs == [pair for member in members for pair in member] and pooled_steps == 4 * 60
    assert len(calls) == 5 and pooled_seed == 5
    assert arms["pooled"]["rm_accuracy"] == 0.55 and arms["ensemble"]["member_accuracy"] == [0.51, 0.52, 0.53, 0.54]
    settings["arms"] = ["weak", "pooled", "ensemble"]  # the order of the arms is the order of the runs
    assert list(overoptimisation.run_seed(5, settings, tuple(ensembles.ARMS))) == ["weak", "pooled", "ensemble"]


def _arm(final_per_opening: list[float], fall: float) -> dict:
    return {"final_gold_per_opening": final_per_opening, "fall": fall}


@pytest.mark.parametrize("ensemble, weak, shows, why", [
    (_arm([0.9, 0.8, 0.7, 0.8], 0.0), _arm([0.1, 0.2, 0.0, 0.1], 0.6), True, "ends higher, falls less"),
    (_arm([0.9, 0.8, 0.7, 0.8], 0.7), _arm([0.1, 0.2, 0.0, 0.1], 0.6), False, "falls more from its peak"),
    (_arm([0.9, 0.8, 0.7, 0.8], 0.6), _arm([0.1, 0.2, 0.0, 0.1], 0.6), False, "falls as much"),
    (_arm([0.1, 0.2, 0.0, 0.1], 0.0), _arm([0.9, 0.8, 0.7, 0.8], 0.6), False, "ends lower"),
    (_arm([0.004, 0.004, 0.005, 0.003], 0.0), _arm([0.0, 0.0, 0.0, 0.0], 0.9), False, "both collapsed: +0.004"),
    (_arm([0.04, 0.04, 0.04, 0.04], 0.0), _arm([0.0, 0.0, 0.0, 0.0], 0.9), False, "a gap under MIN_GAP"),
    (_arm([0.05, 0.05, 0.05, 0.05], 0.0), _arm([0.0, 0.0, 0.0, 0.0], 0.9), True, "a gap of exactly MIN_GAP"),
    (_arm([1.0, -0.6, 1.0, -0.6], 0.0), _arm([0.0, 0.0, 0.0, 0.0], 0.9), False, "+0.2 within its standard error"),
])
def test_the_ensemble_criterion_asks_for_a_real_gap_and_a_smaller_fall(ensemble, weak, shows, why):
    assert ensembles.holds({"weak": weak, "ensemble": ensemble}) is shows, why


def test_fresh_members_of_every_shipped_pair_need_flips_of_their_own_to_differ():
    from minirlhf.lab import settings_of

    settings = settings_of("6", quick=True)
    settings["ensemble"]["of"] = "strong"
    for pairs in ("same", "bootstrap"):  # what the members do differ by: their seeds, their resamples
        check_settings(settings | {"ensemble": settings["ensemble"] | {"pairs": pairs}}, tuple(ensembles.ARMS))
    settings["proxies"]["strong"]["noise"] = 0.1  # every pair, each member with its own flips
    check_settings(settings, tuple(ensembles.ARMS))


@pytest.mark.parametrize("reward_model, pooled", [
    ({"lr": 1e-3, "batch_size": 16}, {"lr": 1e-3, "batch_size": 16, "steps": 4 * 150}),  # RewardModelConfig's steps
    ({"epochs": 2.0, "lr": 1e-3, "batch_size": 16}, {"epochs": 2.0, "lr": 1e-3, "batch_size": 16}),  # by the pairs
])
def test_the_pooled_proxy_trains_as_long_as_the_members_together_without_a_steps_setting(reward_model, pooled,
                                                                                          trained):
    """Without reward_model.steps the pooled arm stopped on a KeyError after the members had trained; with `epochs`
    the steps follow the pairs, members times as many for the pooled proxy."""
    from minirlhf.lab import settings_of

    settings = settings_of("6", quick=False) | {"reward_model": reward_model}
    overoptimisation.run_seed(0, settings, tuple(ensembles.ARMS))
    assert [config["reward_model"] for _, _, config in trained] == [reward_model] * 4 + [pooled]


def test_the_ensemble_figure_names_every_arm_in_its_own_colour_under_a_title_that_fits():
    """The benchmark draws each effect on a 6 x 4 inch figure: (6)'s title ran past its right edge."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curve = {"kl": [0.0, 1.0, 4.0], "gold": [0.1, 0.5, 0.2]}
    seeds = [{"arms": {arm: curve for arm in ("weak", "ensemble", "pooled")}} for _ in range(2)]
    fig, ax = plt.subplots(figsize=(6, 4))
    ensembles.plot(ax, seeds)
    fig.tight_layout()
    fig.canvas.draw()
    title, frame = ax.title.get_window_extent(), fig.bbox
    assert frame.x0 <= title.x0 and title.x1 <= frame.x1, ax.get_title()
    legend = ax.get_legend()
    assert [text.get_text() for text in legend.get_texts()] == ["weak", "ensemble", "pooled"]
    assert len({line.get_color() for line in legend.get_lines()}) == 3
    plt.close(fig)


def _seed(gap: float, pooled: float | None, members: int = 2) -> dict:
    """One seed's figures: the weak proxy ends at 0.1 on four openings, the ensemble `gap` above it, the pooled
    proxy `pooled` above it (None: no pooled arm)."""
    def arm(shift: float, fall: float) -> dict:
        per_opening = [0.1 + shift + d for d in (0.01, -0.01, 0.02, -0.02)]
        return _arm(per_opening, fall) | {"peak_step": 10, "final_gold": 0.1 + shift, "rm_accuracy": 0.6}

    arms = {"weak": arm(0.0, 0.5), "ensemble": arm(gap, 0.0) | {"member_accuracy": [0.6] * members}}
    return {"arms": arms | ({} if pooled is None else {"pooled": arm(pooled, 0.1)})}


def test_the_ensemble_summary_counts_the_members_and_reports_the_pooled_arm_only_when_it_ran():
    """The summary said "ensemble of four weak reward models (min)" whatever the members (quick mode has two)."""
    both = ensembles.across([_seed(0.3, 0.2), _seed(0.5, 0.01)])
    assert "ensemble of 2 reward models" in both["size"] and both["mean"] == pytest.approx(0.4)
    assert both["pooled_gap"] == [0.2, 0.01] and both["pooled_holds"] == [True, False]  # 0.01 < MIN_GAP
    assert both["final_gold"]["pooled"] == [0.3, 0.11] and both["pooled_rm_accuracy"] == [0.6, 0.6]
    alone = ensembles.across([_seed(0.3, None, members=4)])
    assert "ensemble of 4 reward models" in alone["size"] and list(alone["fall"]) == ["weak", "ensemble"]
    assert not {key for key in alone if key.startswith("pooled")}


@pytest.mark.parametrize("least, accuracies, chosen", [
    (0.0, [0.52, 0.70], 0),  # any first draw
    (0.56, [0.56, 0.70], 0),  # the first draw reaches it: kept
    (0.56, [0.52, 0.54, 0.60, 0.70], 2),  # drawn again until one does
    (0.9, [0.52, 0.61, 0.58, 0.55, 0.50, 0.99], 1),  # none in MAX_DRAWS: the most accurate of them
])
def test_a_proxy_is_drawn_again_until_it_beats_its_minimum_accuracy(least, accuracies, chosen, monkeypatch):
    seeds = []

    def train_proxy(pairs, seed, settings):
        seeds.append((pairs[0], seed))
        return f"model {len(seeds) - 1}", accuracies[len(seeds) - 1]

    monkeypatch.setattr(overoptimisation, "train_proxy", train_proxy)
    monkeypatch.setattr(overoptimisation, "proxy_pairs", lambda spec, seed: [seed])
    spec = {"pairs": 250, "noise": 0.25, "min_accuracy": least}
    pairs, model, accuracy, draws = overoptimisation.proxy_draw(spec, 7, {})
    assert (pairs, model, accuracy) == ([7 + overoptimisation.DRAW_STRIDE * chosen], f"model {chosen}",
                                        accuracies[chosen])
    tried = min(len(accuracies), overoptimisation.MAX_DRAWS, next(
        (r + 1 for r, a in enumerate(accuracies) if a >= least), len(accuracies)))
    assert draws == accuracies[:tried]
    assert seeds == [(7 + overoptimisation.DRAW_STRIDE * r, 7) for r in range(tried)]  # the pairs move, the seed not


def test_the_ensemble_members_learn_beside_the_weak_proxys_final_draw(monkeypatch):
    from minirlhf.lab import settings_of

    class Scorer(torch.nn.Module):
        def score(self, prompts, completions, tokenizer=None):
            return [float(len(c)) for c in completions]

    calls = []

    def train_proxy(pairs, seed, settings):
        calls.append([_key(p) for p in pairs])
        return Scorer(), 0.5 if len(calls) == 1 else 0.6  # the first draw of the weak proxy is at chance

    monkeypatch.setattr(overoptimisation, "train_proxy", train_proxy)
    monkeypatch.setattr(overoptimisation, "rl_run", lambda proxy, settings, seed: {"steps": [0], "peak": 0})
    settings = settings_of("e", quick=False)
    settings["arms"] = ["weak", "ensemble"]
    arms = overoptimisation.run_seed(3, settings, ("weak",))
    redrawn = [_key(p) for p in overoptimisation.proxy_pairs(settings["proxies"]["weak"],
                                                              3 + overoptimisation.DRAW_STRIDE)]
    assert calls[1] == redrawn and all(member == redrawn for member in calls[2:])  # "same": the kept draw's pairs
    assert arms["weak"]["rm_draws"] == [0.5, 0.6] and arms["weak"]["rm_accuracy"] == 0.6
    assert settings_of("6", quick=False)["proxies"]["weak"]["min_accuracy"] == 0.0  # (6)'s record: the first draw


@hypothesis.settings(max_examples=60, deadline=None)
@hypothesis.given(st.integers(1, 6).flatmap(lambda seeds: st.integers(2, 9).flatmap(lambda points: st.lists(
    st.lists(st.floats(-1, 1), min_size=points, max_size=points), min_size=seeds, max_size=seeds))))
def test_the_turn_across_seeds_is_read_at_the_mean_curves_peak(curves):
    steps = [10 * t for t in range(len(curves[0]))]
    turn = overoptimisation.mean_turn(curves, steps)
    mean = [sum(c[t] for c in curves) / len(curves) for t in range(len(steps))]
    peak = steps.index(turn["peak_step"])
    assert turn["gold"] == [round(g, 3) for g in mean] and mean[peak] == pytest.approx(max(mean))
    # the mean curve never lies above its peak: it rises to it and falls from it, on average over the seeds
    assert turn["rise"] == pytest.approx(mean[peak] - mean[0]) and turn["rise"] >= -1e-12
    assert turn["fall"] == pytest.approx(mean[peak] - mean[-1]) and turn["fall"] >= -1e-12
    assert (turn["fall_stderr"] is None) == (len(curves) == 1) == (turn["rise_stderr"] is None)


def test_a_turn_in_half_the_seeds_is_a_smaller_turn_across_them():
    turned, flat = [0.1, 0.8, 0.2], [0.1, 0.5, 0.5]
    both = overoptimisation.mean_turn([turned, flat], [0, 10, 20])
    assert both["peak_step"] == 10 and both["fall"] == pytest.approx(0.3)  # (0.6 + 0.0) / 2
    assert both["fall_stderr"] == pytest.approx(0.3)  # stdev(0.6, 0.0) / √2
