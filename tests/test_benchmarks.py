"""Smoke tests of the benchmark scripts (benchmarks/*.py): each runs end to end in its --quick configuration.

They check the plumbing (worker processes, measurements, table, JSON, figure), not the numbers: the measured
results live in benchmarks/README.md. Each takes well under a minute with OMP_NUM_THREADS=1.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minirlhf.lab import EFFECTS

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"


def run_quick(script: str, out: Path) -> str:
    env = os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--quick", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.mark.slow
def test_learning_quick(tmp_path):
    stdout = run_quick("learning.py", tmp_path)
    for name in ("learning.json", "learning.md", "learning.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    report = json.loads((tmp_path / "learning.json").read_text())
    summaries = {s["method"]: s for s in report["summaries"]}
    assert list(summaries) == ["sft", "reinforce", "rloo", "ppo", "grpo"]
    # every method starts from the same checkpoint: the "before" accuracy is the SFT baseline's
    assert len({s["before"] for s in summaries.values()}) == 1
    # the models each method holds, as counted while it trained: p_ref exactly when β > 0, V only for PPO
    assert summaries["sft"]["models"] == "1 (policy)"
    for result in report["results"][1:]:
        roles = [m["role"] for m in result["census"]]
        expected = ["policy"] + ["reference"] * (result["config"]["beta"] > 0)
        expected += ["value head"] * (result["method"] == "ppo")
        assert roles == expected, (result["method"], roles)
    for s in summaries.values():
        assert 0.0 <= s["after"] <= 1.0 and s["peak_rss_mib"] > 0 and s["wall_s"] > 0
    rows = [line for line in (tmp_path / "learning.md").read_text().splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + len(summaries)  # header + one row per method
    assert "| GRPO |" in stdout


@pytest.mark.slow
def test_frontier_quick(tmp_path):
    stdout = run_quick("frontier.py", tmp_path)
    for name in ("frontier.json", "frontier.md", "frontier.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    report = json.loads((tmp_path / "frontier.json").read_text())
    results = {r["kind"]: r for r in report["results"]}
    assert set(results) == {"reward_model", "reference", "dpo", "ppo", "grpo"}
    assert abs(results["reference"]["final"]["kl"]) < 1e-4  # p_ref against itself
    for kind in ("dpo", "ppo", "grpo"):
        final = results[kind]["final"]
        assert -1.0 <= final["sentiment"] <= 1.0 and final["kl"] == final["kl"]  # in range, not NaN
    roles = {kind: [m["role"] for m in results[kind]["census"]] for kind in ("dpo", "ppo", "grpo")}
    assert roles["dpo"] == ["policy", "reference"]  # DPOConfig.precompute_ref is off by default
    with_ref = {kind: ["policy"] + ["reference"] * (results[kind]["beta"] > 0) for kind in ("ppo", "grpo")}
    assert roles["ppo"] == with_ref["ppo"] + ["value head", "reward model"]
    assert roles["grpo"] == with_ref["grpo"] + ["reward model"]
    assert "| PPO |" in stdout


@pytest.mark.slow
def test_zoo_sweep_quick(tmp_path):
    run_quick("zoo_sweep.py", tmp_path)
    runs = json.loads((tmp_path / "zoo_sweep.json").read_text())
    assert {run["settings"]["loss_type"] for run in runs} == {"simpo", "orpo", "kto"}
    assert all({"eval/sentiment", "eval/kl", "eval/response_length"} <= set(run["final"]) for run in runs)


@pytest.mark.slow
def test_grpo_variants_quick(tmp_path):
    stdout = run_quick("grpo_variants.py", tmp_path)
    for name in ("grpo_variants.json", "grpo_variants.md", "grpo_variants.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    report = json.loads((tmp_path / "grpo_variants.json").read_text())
    results = {r["variant"]: r for r in report["results"]}
    assert list(results) == ["grpo", "dapo", "dr-grpo", "gspo", "reinforce++"]
    # each variant ran its recipe (or baseline), not the trainer's defaults
    configs = {variant: r["config"] for variant, r in results.items()}
    assert configs["grpo"]["beta"] == 0.04 and configs["grpo"]["minibatch_size"] == 16  # --quick: 2 updates a batch
    assert configs["dapo"]["eps_high"] == 0.28 and configs["dapo"]["dynamic_sampling"]
    assert configs["dr-grpo"]["scale"] == "none" and configs["dr-grpo"]["aggregation"] == "constant"
    assert configs["gspo"]["importance_sampling_level"] == "sequence"
    assert configs["reinforce++"]["baseline"] == "reinforce++" and configs["reinforce++"]["minibatch_size"] is None
    for variant, r in results.items():
        assert [s["step"] for s in r["curve"]] == list(range(r["steps"])), variant
        assert all({"wall_s", "train_s", "cpu_s", "entropy", "response_length", "zero_std_groups"} <= s.keys()
                   for s in r["curve"]), variant
        assert [e["step"] for e in r["evals"]] == list(range(r["steps"] + 1)), variant  # --quick: every step + final
        assert all(0.0 <= e["accuracy"] <= 1.0 and e["train_s"] <= e["wall_s"] for e in r["evals"]), variant
        assert len(r["load_average_1min"]) == 2
    assert all("groups_kept" in s for s in results["dapo"]["curve"])
    assert results["dapo"]["completions"] >= results["grpo"]["completions"]  # dynamic sampling samples more
    summaries = {s["variant"]: s for s in report["summaries"]}
    assert summaries["grpo"]["train_ratio"] == 1.0 and summaries["grpo"]["cpu_ratio"] == 1.0
    assert summaries["reinforce++"]["clip_frac"] is None  # no ratio, no clip
    tables = (tmp_path / "grpo_variants.md").read_text()
    assert len([line for line in tables.splitlines() if line.startswith("| ")]) == 2 * (1 + len(results))
    assert "| DAPO |" in stdout and "| GSPO | grpo |" in stdout


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / "data" / "tiny-gpt2-lab" / "config.json").exists(),
                    reason="run scripts/build_lab_model.py")
def test_phenomena_quick(tmp_path):
    stdout = run_quick("phenomena.py", tmp_path)
    report = json.loads((tmp_path / "phenomena.json").read_text())
    assert set(report["effects"]) == set(EFFECTS) and report["seeds"] == [0]
    for key, effect in report["effects"].items():
        assert (tmp_path / f"phenomena_{key}.png").stat().st_size > 0, key
        assert effect["criterion"] and isinstance(effect["shows"], bool), key
        (seed,) = effect["seeds"]
        assert seed["wall_s"] > 0 and len(seed["load_before"]) == 3 and isinstance(seed["holds"], bool), key
        # (a) and (c) run on lab models of their own, (e) and (6) on the review model, (g) on arithmetic, (7) on long
        # sums, (2) distils into the arithmetic model: their settings name their own model (and task)
        own = {"a": "tiny-lab-coin", "c": "tiny-lab-chain", "e": "tiny", "g": "tiny-sft", "7": "tiny-calculator",
               "2": "tiny-sft", "6": "tiny"}
        assert effect["settings"]["model"] == own.get(key, "tiny-lab"), key
    lengths = report["effects"]["a"]["seeds"][0]["arms"]["seq-mean"]
    assert len(lengths["wrong_length"]) == report["effects"]["a"]["settings"]["grpo"]["steps"]  # one entry a step
    assert 0.0 <= report["effects"]["g"]["seeds"][0]["arms"]["eps=inf"]["final_accuracy"] <= 1.0
    displacement = report["effects"]["f"]["seeds"][0]["arms"]["DPO"]
    assert len(displacement["chosen_shift"]) == report["effects"]["f"]["settings"]["dpo"]["steps"]  # one a step
    weak = report["effects"]["e"]["seeds"][0]["arms"]["weak"]
    assert len(weak["gold"]) == len(weak["kl"]) == len(weak["steps"]) and weak["fall"] >= 0  # gold at each evaluation
    cut = report["effects"]["c"]["seeds"][0]["arms"]
    assert set(cut) == {"none", "mask", "soft"} and all(0.0 <= arm["held_out_long"] <= 1.0 for arm in cut.values())
    dead, grpo = report["effects"]["d"]["seeds"][0]["arms"], report["effects"]["d"]["settings"]["grpo"]
    assert dead["GRPO"]["answers_sampled"] == grpo["steps"] * grpo["prompts_per_step"] * grpo["group_size"]
    assert dead["dynamic sampling"]["answers_sampled"] >= dead["GRPO"]["answers_sampled"]
    assert all(kept <= grpo["prompts_per_step"] for kept in dead["GRPO-drop"]["groups_kept"])
    distill = report["effects"]["2"]["seeds"][0]["arms"]
    assert distill["distillation"]["samples"] == distill["GRPO"]["samples"]  # the same answers sampled per step
    assert 0.0 <= distill["teacher"]["final_accuracy"] <= 1.0
    control = report["effects"]["3"]["seeds"][0]["arms"]
    assert all(0.0 < control[arm]["mean_cov_frac"] <= 1.0 for arm in ("Clip-Cov", "KL-Cov"))
    for when in ("before", "after"):  # pass@k never falls with k: more answers, more chances
        passes = report["effects"]["5"]["seeds"][0]["arms"][when]
        curve = [passes[f"pass@{k}"] for k in report["effects"]["5"]["settings"]["pass_at_k"]["ks"]]
        assert curve == sorted(curve) and 0.0 <= curve[0] <= curve[-1] <= 1.0, when
    assert "shows=" in stdout


def _phenomena_main():
    sys.path.insert(0, str(BENCHMARKS))
    try:
        import phenomena
    finally:
        sys.path.remove(str(BENCHMARKS))
    return phenomena


@pytest.mark.parametrize("flags, named", [
    (["--seeds", "-1"], "--seeds"), (["--seeds", "0,0"], "--seeds"), (["--seeds", str(2**32)], "--seeds"),
    (["--effects", "a,a"], "--effects"), (["--effects", "zz"], "--effects"), (["--jobs", "0"], "--jobs"),
    (["--out", "{file}"], "--out"), (["--out", "{file}/below"], "--out"), (["--out", "/proc"], "--out"),
])
def test_phenomena_refuses_bad_flags_before_any_run(tmp_path, monkeypatch, capsys, flags, named):
    phenomena = _phenomena_main()
    monkeypatch.setattr(phenomena, "run_effects", lambda *a: pytest.fail("an effect ran before the flags were checked"))
    (tmp_path / "file").write_text("")
    if "/proc" in flags and not Path("/proc").is_dir():
        pytest.skip("no /proc, a folder nobody can write into, here")
    argv = ["--effects", "a", "--out", str(tmp_path / "out")] + [f.format(file=tmp_path / "file") for f in flags]
    with pytest.raises(SystemExit) as stop:
        phenomena.main(argv)
    assert stop.value.code == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_phenomena_writes_its_record_before_a_figure_can_fail(tmp_path, monkeypatch):
    """The runs take minutes to hours: a figure that fails (a plot error, a full disk for the PNG) loses no run."""
    phenomena = _phenomena_main()
    effect = {"shows": True, "effect_size": {"mean": 1.0}, "seeds": []}
    monkeypatch.setattr(phenomena, "run_effects", lambda *a: {"6": effect})
    monkeypatch.setattr(phenomena, "draw", lambda *a: (_ for _ in ()).throw(RuntimeError("the figure failed")))
    with pytest.raises(RuntimeError, match="the figure failed"):
        phenomena.main(["--effects", "6", "--seeds", "0", "--out", str(tmp_path)])
    assert json.loads((tmp_path / "phenomena.json").read_text())["effects"]["6"] == effect


def test_an_over_optimisation_figure_draws_an_arm_it_has_no_colour_for():
    """A proxy the user added under another name ("medium") is drawn in grey, not a KeyError after the runs."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    from minirlhf.lab import overoptimisation

    curve = {"kl": [0.0, 4.0], "gold": [0.1, 0.3]}
    fig, ax = plt.subplots()
    overoptimisation.plot(ax, [{"arms": {"weak": curve, "medium": curve}}])
    assert [line.get_label() for line in ax.get_lines()] == ["weak", "medium"]
    assert ax.get_lines()[1].get_color() == "C7"
    plt.close(fig)


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / "data" / "tiny-gpt2-lab" / "config.json").exists(),
                    reason="run scripts/build_lab_model.py")
def test_entropy_control_quick(tmp_path):
    run_quick("entropy_control.py", tmp_path)
    report = json.loads((tmp_path / "entropy_control.json").read_text())
    arms = report["seeds"]["0"]
    assert set(arms) == set(report["settings"]["arms"]) and "none" in arms
    for name, arm in arms.items():
        assert len(arm["entropy"]) == report["settings"]["grpo"]["steps"] and arm["final_entropy"] > 0, name
        assert (arm["mean_cov_frac"] is None) == ("cov" not in name), name  # only the covariance arms log it
