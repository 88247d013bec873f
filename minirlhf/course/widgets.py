"""Slider explorers and a live training plot, built from core ipywidgets and inline matplotlib only.

Each explorer is a plain `render_*(**slider_values) -> (Figure, summary)` function wrapped in an
`Explorer` box: sliders (continuous_update=False, so a drag redraws once on release) above a
fixed-height Output that is cleared and redrawn on every change. The render functions hold all the
logic, so they can be called and tested without a browser.

    from minirlhf.course import widgets
    widgets.clip_explorer()          # ε slider: PPO's clipped surrogate
    widgets.clip_higher_explorer()   # ε_low and ε_high sliders: DAPO's clip-higher
    widgets.optimal_policy_explorer()  # β slider: p* = p_ref exp(R/β) / Z
    widgets.gae_explorer()           # γ and λ sliders
    widgets.dpo_explorer()           # β slider: DPO loss and gradient weight
    widgets.group_size_explorer()    # G and P(correct) sliders: GRPO's group baseline
    widgets.kl_estimator_explorer()  # β slider: k1 / k2 / k3 against the exact KL
    widgets.ratio_zoo_explorer()     # ε, ε_high, c, τ sliders: f(r, Â) and ∂f/∂r of clip, dual-clip, CISPO, SAPO, GMPO
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import ipywidgets as W
import torch
from IPython.display import clear_output, display
from matplotlib.figure import Figure

from minirlhf import losses
from minirlhf.course import toy, viz

OUTPUT_HEIGHT = "440px"  # fits one WIDTH x HEIGHT figure plus the summary line

RenderFn = Callable[..., tuple[Figure, str]]


def in_notebook() -> bool:
    """True inside a Jupyter/Colab kernel, where widgets can render."""
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and hasattr(shell, "kernel")


def _show(output: W.Output, fig: Figure, text: str | None = None) -> None:
    """Replace what `output` shows with `fig` (and a line of text); wait=True avoids a blank flash."""
    with output:
        clear_output(wait=True)
        display(fig)
        if text:
            print(text)


class Explorer(W.VBox):
    """Sliders above a fixed-height Output; any slider change calls render(**values) and redraws.

    Attributes for code and tests: `sliders` (name -> slider), `render` (the plain function),
    `figure` and `summary` (the latest render), `update()` (redraw with the current slider values).
    """

    def __init__(self, render: RenderFn, sliders: dict[str, W.ValueWidget], height: str = OUTPUT_HEIGHT):
        self.render = render
        self.sliders = sliders
        self.output = W.Output(layout=W.Layout(height=height, overflow="auto"))
        super().__init__([W.HBox(list(sliders.values())), self.output])
        for slider in sliders.values():
            slider.observe(self.update, names="value")
        self.update()

    def values(self) -> dict[str, float]:
        return {name: slider.value for name, slider in self.sliders.items()}

    def update(self, change: dict | None = None) -> tuple[Figure, str]:
        self.figure, self.summary = self.render(**self.values())
        _show(self.output, self.figure, self.summary)
        return self.figure, self.summary


def _slider(description: str, value: float, low: float, high: float, step: float) -> W.FloatSlider:
    return W.FloatSlider(value=value, min=low, max=high, step=step, description=description,
                         continuous_update=False, readout_format=".2f")


def _beta_slider(value: float) -> W.FloatLogSlider:
    return W.FloatLogSlider(value=value, base=10, min=-2, max=1, step=0.05, description="β",
                            continuous_update=False, readout_format=".3f")


# ---------------------------------------------------------------------------------------------------------
# PPO: ε
# ---------------------------------------------------------------------------------------------------------


def render_clip(eps: float) -> tuple[Figure, str]:
    """Clip curves at ε, and the lecture's table rows (r = 0.5, 1.0, 1.5) recomputed at this ε."""
    parts = []
    for advantage in (1.0, -1.0):
        values, grads = toy.clip_curve(viz.LECTURE_RATIOS, advantage, eps)
        rows = ", ".join(
            f"r={r:g}: {v:+.2f}{' (no grad)' if g == 0 else ''}"
            for r, v, g in zip(viz.LECTURE_RATIOS, values.tolist(), grads.tolist(), strict=True)
        )
        parts.append(f"Â={advantage:+.0f} → {rows}")
    summary = f"ε = {eps:.2f}: flat outside [{1 - eps:.2f}, {1 + eps:.2f}] on the side Â pushes towards. " + \
        "; ".join(parts)
    return viz.plot_clip(eps), summary


def clip_explorer(eps: float = 0.2) -> Explorer:
    """ε slider over PPO's clipped surrogate for Â = ±1."""
    return Explorer(render_clip, {"eps": _slider("ε", eps, 0.01, 0.8, 0.01)})


def render_clip_higher(eps_low: float, eps_high: float) -> tuple[Figure, str]:
    """The clipped surrogate with clip(r, 1 - ε_low, 1 + ε_high): where each side stops the gradient."""
    parts = []
    for advantage in (1.0, -1.0):
        values, grads = toy.clip_curve(viz.LECTURE_RATIOS, advantage, eps_low, eps_high)
        rows = ", ".join(
            f"r={r:g}: {v:+.2f}{' (no grad)' if g == 0 else ''}"
            for r, v, g in zip(viz.LECTURE_RATIOS, values.tolist(), grads.tolist(), strict=True)
        )
        parts.append(f"Â={advantage:+.0f} → {rows}")
    summary = (f"ε_low = {eps_low:.2f}, ε_high = {eps_high:.2f}: clip-higher lets a token with Â > 0 grow to "
               f"r = {1 + eps_high:.2f} (a token at p_θold = 0.1 up to {0.1 * (1 + eps_high):.3f}); one with Â < 0 "
               f"stops at r = {1 - eps_low:.2f}. " + "; ".join(parts))
    return viz.plot_clip(eps_low, eps_high=eps_high), summary


def clip_higher_explorer(eps_low: float = 0.2, eps_high: float = 0.28) -> Explorer:
    """ε_low and ε_high sliders over the asymmetric clipped surrogate of DAPO (ε_high = ε_low: PPO's)."""
    return Explorer(render_clip_higher, {"eps_low": _slider("ε_low", eps_low, 0.01, 0.5, 0.01),
                                         "eps_high": _slider("ε_high", eps_high, 0.01, 0.5, 0.01)})


# ---------------------------------------------------------------------------------------------------------
# KL-regularised objective: β
# ---------------------------------------------------------------------------------------------------------


def render_optimal_policy(beta: float) -> tuple[Figure, str]:
    """p_ref vs p* on the toy bandit at β, with J(p*) = β log Z as a check."""
    labels, p_ref, rewards = toy.toy_bandit()
    p_star = toy.optimal_policy(p_ref, rewards, beta)
    objective = float(toy.kl_regularised_objective(p_star, p_ref, rewards, beta))
    beta_log_z = beta * float(toy.log_partition(p_ref, rewards, beta))
    probs = ", ".join(f"{name} {p:.2f}" for name, p in zip(labels, p_star.tolist(), strict=True))
    summary = f"β = {beta:.2f}: p* = [{probs}]; J(p*) = {objective:.4f} = β log Z = {beta_log_z:.4f}"
    return viz.plot_optimal_policy(beta), summary


def optimal_policy_explorer(beta: float = 0.5) -> Explorer:
    """β slider: how the optimal KL-regularised policy moves from p_ref (large β) to argmax R (small β)."""
    return Explorer(render_optimal_policy, {"beta": _beta_slider(beta)})


# ---------------------------------------------------------------------------------------------------------
# GAE: γ, λ
# ---------------------------------------------------------------------------------------------------------


def render_gae(gamma: float, lam: float) -> tuple[Figure, str]:
    """GAE on toy.toy_trajectory() at (γ, λ)."""
    advantages, _ = toy.toy_gae(gamma, lam)
    values = ", ".join(f"{a:+.2f}" for a in advantages.tolist())
    summary = f"γ = {gamma:.2f}, λ = {lam:.2f}: Â_t = [{values}]"
    return viz.plot_gae(gamma, lam), summary


def gae_explorer(gamma: float = 1.0, lam: float = 0.95) -> Explorer:
    """γ and λ sliders: λ = 0 gives one-step TD errors, λ = 1 gives Monte-Carlo returns minus V."""
    return Explorer(render_gae, {"gamma": _slider("γ", gamma, 0.0, 1.0, 0.01),
                                 "lam": _slider("λ", lam, 0.0, 1.0, 0.01)})


# ---------------------------------------------------------------------------------------------------------
# DPO: β
# ---------------------------------------------------------------------------------------------------------


def render_dpo(beta: float) -> tuple[Figure, str]:
    """DPO loss and gradient weight at β, read off at the lecture's quiz pair (h = 2.1)."""
    (loss,), (weight,) = viz.dpo_curves(beta, [viz.LECTURE_MARGIN])
    summary = (f"β = {beta:.2f}: quiz pair h = {viz.LECTURE_MARGIN:g} → implicit reward gap "
               f"{beta * viz.LECTURE_MARGIN:.3f}, loss {loss:.3f}, gradient weight σ(-β·h) = {weight:.3f}")
    return viz.plot_dpo(beta), summary


def dpo_explorer(beta: float = 0.1) -> Explorer:
    """β slider over the DPO loss and its gradient weight against the log-ratio margin."""
    return Explorer(render_dpo, {"beta": _beta_slider(beta)})


# ---------------------------------------------------------------------------------------------------------
# GRPO: G
# ---------------------------------------------------------------------------------------------------------


def render_group_size(G: int, p_correct: float) -> tuple[Figure, str]:
    """Noise of GRPO's group-mean baseline and the share of groups with no signal, at G."""
    noise = toy.group_baseline_noise(p_correct, G)
    summary = (f"G = {G}, P(correct) = {p_correct:.2f}: baseline std {noise.baseline_std:.3f} "
               f"(theory {noise.baseline_std_theory:.3f}); {noise.zero_signal:.1%} of groups have all "
               f"Â_i = 0; a correct answer gets Â ≈ {noise.correct_advantage_mean:+.2f}")
    return viz.plot_group_noise(p_correct, G), summary


def group_size_explorer(G: int = 8, p_correct: float = 0.3) -> Explorer:
    """G and P(correct) sliders over GRPO's group baseline."""
    return Explorer(render_group_size, {
        "G": W.IntSlider(value=G, min=2, max=64, description="G", continuous_update=False),
        "p_correct": _slider("P(correct)", p_correct, 0.05, 0.95, 0.05),
    })


# ---------------------------------------------------------------------------------------------------------
# KL estimators: β sets how far p_θ = p* has drifted from p_ref
# ---------------------------------------------------------------------------------------------------------

KL_SAMPLE_SIZES = (1, 4, 16, 64, 256)


def render_kl_estimators(beta: float, n_trials: int = 1000) -> tuple[Figure, str]:
    """k1/k2/k3 estimates of KL(p_θ ‖ p_ref) with p_θ = p* at β (smaller β, larger drift)."""
    _, p_ref, rewards = toy.toy_bandit()
    study = toy.kl_estimator_study(toy.optimal_policy(p_ref, rewards, beta), p_ref, KL_SAMPLE_SIZES, n_trials)
    i = KL_SAMPLE_SIZES.index(16)
    stds = ", ".join(f"{name} {study.std[name][i]:.3f}" for name in study.std)
    biases = ", ".join(f"{name} {study.bias[name][i]:+.4f}" for name in study.bias)
    summary = f"β = {beta:.2f}: exact KL = {study.exact:.4f}; at N = 16, std: {stds}; bias: {biases}"
    title = f"KL estimators, β = {beta:.2f}, exact KL = {study.exact:.4f}"
    return viz.plot_kl_estimators(study, title=title), summary


def kl_estimator_explorer(beta: float = 0.5) -> Explorer:
    """β slider: bias and spread of the KL estimators as p_θ drifts from p_ref."""
    return Explorer(render_kl_estimators, {"beta": _beta_slider(beta)})


# ---------------------------------------------------------------------------------------------------------
# The ratio zoo: ε, ε_high, c, τ
# ---------------------------------------------------------------------------------------------------------

ZOO_RATIOS = (0.5, 1.5, 3.0, 5.0)  # the ratios the summary reads: inside and outside every clip range


def render_ratio_zoo(eps: float, eps_high: float, dual_clip_c: float, tau: float) -> tuple[Figure, str]:
    """f(r, Â) and ∂f/∂r of every method of the zoo; the summary gives, at a few ratios, the weight on
    ∇ log p_θ (r ∂f/∂r) of each method for Â = ±1, "0" where its gradient stops."""
    ratios = torch.tensor(ZOO_RATIOS, dtype=torch.float64)
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    lines = []
    for name, label in viz.ZOO_LABELS.items():
        weight = losses.ratio_function_grid(name, ratios, advantages, eps, eps_high, dual_clip_c=dual_clip_c,
                                            tau_pos=tau, tau_neg=tau)["weight"]
        cells = [f"r={r:g}: {weight[i, 0].item():+.2f}/{weight[i, 1].item():+.2f}" for i, r in enumerate(ZOO_RATIOS)]
        lines.append(f"{label}: " + ", ".join(cells))
    summary = "weight on ∇log p_θ for Â = +1/-1 (0: the gradient stops): " + "; ".join(lines)
    return viz.plot_ratio_zoo(eps, eps_high, dual_clip_c, tau, r_max=6.0), summary


def ratio_zoo_explorer(eps: float = 0.2, eps_high: float = 0.28, dual_clip_c: float = 3.0,
                       tau: float = 1.0) -> Explorer:
    """ε, ε_high, dual-clip's c and SAPO's τ sliders over the zoo's f(r, Â) and ∂f/∂r."""
    return Explorer(render_ratio_zoo, {"eps": _slider("ε", eps, 0.05, 0.8, 0.01),
                                       "eps_high": _slider("ε_high", eps_high, 0.05, 0.8, 0.01),
                                       "dual_clip_c": _slider("c", dual_clip_c, 1.5, 5.0, 0.1),
                                       "tau": _slider("τ", tau, 0.25, 4.0, 0.05)}, height="900px")


# ---------------------------------------------------------------------------------------------------------
# Live training curves
# ---------------------------------------------------------------------------------------------------------


class LiveHistoryPlot:
    """A trainer callback that redraws viz.plot_history every `every` steps.

    In a notebook, display it once before training and pass it as the callback:

        live = LiveHistoryPlot(["loss", "reward"], every=20)
        display(live)
        train_grpo(task, config, callbacks=[live])   # trainers call live(history) after every step

    Outside a notebook (scripts, CI) it prints one line with the latest values instead.
    """

    def __init__(self, keys: Sequence[str], every: int = 10, title: str | None = None,
                 notebook: bool | None = None):
        self.keys = list(keys)
        self.every = every
        self.title = title
        self.history: list[dict] = []
        self.figure: Figure | None = None
        rows = math.ceil(len(self.keys) / 3)
        height = f"{int(rows * viz.HEIGHT * 100) + 40}px"
        use_widget = in_notebook() if notebook is None else notebook
        self.output = W.Output(layout=W.Layout(height=height, overflow="auto")) if use_widget else None

    def __call__(self, row: dict | list[dict]) -> None:
        """Record one history row (must contain "step") and redraw on every `every`-th step. Trainers pass their
        whole history (a list of rows): then the newest row is the one recorded."""
        if isinstance(row, list):
            row = row[-1]
        self.history.append(row)
        if row["step"] % self.every == 0:
            self.redraw()

    def redraw(self) -> None:
        """Draw the full history now (or print the latest values when there is no notebook)."""
        if self.output is None:
            latest = {key: row[key] for row in self.history for key in self.keys if row.get(key) is not None}
            values = " ".join(f"{key}={value:.4g}" for key, value in latest.items())
            print(f"step {self.history[-1]['step']}: {values}" if self.history else "no history yet")
            return
        self.figure = viz.plot_history(self.history, self.keys, title=self.title)
        _show(self.output, self.figure)

    def _ipython_display_(self) -> None:
        if self.output is not None:
            display(self.output)
