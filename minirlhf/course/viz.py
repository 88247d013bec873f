"""Matplotlib figures for the notebooks and explorers.

Every function returns a closed `matplotlib.figure.Figure`: Jupyter shows a returned figure once, nothing
stays open in pyplot, and the same code runs headless (Agg) in tests. The curves are never re-derived
here: they come from `minirlhf.losses` and `minirlhf.course.toy`, so a plot shows what the library computes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from minirlhf import losses
from minirlhf.course import toy

WIDTH = 9.0  # inches: every figure has this width
HEIGHT = 3.6  # inches per row of panels
LECTURE_RATIOS = (0.5, 1.0, 1.5)  # the r_t values in the lecture's clipping tables
LECTURE_MARGIN = 2.1  # the DPO quiz: log-ratios 0.1 (chosen) and -2.0 (rejected)


def new_figure(ncols: int = 1, nrows: int = 1) -> tuple[Figure, np.ndarray]:
    """A WIDTH-wide figure with an (nrows, ncols) array of axes, already detached from pyplot."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(WIDTH, HEIGHT * nrows), squeeze=False)
    plt.close(fig)
    return fig, axes


def _finish(fig: Figure, title: str) -> Figure:
    fig.suptitle(title)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------------------
# PPO
# ---------------------------------------------------------------------------------------------------------


def plot_clip(eps: float = 0.2, ratios: Sequence[float] = LECTURE_RATIOS, r_max: float = 2.0,
              eps_high: float | None = None) -> Figure:
    """min(r Â, clip(r, 1-ε, 1+ε_high) Â) against r for Â = +1 and Â = -1 (ε_high = None: ε, PPO's symmetric clip).

    Shaded: ratios where the derivative is zero (clipping has switched the gradient off).
    Dots: the lecture's table rows (r = 0.5, 1.0, 1.5), evaluated at the current ε.
    """
    fig, axes = new_figure(ncols=2)
    r = np.linspace(0.0, r_max, 401)
    high = eps if eps_high is None else eps_high
    for ax, advantage in zip(axes[0], (1.0, -1.0), strict=True):
        objective, grad = toy.clip_curve(r, advantage, eps, eps_high)
        ax.plot(r, r * advantage, "--", color="gray", lw=1, label="unclipped r·Â")
        ax.plot(r, objective.numpy(), color="C0", lw=2, label="min(r·Â, clip(r)·Â)")
        ax.fill_between(r, 0, 1, where=(grad == 0).numpy(), transform=ax.get_xaxis_transform(),
                        color="C3", alpha=0.15, label="zero gradient")
        points, _ = toy.clip_curve(ratios, advantage, eps, eps_high)
        ax.plot(ratios, points.numpy(), "o", color="C1", label="table rows")
        for x, y in zip(ratios, points.tolist(), strict=True):
            ax.annotate(f"{y:+.2f}", (x, y), textcoords="offset points", xytext=(4, 6), fontsize=8)
        for edge in (1 - eps, 1 + high):
            ax.axvline(edge, color="gray", lw=0.8, ls=":")
        ax.set_title(f"Â = {advantage:+.0f}")
        ax.set_xlabel("ratio r = p_θ / p_θold")
        ax.set_xlim(0, r_max)
    axes[0, 0].set_ylabel("objective (maximised)")
    axes[0, 0].legend(fontsize=8, loc="upper left")
    if eps_high is None:
        return _finish(fig, f"PPO clipped surrogate, ε = {eps:.2f}")
    return _finish(fig, f"clip-higher surrogate, ε_low = {eps:.2f}, ε_high = {eps_high:.2f}")


ZOO_LABELS = {"clip": "PPO clip", "dual-clip": "dual-clip", "cispo": "CISPO", "sapo": "SAPO", "gmpo": "GMPO"}


def plot_ratio_zoo(eps: float = 0.2, eps_high: float = 0.2, dual_clip_c: float = 3.0, tau: float = 1.0,
                   r_max: float = 4.0) -> Figure:
    """The ratio zoo: each method's objective f(r, Â) (top) and its slope ∂f/∂r (bottom) against r, for Â = +1
    (left) and Â = -1 (right), from ``losses.ratio_function_grid`` (the loss code itself, through autograd). SAPO
    uses one temperature τ on both sides. Where a slope is 0 the method stops that token's gradient. The slope
    panels stop at ±2: CISPO's, clip(r)·Â/r, grows without bound as r → 0."""
    fig, axes = new_figure(ncols=2, nrows=2)
    r = torch.linspace(0.02, r_max, 400, dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    for k, (name, label) in enumerate(ZOO_LABELS.items()):
        grid = losses.ratio_function_grid(name, r, advantages, eps, eps_high, dual_clip_c=dual_clip_c, tau_pos=tau,
                                          tau_neg=tau)
        style = {"color": f"C{k}", "lw": 2.2 - 0.3 * k, "ls": ("-", "--", "-.", ":", (0, (5, 1)))[k]}
        for column in range(2):
            axes[0, column].plot(r, grid["objective"][:, column], label=label, **style)
            axes[1, column].plot(r, grid["slope"][:, column], **style)
    for column, advantage in enumerate((1.0, -1.0)):
        axes[0, column].set_title(f"f(r, Â), Â = {advantage:+.0f}")
        axes[1, column].set_title(f"∂f/∂r, Â = {advantage:+.0f}  (0: no gradient)")
        axes[1, column].set_xlabel("ratio r = p_θ / p_θold")
        axes[1, column].set_ylim(-2, 2)  # CISPO's slope clip(r)·Â/r grows without bound as r → 0
        for ax in axes[:, column]:
            ax.axhline(0, color="gray", lw=0.6)
            for edge in (1 - eps, 1 + eps_high):
                ax.axvline(edge, color="gray", lw=0.8, ls=":")
            ax.set_xlim(0, r_max)
    axes[0, 0].legend(fontsize=8, loc="upper left")
    return _finish(fig, f"f(r, Â) of each method: ε = {eps:.2f}, ε_high = {eps_high:.2f}, dual-clip c = "
                        f"{dual_clip_c:.1f}, SAPO τ = {tau:.2f}")


# ---------------------------------------------------------------------------------------------------------
# KL-regularised objective
# ---------------------------------------------------------------------------------------------------------


def plot_optimal_policy(beta: float, p_ref: Sequence[float] | torch.Tensor | None = None,
                        rewards: Sequence[float] | torch.Tensor | None = None,
                        labels: Sequence[str] | None = None) -> Figure:
    """Bars of p_ref and p* = p_ref exp(R/β)/Z per response (defaults: toy.toy_bandit()), with
    E_p*[R] and KL(p* ‖ p_ref) in the title."""
    default_labels, default_p_ref, default_rewards = toy.toy_bandit()
    p_ref = toy.as_tensor(default_p_ref if p_ref is None else p_ref)
    rewards = toy.as_tensor(default_rewards if rewards is None else rewards)
    if labels is None:
        labels = default_labels if len(p_ref) == len(default_labels) else [str(i) for i in range(len(p_ref))]
    p_star = toy.optimal_policy(p_ref, rewards, beta)

    fig, axes = new_figure()
    ax: Axes = axes[0, 0]
    x = np.arange(len(p_ref))
    ax.bar(x - 0.2, p_ref.numpy(), width=0.4, color="gray", label="p_ref")
    ax.bar(x + 0.2, p_star.numpy(), width=0.4, color="C0", label="p*")
    ticks = [f"{name}\nR = {reward:+.1f}" for name, reward in zip(labels, rewards.tolist(), strict=True)]
    ax.set_xticks(x, ticks)
    ax.set_xlabel("response y")
    ax.set_ylabel("probability")
    ax.set_ylim(0, 1)
    ax.legend()
    reward = float(toy.expected_reward(p_star, rewards))
    kl = float(toy.exact_kl(p_star, p_ref))
    return _finish(fig, f"β = {beta:.2f}: E_p*[R] = {reward:.3f}, KL(p* ‖ p_ref) = {kl:.3f}")


def plot_kl_estimators(study: toy.KLEstimatorStudy, title: str | None = None) -> Figure:
    """Bias (left) and standard deviation (right) of the N-sample k1/k2/k3 estimates against N."""
    fig, axes = new_figure(ncols=2)
    ax_bias, ax_std = axes[0]
    for name in study.mean:
        ax_bias.plot(study.sample_sizes, study.bias[name], "o-", label=name)
        ax_std.plot(study.sample_sizes, study.std[name], "o-", label=name)
    ax_bias.axhline(0, color="gray", lw=0.8)
    ax_bias.set_ylabel("bias (mean estimate - exact KL)")
    ax_std.set_ylabel("std of the estimate")
    ax_std.set_yscale("log")
    for ax in (ax_bias, ax_std):
        ax.set_xscale("log")
        ax.set_xlabel("samples N")
        ax.legend(fontsize=8)
    return _finish(fig, title or f"KL estimators, exact KL = {study.exact:.4f}")


def plot_kl_gradients(logits: Sequence[float] | torch.Tensor, p_ref: Sequence[float] | torch.Tensor,
                      labels: Sequence[str], title: str) -> Figure:
    """Bars per response of the exact gradients in toy.kl_gradients: the in-loss k3 term against the gradients
    of both KL directions (left), and p_θ beside p_ref (right)."""
    grads = toy.kl_gradients(logits, p_ref)
    fig, axes = new_figure(ncols=2)
    ax_grad, ax_p = axes[0]
    x = np.arange(len(labels))
    bars = (("∇KL(p_θ ‖ p_ref), reverse", grads.reverse_kl, "C0"), ("E[∇k3], k3 in the loss", grads.in_loss_k3, "C1"),
            ("∇KL(p_ref ‖ p_θ), forward", grads.forward_kl, "C2"))
    for i, (label, grad, color) in enumerate(bars):
        ax_grad.bar(x + (i - 1) * 0.27, grad.numpy(), width=0.27, color=color, label=label)
    ax_grad.axhline(0, color="black", lw=0.6)
    ax_grad.set_ylabel("d/dθ_y (descent lowers θ_y if > 0)")
    ax_grad.legend(fontsize=7)
    ax_p.bar(x - 0.2, toy.as_tensor(p_ref).numpy(), width=0.4, color="gray", label="p_ref")
    ax_p.bar(x + 0.2, torch.softmax(toy.as_tensor(logits), -1).numpy(), width=0.4, color="C0", label="p_θ")
    ax_p.set_ylabel("probability")
    ax_p.legend(fontsize=8)
    for ax in (ax_grad, ax_p):
        ax.set_xticks(x, labels)
        ax.set_xlabel("response y")
    return _finish(fig, title)


# ---------------------------------------------------------------------------------------------------------
# The post-training pipeline
# ---------------------------------------------------------------------------------------------------------

PIPELINE = (
    ("Pretraining", "next-token prediction\non web text", "base model"),
    ("SFT", "imitate written\ndemonstrations (x, y)", "p_ref = p_SFT"),
    ("Reward model", "Bradley–Terry on\npairs y_w ≻ y_l", "RM(x, y)"),
    ("Policy optimisation", "max E[RM] − β KL(p_θ ‖ p_ref)\nPPO · REINFORCE/RLOO · GRPO", "p_θ"),
)


def plot_pipeline() -> Figure:
    """The post-training pipeline as boxes and arrows: pretraining -> SFT -> reward model -> policy
    optimisation, with DPO's shortcut from the preference pairs straight to the policy, and where each
    notebook sits."""
    fig, axes = new_figure()
    ax: Axes = axes[0, 0]
    width, gap = 0.2, 0.05
    centres = [width / 2 + i * (width + gap) for i in range(len(PIPELINE))]
    for centre, (name, how, output) in zip(centres, PIPELINE, strict=True):
        ax.add_patch(plt.Rectangle((centre - width / 2, 0.42), width, 0.34, fc="#e8f0fa", ec="C0", lw=1.5))
        ax.text(centre, 0.70, name, ha="center", va="center", fontsize=10, weight="bold")
        ax.text(centre, 0.54, how, ha="center", va="center", fontsize=7.5)
        ax.text(centre, 0.36, f"→ {output}", ha="center", va="top", fontsize=8, color="C0")
    for left, right in zip(centres, centres[1:]):
        ax.annotate("", (right - width / 2, 0.59), (left + width / 2, 0.59), arrowprops={"arrowstyle": "->", "lw": 1.5})
    # DPO skips the reward model: the same pairs, straight into the policy
    ax.annotate("", (centres[3], 0.76), (centres[1] + 0.03, 0.76),
                arrowprops={"arrowstyle": "->", "lw": 1.2, "color": "C3", "connectionstyle": "arc3,rad=-0.35"})
    ax.text((centres[1] + centres[3]) / 2, 0.97, "DPO family: preference pairs → policy, no reward model",
            ha="center", va="center", fontsize=8, color="C3")
    notebooks = ("load_model('tiny')", "train_sft · load_model('tiny-sft')", "train_reward_model",
                 "train_ppo · train_reinforce\ntrain_grpo · train_dpo")
    for centre, note in zip(centres, notebooks, strict=True):
        ax.text(centre, 0.18, note, ha="center", va="center", fontsize=7.5, color="gray")
    ax.set_xlim(0, 1)
    ax.set_ylim(0.1, 1.0)
    ax.axis("off")
    return _finish(fig, "Post-training pipeline: each stage starts from the previous stage's model")


# ---------------------------------------------------------------------------------------------------------
# GAE
# ---------------------------------------------------------------------------------------------------------


def plot_gae(gamma: float, lam: float, trajectory: toy.ToyTrajectory | None = None) -> Figure:
    """Per-token GAE advantages Â_t (bars), returns and critic values (lines), rewards (crosses)."""
    traj = trajectory or toy.toy_trajectory()
    advantages, returns = toy.toy_gae(gamma, lam, traj)
    t = np.arange(advantages.shape[0])
    fig, axes = new_figure()
    ax: Axes = axes[0, 0]
    ax.bar(t, advantages.numpy(), color="C0", alpha=0.7, label="advantage Â_t")
    ax.plot(t, returns.numpy(), "o-", color="C2", label="return Â_t + V(s_t)")
    ax.plot(t, traj.values[0].numpy(), "s--", color="gray", label="value V(s_t)")
    ax.plot(t, traj.rewards[0].numpy(), "x", color="C3", ms=8, label="reward r_t")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("token t")
    ax.set_ylabel("reward units")
    ax.set_xticks(t)
    ax.legend(fontsize=8, loc="best")
    return _finish(fig, f"GAE, γ = {gamma:.2f}, λ = {lam:.2f}")


# ---------------------------------------------------------------------------------------------------------
# DPO
# ---------------------------------------------------------------------------------------------------------


def dpo_curves(beta: float, margins: Sequence[float] | np.ndarray,
               loss_type: str = "sigmoid") -> tuple[np.ndarray, np.ndarray]:
    """DPO loss and its gradient weight at each log-ratio margin h = log p_θ/p_ref(y_w) - log p_θ/p_ref(y_l).

    The weight is -(1/β) dL/dh, by autograd through losses.dpo_loss; for the sigmoid loss it equals
    σ(-β h): pairs the model already ranks correctly by a wide margin barely move it.
    """
    h = toy.as_tensor(margins).clone().requires_grad_(True)
    zeros = torch.zeros_like(h)
    loss, _, _ = losses.dpo_loss(h, zeros, zeros, zeros, beta, loss_type=loss_type)
    (grad,) = torch.autograd.grad(loss.sum(), h)
    return loss.detach().numpy(), (-grad / beta).numpy()


def plot_dpo(beta: float, margin_range: tuple[float, float] = (-6.0, 6.0),
             quiz_margin: float = LECTURE_MARGIN, loss_types: Sequence[str] = ("sigmoid",)) -> Figure:
    """DPO loss (left) and gradient weight σ(-β h) (right) against the log-ratio margin h,
    with the lecture's quiz pair (h = 0.1 - (-2.0) = 2.1) marked."""
    h = np.linspace(*margin_range, 401)
    fig, axes = new_figure(ncols=2)
    ax_loss, ax_weight = axes[0]
    for i, loss_type in enumerate(loss_types):
        loss, weight = dpo_curves(beta, h, loss_type)
        ax_loss.plot(h, loss, color=f"C{i}", label=loss_type)
        ax_weight.plot(h, weight, color=f"C{i}", label=loss_type)
        quiz_loss, quiz_weight = dpo_curves(beta, [quiz_margin], loss_type)
        ax_loss.plot([quiz_margin], quiz_loss, "o", color="C3")
        ax_weight.plot([quiz_margin], quiz_weight, "o", color="C3")
    ax_loss.set_ylabel("loss")
    ax_weight.set_ylabel("gradient weight -(1/β) dL/dh")
    for ax in (ax_loss, ax_weight):
        ax.axvline(quiz_margin, color="C3", lw=0.8, ls=":", label=f"quiz pair, h = {quiz_margin:g}")
        ax.set_xlabel("log-ratio margin h (implicit reward gap = β·h)")
        ax.legend(fontsize=8)
    return _finish(fig, f"DPO, β = {beta:.2f}: quiz pair h = {quiz_margin:g}, β·h = {beta * quiz_margin:.3f}")


def plot_logps(history: Sequence[dict], chosen_key: str = "logps/chosen",
               rejected_key: str = "logps/rejected") -> Figure:
    """Chosen and rejected log-probs during DPO training; the title reports how much each moved.

    A falling chosen curve next to a plunging rejected one is the "what not to say" failure mode.
    """
    fig, axes = new_figure()
    ax: Axes = axes[0, 0]
    moves = []
    for key, color in ((chosen_key, "C2"), (rejected_key, "C3")):
        steps, values = _series(history, key)
        ax.plot(steps, values, color=color, label=key)
        if len(values):
            moves.append(f"{key} {values[-1] - values[0]:+.2f}")
    ax.set_xlabel("step")
    ax.set_ylabel("log p_θ(y|x)")
    ax.legend()
    return _finish(fig, "DPO log-probs, change: " + ", ".join(moves) if moves else "DPO log-probs")


# ---------------------------------------------------------------------------------------------------------
# GRPO
# ---------------------------------------------------------------------------------------------------------


def plot_group_noise(p_correct: float, G: int, group_sizes: Iterable[int] = (2, 4, 8, 16, 32, 64),
                     n_trials: int = 4000, seed: int = 0) -> Figure:
    """Left: spread of the group-mean baseline against G (simulated and sqrt(p(1-p)/G)).
    Right: fraction of groups with no learning signal (all rewards equal), p^G + (1-p)^G.
    The current G is highlighted."""
    sizes = sorted(set(group_sizes) | {G})
    studies = [toy.group_baseline_noise(p_correct, g, n_trials, seed) for g in sizes]
    current = studies[sizes.index(G)]
    fig, axes = new_figure(ncols=2)
    ax_std, ax_zero = axes[0]
    ax_std.plot(sizes, [s.baseline_std for s in studies], "o-", label="simulated")
    ax_std.plot(sizes, [s.baseline_std_theory for s in studies], "--", color="gray", label="√(p(1-p)/G)")
    ax_std.plot([G], [current.baseline_std], "o", ms=12, mfc="none", color="C3", label=f"G = {G}")
    ax_std.set_ylabel("std of the group-mean baseline")
    ax_zero.plot(sizes, [s.zero_signal for s in studies], "o-", label="simulated")
    ax_zero.plot(sizes, [s.zero_signal_theory for s in studies], "--", color="gray", label="p^G + (1-p)^G")
    ax_zero.plot([G], [current.zero_signal], "o", ms=12, mfc="none", color="C3", label=f"G = {G}")
    ax_zero.set_ylabel("groups with all Â_i = 0")
    for ax in (ax_std, ax_zero):
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(g) for g in sizes])
        ax.set_xlabel("group size G")
        ax.legend(fontsize=8)
    return _finish(fig, f"GRPO group baseline, G = {G}, P(correct) = {p_correct:.2f}")


# ---------------------------------------------------------------------------------------------------------
# Training curves
# ---------------------------------------------------------------------------------------------------------


def _series(history: Sequence[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the rows that logged `key` (missing, None and NaN entries skipped)."""
    steps, values = [], []
    for row in history:
        value = row.get(key)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        steps.append(row["step"])
        values.append(float(value))
    return steps, values


def plot_history(history: Sequence[dict], keys: Sequence[str], title: str | None = None,
                 ncols: int = 3) -> Figure:
    """One panel per metric, values against "step". Rows of `history` are dicts such as
    {"step": 10, "loss": 0.7, "eval/accuracy": 0.4}; a metric missing from a row is simply skipped."""
    ncols = max(1, min(ncols, len(keys)))
    nrows = math.ceil(len(keys) / ncols)
    fig, axes = new_figure(ncols=ncols, nrows=nrows)
    for ax, key in zip(axes.flat, keys, strict=False):
        steps, values = _series(history, key)
        ax.plot(steps, values, "o-" if len(values) < 30 else "-", ms=3)
        ax.set_title(f"{key} = {values[-1]:.4g}" if values else f"{key} (no data)", fontsize=10)
        ax.set_xlabel("step")
        ax.set_ylabel(key)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    last_step = history[-1]["step"] if history else 0
    return _finish(fig, title or f"training history, step {last_step}")


def read_metrics(path: str | Path) -> list[dict]:
    """The rows a run wrote to its metrics.jsonl (`History(path)`), one dict per logged step."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no metrics file at {path}")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}, line {number}: not a JSON object ({err.msg})") from None
    return rows


def plot_demo(out_dir: str | Path = "outputs/demo") -> list[Path]:
    """Draw the figures of `python -m minirlhf demo` from the metrics it wrote into `out_dir`; return their paths.

    The demo itself is core (it trains without matplotlib), so its figures are drawn here, from its files."""
    out = Path(out_dir)
    for run in ("grpo", "dpo"):
        if not (out / run / "metrics.jsonl").is_file():
            raise FileNotFoundError(f"no {run}/metrics.jsonl in {out}: run `python -m minirlhf demo --out {out}` first")
    grpo, dpo = (read_metrics(out / run / "metrics.jsonl") for run in ("grpo", "dpo"))
    # KL(p_θ ‖ p_ref) at evaluation (eval/kl_ref, any β), else the training batches' (kl_ref, β > 0); no empty panel
    kl = [key for key in ("eval/kl_ref", "kl_ref") if any(key in row for row in grpo)][:1]
    figures = {
        "grpo_training.png": plot_history(grpo, ["reward", "eval/accuracy", *kl]),
        "dpo_logps.png": plot_logps(dpo),
        "dpo_training.png": plot_history(dpo, ["loss", "rewards/accuracy", "eval/sentiment"]),
    }
    for name, fig in figures.items():
        fig.savefig(out / name)
    return [out / name for name in figures]


def plot_frontier(runs: Sequence[dict], title: str = "Reward vs KL to p_ref", ylabel: str = "reward",
                  xlabel: str = "KL(p_θ ‖ p_ref)") -> Figure:
    """Reward against KL(p_θ ‖ p_ref), one line per method (runs sorted by KL), each point labelled.

    runs: dicts {"method": str, "label": str, "kl": float, "reward": float}. Up and to the left is better:
    more reward for the same drift from the reference. ylabel / xlabel name what "reward" and "kl" measure
    (e.g. a ground-truth score rather than the reward model's proxy).
    """
    fig, axes = new_figure()
    ax: Axes = axes[0, 0]
    methods = list(dict.fromkeys(run["method"] for run in runs))
    for method in methods:
        points = sorted((run for run in runs if run["method"] == method), key=lambda run: run["kl"])
        ax.plot([run["kl"] for run in points], [run["reward"] for run in points], "o-", label=method)
        for run in points:
            ax.annotate(run["label"], (run["kl"], run["reward"]), textcoords="offset points", xytext=(4, 4),
                        fontsize=8)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if methods:
        ax.legend()
    return _finish(fig, title)
