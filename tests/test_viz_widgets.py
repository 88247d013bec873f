"""Tests for minirlhf.course.viz and minirlhf.course.widgets: the plotted DATA matches the library, and slider changes
re-render with the new value (headless, Agg)."""

from __future__ import annotations

import json

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch
from matplotlib.figure import Figure

from minirlhf import losses
from minirlhf.course import toy, viz, widgets

matplotlib.use("Agg")


@pytest.fixture(autouse=True)
def no_open_figures():
    yield
    assert plt.get_fignums() == [], "a figure was left open in pyplot"


def line(ax, label):
    (match,) = [ln for ln in ax.get_lines() if ln.get_label() == label]
    return np.asarray(match.get_xdata(), dtype=float), np.asarray(match.get_ydata(), dtype=float)


def title(fig: Figure) -> str:
    return fig._suptitle.get_text()


def bar_heights(ax, index):
    return np.array([patch.get_height() for patch in ax.containers[index]])


# ----------------------------------------------------------------------------- PPO clip


@pytest.mark.parametrize("eps", [0.1, 0.2, 0.3])
def test_plot_clip_data(eps):
    fig = viz.plot_clip(eps)
    assert f"ε = {eps:.2f}" in title(fig)
    for ax, advantage in zip(fig.axes, (1.0, -1.0), strict=True):
        r, y = line(ax, "min(r·Â, clip(r)·Â)")
        expected = losses.clipped_surrogate(torch.tensor(r), torch.tensor(advantage), eps).numpy()
        np.testing.assert_allclose(y, expected)
        points_r, points_y = line(ax, "table rows")
        np.testing.assert_allclose(points_r, viz.LECTURE_RATIOS)
        expected = losses.clipped_surrogate(torch.tensor(points_r), torch.tensor(advantage), eps).numpy()
        np.testing.assert_allclose(points_y, expected)
        # the zero-gradient shading starts right after 1 + ε (Â > 0) or ends right before 1 - ε (Â < 0)
        (shade,) = [c for c in ax.collections if c.get_label() == "zero gradient"]
        xs = np.concatenate([path.vertices[:, 0] for path in shade.get_paths()])
        if advantage > 0:
            assert 1 + eps <= xs.min() <= 1 + eps + 0.01 and xs.max() == pytest.approx(2.0)
        else:
            assert xs.min() == pytest.approx(0.0) and 1 - eps - 0.01 <= xs.max() <= 1 - eps


def test_clip_explorer_reacts_to_slider():
    explorer = widgets.clip_explorer()
    slider = explorer.sliders["eps"]
    assert slider.continuous_update is False
    assert explorer.output.layout.height == widgets.OUTPUT_HEIGHT
    assert "ε = 0.20" in title(explorer.figure)
    assert "r=1.5: +1.20 (no grad)" in explorer.summary
    slider.value = 0.3
    assert "ε = 0.30" in title(explorer.figure)
    assert explorer.summary.startswith("ε = 0.30")
    assert "r=1.5: +1.30 (no grad)" in explorer.summary and "r=0.5: -0.70 (no grad)" in explorer.summary
    _, y = line(explorer.figure.axes[0], "table rows")
    np.testing.assert_allclose(y, [0.5, 1.0, 1.3])


def test_clip_higher_explorer_moves_each_edge():
    """ε_high moves only the edge that a positive Â runs into, ε_low only the negative side's (DAPO's clip-higher)."""
    explorer = widgets.clip_higher_explorer(eps_low=0.2, eps_high=0.28)
    assert set(explorer.sliders) == {"eps_low", "eps_high"}
    assert all(slider.continuous_update is False for slider in explorer.sliders.values())
    assert "ε_low = 0.20, ε_high = 0.28" in title(explorer.figure)
    assert explorer.summary.startswith("ε_low = 0.20, ε_high = 0.28")
    assert "r=1.5: +1.28 (no grad)" in explorer.summary and "r=0.5: -0.80 (no grad)" in explorer.summary
    positive, negative = explorer.figure.axes
    for ax, low, high in ((positive, 1.28, 2.0), (negative, 0.0, 0.8)):  # shaded: where the gradient is 0
        (shade,) = [c for c in ax.collections if c.get_label() == "zero gradient"]
        xs = np.concatenate([path.vertices[:, 0] for path in shade.get_paths()])
        assert low - 0.01 <= xs.min() <= low + 0.01 and high - 0.01 <= xs.max() <= high + 0.01
    explorer.sliders["eps_high"].value = 0.4
    assert explorer.summary.startswith("ε_low = 0.20, ε_high = 0.40") and "r=1.5: +1.40 (no grad)" in explorer.summary
    explorer.sliders["eps_low"].value = 0.3
    assert "r=0.5: -0.70 (no grad)" in explorer.summary
    _, y = line(explorer.figure.axes[0], "table rows")
    np.testing.assert_allclose(y, [0.5, 1.0, 1.4])
    symmetric = widgets.render_clip_higher(0.2, 0.2)[0]  # ε_high = ε_low: PPO's curve
    np.testing.assert_allclose(line(symmetric.axes[0], "min(r·Â, clip(r)·Â)")[1],
                               line(viz.plot_clip(0.2).axes[0], "min(r·Â, clip(r)·Â)")[1])


def test_ratio_zoo_explorer_draws_each_method_and_reads_its_weights():
    """Every method has its f and ∂f/∂r curve on both signs of Â; the summary's weights are where each one stops."""
    explorer = widgets.ratio_zoo_explorer(eps=0.2, eps_high=0.28, dual_clip_c=3.0, tau=1.0)
    assert set(explorer.sliders) == {"eps", "eps_high", "dual_clip_c", "tau"}
    assert all(slider.continuous_update is False for slider in explorer.sliders.values())
    assert len(explorer.figure.axes) == 4
    top_left = explorer.figure.axes[0]
    assert [line.get_label() for line in top_left.get_lines()[:5]] == list(viz.ZOO_LABELS.values())
    summary = explorer.summary
    assert "PPO clip: r=0.5: +0.50/+0.00, r=1.5: +0.00/-1.50" in summary  # Â > 0 stops above 1.28, Â < 0 below 0.8
    assert "dual-clip: r=0.5: +0.50/+0.00, r=1.5: +0.00/-1.50, r=3: +0.00/+0.00" in summary  # the floor c Â at r ≥ 3
    assert "CISPO: r=0.5: +0.80/-0.80, r=1.5: +1.28/-1.28" in summary  # capped, never zero
    explorer.sliders["dual_clip_c"].value = 2.0
    assert "dual-clip: r=0.5: +0.50/+0.00, r=1.5: +0.00/-1.50, r=3: +0.00/+0.00" in explorer.summary
    explorer.sliders["eps_high"].value = 0.6  # r = 1.5 is inside the range now: the clip lets it through
    assert "PPO clip: r=0.5: +0.50/+0.00, r=1.5: +1.50/-1.50" in explorer.summary
    assert "CISPO: r=0.5: +0.80/-0.80, r=1.5: +1.50/-1.50" in explorer.summary
    slope = explorer.figure.axes[2].get_lines()[0].get_ydata()  # PPO clip's ∂f/∂r for Â = +1: 1 inside, 0 above
    ratios = explorer.figure.axes[2].get_lines()[0].get_xdata()
    assert np.all(slope[ratios > 1.61] == 0) and np.allclose(slope[(ratios > 0.1) & (ratios < 1.59)], 1)


# ----------------------------------------------------------------------------- optimal policy


def test_optimal_policy_explorer_bars_follow_beta():
    explorer = widgets.optimal_policy_explorer(beta=0.5)
    _, p_ref, rewards = toy.toy_bandit()
    for beta in (0.05, 0.5, 3.0):
        explorer.sliders["beta"].value = beta
        ax = explorer.figure.axes[0]
        np.testing.assert_allclose(bar_heights(ax, 0), p_ref.numpy())
        np.testing.assert_allclose(bar_heights(ax, 1), toy.optimal_policy(p_ref, rewards, beta).numpy())
        assert f"β = {beta:.2f}" in title(explorer.figure)
        kl = float(toy.exact_kl(toy.optimal_policy(p_ref, rewards, beta), p_ref))
        assert f"KL(p* ‖ p_ref) = {kl:.3f}" in title(explorer.figure)
        assert explorer.summary.startswith(f"β = {beta:.2f}")


def test_plot_optimal_policy_custom_inputs():
    fig = viz.plot_optimal_policy(1.0, p_ref=[0.5, 0.5], rewards=[1.0, 0.0])
    np.testing.assert_allclose(bar_heights(fig.axes[0], 1), toy.optimal_policy([0.5, 0.5], [1.0, 0.0], 1.0))
    assert [t.get_text().split("\n")[0] for t in fig.axes[0].get_xticklabels()] == ["0", "1"]


# ----------------------------------------------------------------------------- GAE


def test_gae_explorer_two_sliders():
    explorer = widgets.gae_explorer()
    traj = toy.toy_trajectory()
    for gamma, lam in ((1.0, 0.0), (0.9, 0.5), (1.0, 1.0)):
        explorer.sliders["gamma"].value = gamma
        explorer.sliders["lam"].value = lam
        advantages, returns = losses.gae(traj.rewards, traj.values, traj.mask, gamma, lam)
        ax = explorer.figure.axes[0]
        np.testing.assert_allclose(bar_heights(ax, 0), advantages[0].numpy())
        np.testing.assert_allclose(line(ax, "return Â_t + V(s_t)")[1], returns[0].numpy())
        assert f"γ = {gamma:.2f}, λ = {lam:.2f}" in title(explorer.figure)
        assert explorer.summary.startswith(f"γ = {gamma:.2f}, λ = {lam:.2f}")


# ----------------------------------------------------------------------------- DPO


def test_dpo_curves_weight_is_sigmoid():
    h = np.linspace(-5, 5, 11)
    loss, weight = viz.dpo_curves(0.5, h)
    np.testing.assert_allclose(weight, 1 / (1 + np.exp(0.5 * h)))  # σ(-β h)
    np.testing.assert_allclose(loss, np.log1p(np.exp(-0.5 * h)))  # -log σ(β h)
    ipo_loss, _ = viz.dpo_curves(0.5, h, "ipo")
    np.testing.assert_allclose(ipo_loss, (h - 1.0) ** 2)


def test_dpo_explorer_marks_quiz_point():
    explorer = widgets.dpo_explorer()
    for beta in (0.1, 1.0):
        explorer.sliders["beta"].value = beta
        ax_loss, ax_weight = explorer.figure.axes
        h, weight = line(ax_weight, "sigmoid")
        np.testing.assert_allclose(weight, 1 / (1 + np.exp(beta * h)))
        quiz_points = [ln for ln in ax_weight.get_lines() if ln.get_marker() == "o"]
        assert quiz_points[0].get_xdata()[0] == pytest.approx(2.1)
        assert quiz_points[0].get_ydata()[0] == pytest.approx(1 / (1 + np.exp(beta * 2.1)))
        assert f"β = {beta:.2f}" in title(explorer.figure)
        assert f"{beta * 2.1:.3f}" in explorer.summary


def test_plot_dpo_with_ipo():
    fig = viz.plot_dpo(0.5, loss_types=("sigmoid", "ipo"))
    h, loss = line(fig.axes[0], "ipo")
    np.testing.assert_allclose(loss, (h - 1.0) ** 2)


# ----------------------------------------------------------------------------- GRPO group size


def test_group_size_explorer():
    explorer = widgets.group_size_explorer(G=4, p_correct=0.3)
    explorer.sliders["G"].value = 16
    assert "G = 16" in title(explorer.figure)
    assert explorer.summary.startswith("G = 16")
    ax_std, ax_zero = explorer.figure.axes
    x, y = line(ax_std, "G = 16")
    assert x[0] == 16 and y[0] == pytest.approx(toy.group_baseline_noise(0.3, 16).baseline_std)
    sizes, theory = line(ax_zero, "p^G + (1-p)^G")
    np.testing.assert_allclose(theory, 0.3**sizes + 0.7**sizes)


# ----------------------------------------------------------------------------- KL estimators


def test_kl_estimator_explorer_and_plot():
    explorer = widgets.kl_estimator_explorer(beta=1.0)
    assert "β = 1.00" in title(explorer.figure) and explorer.summary.startswith("β = 1.00")
    study = toy.kl_estimator_study([0.5, 0.5], [0.25, 0.75], sample_sizes=(1, 10), n_trials=100)
    fig = viz.plot_kl_estimators(study)
    for name in ("k1", "k2", "k3"):
        np.testing.assert_allclose(line(fig.axes[0], name)[1], study.bias[name])
        np.testing.assert_allclose(line(fig.axes[1], name)[1], study.std[name])


# ----------------------------------------------------------------------------- histories


HISTORY = [{"step": s, "loss": 1.0 / (s + 1), **({"eval/acc": s / 100} if s % 10 == 0 else {})}
           for s in range(25)]


def test_plot_history_skips_missing_values():
    fig = viz.plot_history(HISTORY + [{"step": 25, "loss": None}], ["loss", "eval/acc"])
    ax_loss, ax_acc = [ax for ax in fig.axes if ax.get_visible()]
    steps, values = ax_loss.get_lines()[0].get_data()
    np.testing.assert_allclose(steps, range(25))
    np.testing.assert_allclose(values, [1.0 / (s + 1) for s in range(25)])
    steps, values = ax_acc.get_lines()[0].get_data()
    np.testing.assert_allclose(steps, [0, 10, 20])
    np.testing.assert_allclose(values, [0.0, 0.1, 0.2])
    assert ax_acc.get_title() == "eval/acc = 0.2"
    assert "step 25" in title(fig)


def test_plot_history_layout():
    keys = ["a", "b", "c", "d"]
    fig = viz.plot_history([{"step": 0, "a": 1.0}], keys)
    assert sum(ax.get_visible() for ax in fig.axes) == 4
    assert tuple(fig.get_size_inches()) == (viz.WIDTH, 2 * viz.HEIGHT)
    assert [ax.get_title() for ax in fig.axes if ax.get_visible()][1] == "b (no data)"


def test_plot_frontier_groups_and_sorts_by_kl():
    runs = [
        {"method": "ppo", "label": "β=0.01", "kl": 3.0, "reward": 0.9},
        {"method": "ppo", "label": "β=0.1", "kl": 1.0, "reward": 0.6},
        {"method": "dpo", "label": "β=0.1", "kl": 2.0, "reward": 0.7},
    ]
    fig = viz.plot_frontier(runs)
    ax = fig.axes[0]
    np.testing.assert_allclose(line(ax, "ppo")[0], [1.0, 3.0])
    np.testing.assert_allclose(line(ax, "ppo")[1], [0.6, 0.9])
    np.testing.assert_allclose(line(ax, "dpo")[1], [0.7])
    assert {t.get_text() for t in ax.texts} == {"β=0.01", "β=0.1"}
    assert ax.get_ylabel() == "reward"


def test_plot_frontier_axis_labels_are_parameters():
    runs = [{"method": "dpo", "label": "β=0.1", "kl": 2.0, "reward": 0.7}]
    ax = viz.plot_frontier(runs, ylabel="sentiment (VADER)", xlabel="sequence KL").axes[0]
    assert ax.get_ylabel() == "sentiment (VADER)" and ax.get_xlabel() == "sequence KL"


def test_plot_logps_reports_moves():
    history = [{"step": s, "logps/chosen": -10 + 0.05 * s, "logps/rejected": -10 - 1.0 * s} for s in range(3)]
    fig = viz.plot_logps(history)
    np.testing.assert_allclose(line(fig.axes[0], "logps/rejected")[1], [-10, -11, -12])
    assert "logps/chosen +0.10" in title(fig) and "logps/rejected -2.00" in title(fig)


def test_plot_kl_gradients_bars_are_the_exact_gradients():
    labels, p_ref, rewards = toy.toy_bandit()
    logits = toy.optimal_policy(p_ref, rewards, 0.2).log()
    fig = viz.plot_kl_gradients(logits, p_ref, labels, "k3")
    grads = toy.kl_gradients(logits, p_ref)
    ax_grad, ax_p = fig.axes
    for index, grad in enumerate((grads.reverse_kl, grads.in_loss_k3, grads.forward_kl)):
        np.testing.assert_allclose(bar_heights(ax_grad, index), grad.numpy())
    np.testing.assert_allclose(bar_heights(ax_p, 1), torch.softmax(logits, -1).numpy())
    assert all(ax.get_ylabel() and ax.get_xlabel() for ax in fig.axes)


def test_plot_pipeline_has_every_stage():
    fig = viz.plot_pipeline()
    texts = {text.get_text() for text in fig.axes[0].texts}
    assert {name for name, _, _ in viz.PIPELINE} <= texts
    assert tuple(fig.get_size_inches()) == (viz.WIDTH, viz.HEIGHT)


def test_every_axis_of_the_toy_plots_is_labelled():
    for fig in (viz.plot_clip(), viz.plot_gae(1.0, 0.95), viz.plot_optimal_policy(0.5), viz.plot_dpo(0.1)):
        assert fig.axes[0].get_ylabel() and all(ax.get_xlabel() for ax in fig.axes)


def test_figures_share_width():
    figs = [viz.plot_clip(), viz.plot_optimal_policy(0.5), viz.plot_gae(1.0, 0.95), viz.plot_dpo(0.1),
            viz.plot_frontier([]), viz.plot_history(HISTORY, ["loss"])]
    assert {tuple(fig.get_size_inches()) for fig in figs} == {(viz.WIDTH, viz.HEIGHT)}


# ----------------------------------------------------------------------------- live plot


def test_live_history_plot_redraws_every_n_steps():
    live = widgets.LiveHistoryPlot(["loss", "eval/acc"], every=10, notebook=True)
    for row in HISTORY[:10]:
        live(row)
    assert live.figure is not None  # drawn at step 0
    for row in HISTORY[10:]:
        live(row)
    steps, _ = live.figure.axes[0].get_lines()[0].get_data()
    assert list(steps) == list(range(21))  # last redraw at step 20
    assert live.output.layout.height is not None


def test_live_history_plot_prints_without_notebook(capsys):
    live = widgets.LiveHistoryPlot(["loss", "eval/acc"], every=10, notebook=False)
    assert live.output is None
    for row in HISTORY[:11]:
        live(row)
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed == ["step 0: loss=1 eval/acc=0", "step 10: loss=0.09091 eval/acc=0.1"]


def test_plot_demo_draws_the_demo_figures_from_its_metrics(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no grpo/metrics.jsonl in .*: run `python -m minirlhf demo"):
        viz.plot_demo(tmp_path)
    runs = {"grpo": [{"step": 0, "eval/accuracy": 0.5}, {"step": 1, "reward": 0.4, "kl_ref": 0.01}],
            "dpo": [{"step": 0, "eval/sentiment": 0.1}, {"step": 1, "loss": 0.69, "rewards/accuracy": 0.5,
                                                         "logps/chosen": -20.0, "logps/rejected": -21.0}]}
    for run, rows in runs.items():
        (tmp_path / run).mkdir()
        (tmp_path / run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert viz.read_metrics(tmp_path / "dpo" / "metrics.jsonl") == runs["dpo"]
    paths = viz.plot_demo(tmp_path)
    assert [p.name for p in paths] == ["grpo_training.png", "dpo_logps.png", "dpo_training.png"]
    assert all(p.stat().st_size > 0 for p in paths)
    drawn = []
    monkeypatch.setattr(viz, "plot_history", lambda rows, keys, **_: drawn.append(keys) or Figure())
    viz.plot_demo(tmp_path)
    assert drawn[-2] == ["reward", "eval/accuracy", "kl_ref"]  # the training batches' KL (β > 0); then dpo's
    (tmp_path / "grpo" / "metrics.jsonl").write_text(json.dumps({"step": 0, "eval/kl_ref": 0.0}) + "\n")
    viz.plot_demo(tmp_path)
    assert drawn[-2] == ["reward", "eval/accuracy", "eval/kl_ref"]  # KL at evaluation, whatever β
    (tmp_path / "grpo" / "metrics.jsonl").write_text(json.dumps({"step": 0, "reward": 0.1}) + "\n")
    viz.plot_demo(tmp_path)
    assert drawn[-2] == ["reward", "eval/accuracy"]  # no KL measured: no empty KL panel


def test_read_metrics_names_the_file_and_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with pytest.raises(FileNotFoundError, match="no metrics file at .*metrics.jsonl"):
        viz.read_metrics(path)
    path.write_text('{"step": 0}\n{"step": 1,\n')
    with pytest.raises(ValueError, match="metrics.jsonl, line 2: not a JSON object"):
        viz.read_metrics(path)
