"""Exact math on tiny categorical "vocabularies": check every derivation step with numbers.

A whole response y is one draw from a K-way categorical, so sums over "all responses" are sums over K
entries and every quantity the lecture writes down can be computed exactly (float64) and compared with
its sample-based estimate. Notation follows the lecture: p_θ (policy), p_ref (reference), R (reward),
β (KL coefficient), ε (clip range), G (group size).

- KL-regularised objective      J(p) = E_p[R] - β KL(p ‖ p_ref), maximised by
                                p*(y) = p_ref(y) exp(R(y)/β) / Z,   Z = Σ_y p_ref(y) exp(R(y)/β)
- DPO reparameterisation        R(y) = β log p*(y)/p_ref(y) + β log Z   (Z cancels in R(y_w) - R(y_l))
- KL estimators                 k1, k2, k3 from samples y ~ p_θ versus the exact KL
- Policy gradient               ∇J = E_{y~p_θ}[(R(y) - b) ∇ log p_θ(y)] for a softmax policy over K actions
- Token-level gradients         grad_wrt_logp: d loss / d log p of each token, for any loss
- GRPO group baseline           how noisy the mean of G binary rewards is
- GAE                           a fixed toy trajectory for the γ/λ explorer
- GRPO's fixed point            the exact expected GRPO gradient over all K^G groups, and where it vanishes
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from minirlhf import losses
from minirlhf.checks import check_choice, check_count, check_positive

DTYPE = torch.float64

# A five-response "vocabulary" used by the notebooks and explorers.
TOY_LABELS = ("great", "good", "okay", "meh", "bad")
TOY_P_REF = (0.10, 0.20, 0.35, 0.20, 0.15)
TOY_REWARDS = (1.0, 0.6, 0.1, -0.3, -1.0)


def as_tensor(x: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Any sequence or tensor as a float64 tensor (the toy module never works in lower precision)."""
    return torch.as_tensor(x, dtype=DTYPE)


def toy_bandit() -> tuple[tuple[str, ...], torch.Tensor, torch.Tensor]:
    """(labels, p_ref, rewards) of the default five-response example."""
    return TOY_LABELS, as_tensor(TOY_P_REF), as_tensor(TOY_REWARDS)


# ---------------------------------------------------------------------------------------------------------
# KL-regularised objective and its closed-form optimum
# ---------------------------------------------------------------------------------------------------------


def log_partition(p_ref: Sequence[float] | torch.Tensor, rewards: Sequence[float] | torch.Tensor,
                  beta: float) -> torch.Tensor:
    """log Z = log Σ_y p_ref(y) exp(R(y)/β), via logsumexp so small β does not overflow."""
    return torch.logsumexp(as_tensor(p_ref).log() + as_tensor(rewards) / beta, dim=-1)


def optimal_policy(p_ref: Sequence[float] | torch.Tensor, rewards: Sequence[float] | torch.Tensor,
                   beta: float) -> torch.Tensor:
    """p*(y) = p_ref(y) exp(R(y)/β) / Z: the maximiser of E_p[R] - β KL(p ‖ p_ref).

    Computed as softmax(log p_ref + R/β); entries with p_ref(y) = 0 stay exactly 0.
    """
    return torch.softmax(as_tensor(p_ref).log() + as_tensor(rewards) / beta, dim=-1)


def exact_kl(p: Sequence[float] | torch.Tensor, q: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """KL(p ‖ q) = Σ_y p(y) log p(y)/q(y), with the convention 0 log 0 = 0."""
    p, q = as_tensor(p), as_tensor(q)
    terms = torch.where(p > 0, p * (p.log() - q.log()), torch.zeros_like(p))
    return terms.sum(-1)


def expected_reward(p: Sequence[float] | torch.Tensor,
                    rewards: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """E_{y~p}[R(y)] = Σ_y p(y) R(y)."""
    return (as_tensor(p) * as_tensor(rewards)).sum(-1)


def kl_regularised_objective(p: Sequence[float] | torch.Tensor, p_ref: Sequence[float] | torch.Tensor,
                             rewards: Sequence[float] | torch.Tensor, beta: float) -> torch.Tensor:
    """J(p) = E_p[R] - β KL(p ‖ p_ref). Its maximum, reached at p = p*, equals β log Z."""
    return expected_reward(p, rewards) - beta * exact_kl(p, p_ref)


def implicit_reward(p: Sequence[float] | torch.Tensor, p_ref: Sequence[float] | torch.Tensor,
                    beta: float) -> torch.Tensor:
    """DPO's implicit reward β log p(y)/p_ref(y): how far p has moved towards y, in reward units."""
    return beta * (as_tensor(p).log() - as_tensor(p_ref).log())


@dataclass(frozen=True)
class RewardRecovery:
    """Numbers behind "your language model is secretly a reward model" for one (p_ref, R, β).

    recovered = implicit + β log Z reproduces the true rewards; the Bradley–Terry matrices
    P[i, j] = σ(R_i - R_j) are the same whether built from the true or the implicit rewards,
    because the β log Z shift is shared by every response to the same prompt.
    """

    rewards: torch.Tensor
    implicit: torch.Tensor  # β log p*/p_ref
    beta_log_z: torch.Tensor  # β log Z
    recovered: torch.Tensor  # implicit + β log Z
    bt_true: torch.Tensor  # σ(R_i - R_j)
    bt_implicit: torch.Tensor  # σ(implicit_i - implicit_j)

    @property
    def reward_error(self) -> float:
        return float((self.recovered - self.rewards).abs().max())

    @property
    def bt_error(self) -> float:
        return float((self.bt_implicit - self.bt_true).abs().max())


def reward_recovery(p_ref: Sequence[float] | torch.Tensor, rewards: Sequence[float] | torch.Tensor,
                    beta: float) -> RewardRecovery:
    """Check R(y) = β log p*(y)/p_ref(y) + β log Z, and that Z cancels in Bradley–Terry differences."""
    rewards = as_tensor(rewards)
    implicit = implicit_reward(optimal_policy(p_ref, rewards, beta), p_ref, beta)
    beta_log_z = beta * log_partition(p_ref, rewards, beta)
    return RewardRecovery(
        rewards=rewards,
        implicit=implicit,
        beta_log_z=beta_log_z,
        recovered=implicit + beta_log_z,
        bt_true=torch.sigmoid(rewards[:, None] - rewards[None, :]),
        bt_implicit=torch.sigmoid(implicit[:, None] - implicit[None, :]),
    )


# ---------------------------------------------------------------------------------------------------------
# KL estimators k1, k2, k3
# ---------------------------------------------------------------------------------------------------------

KL_ESTIMATORS = {"k1": losses.kl_k1, "k2": losses.kl_k2, "k3": losses.kl_k3}


@dataclass(frozen=True)
class KLEstimatorStudy:
    """Monte-Carlo behaviour of each estimator: for sample size N (one entry per N),
    mean / bias / std of the N-sample average over n_trials independent repeats."""

    exact: float
    sample_sizes: list[int]
    mean: dict[str, list[float]]
    bias: dict[str, list[float]]
    std: dict[str, list[float]]


def kl_estimator_study(p: Sequence[float] | torch.Tensor, q: Sequence[float] | torch.Tensor,
                       sample_sizes: Sequence[int] = (1, 4, 16, 64, 256), n_trials: int = 2000,
                       seed: int = 0) -> KLEstimatorStudy:
    """Estimate KL(p ‖ q) from samples y ~ p with k1, k2, k3 (losses.kl_k*) and compare with exact_kl.

    p plays p_θ (the sampling policy) and q plays p_ref. For each N, each trial averages the per-sample
    estimator over N draws; the mean/std over trials show bias and spread of that average.
    Expect: k1 and k3 unbiased, k2 biased; k3 has the smallest spread while p is close to q, but its
    ratio q/p has a heavy tail once p starves responses that q likes (try β = 0.3 in the explorer).
    """
    p, q = as_tensor(p), as_tensor(q)
    exact = float(exact_kl(p, q))
    generator = torch.Generator().manual_seed(seed)
    mean: dict[str, list[float]] = {name: [] for name in KL_ESTIMATORS}
    std: dict[str, list[float]] = {name: [] for name in KL_ESTIMATORS}
    for n in sample_sizes:
        y = torch.multinomial(p, n_trials * n, replacement=True, generator=generator).view(n_trials, n)
        logp, ref_logp = p.log()[y], q.log()[y]
        for name, estimator in KL_ESTIMATORS.items():
            estimates = estimator(logp, ref_logp).mean(-1)  # one N-sample estimate per trial
            mean[name].append(float(estimates.mean()))
            std[name].append(float(estimates.std()))
    bias = {name: [m - exact for m in values] for name, values in mean.items()}
    return KLEstimatorStudy(exact=exact, sample_sizes=list(sample_sizes), mean=mean, bias=bias, std=std)


# ---------------------------------------------------------------------------------------------------------
# Policy gradient on a softmax policy over K actions
# ---------------------------------------------------------------------------------------------------------


def exact_policy_gradient(logits: Sequence[float] | torch.Tensor,
                          rewards: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """∇_θ J with J(θ) = Σ_y p_θ(y) R(y) and p_θ = softmax(θ), by autograd through the exact sum."""
    theta = as_tensor(logits).clone().requires_grad_(True)
    objective = expected_reward(torch.softmax(theta, -1), rewards)
    (grad,) = torch.autograd.grad(objective, theta)
    return grad


BASELINES = (None, "value", "mean", "loo")


def score_function_gradients(logits: Sequence[float] | torch.Tensor, rewards: Sequence[float] | torch.Tensor,
                             n_samples: int, baseline: str | None = None, group_size: int = 4,
                             seed: int = 0) -> torch.Tensor:
    """One REINFORCE estimate (R(y) - b) ∇_θ log p_θ(y) per sample y ~ p_θ: a (n_samples, K) tensor.

    The log-derivative trick, ∇p = p ∇log p, makes the average of these an estimate of ∇J.
    Baselines b (samples are drawn in consecutive groups of `group_size` for the group-based ones):
      None     b = 0
      "value"  b = E_{p_θ}[R], a perfect critic V(x)              -> unbiased
      "mean"   b = mean of the group, including y itself (GRPO)  -> mean shrinks by (G-1)/G
      "loo"    b = mean of the other G-1 rewards (RLOO)          -> unbiased
    """
    if baseline is not None:
        check_choice("baseline", baseline, [b for b in BASELINES if b is not None], why="or None")
    logits, rewards = as_tensor(logits), as_tensor(rewards)
    p = torch.softmax(logits, -1)
    generator = torch.Generator().manual_seed(seed)
    actions = torch.multinomial(p, n_samples, replacement=True, generator=generator)
    r = rewards[actions]
    if baseline is None:
        weights = r
    elif baseline == "value":
        weights = r - expected_reward(p, rewards)
    elif baseline == "mean":
        weights = losses.grpo_advantages(r, group_size, scale="none")
    else:
        weights = losses.rloo_advantages(r, group_size)
    # Row a of the Jacobian of log softmax is ∇_θ log p_θ(a) (the "score" of action a).
    score = torch.autograd.functional.jacobian(lambda t: torch.log_softmax(t, -1), logits)
    return weights[:, None] * score[actions]


@dataclass(frozen=True)
class EstimateSummary:
    mean: torch.Tensor  # average estimate (K,)
    std_error: torch.Tensor  # standard error of that average, per coordinate (K,)
    total_variance: float  # Σ_k Var(single-sample estimate)_k: the "noise" of one sample


def summarise_estimates(estimates: torch.Tensor) -> EstimateSummary:
    """Mean, per-coordinate standard error, and total per-sample variance of (n_samples, K) estimates."""
    var = estimates.var(0)
    return EstimateSummary(
        mean=estimates.mean(0),
        std_error=(var / estimates.shape[0]).sqrt(),
        total_variance=float(var.sum()),
    )


# ---------------------------------------------------------------------------------------------------------
# PPO clip curve
# ---------------------------------------------------------------------------------------------------------


def clip_curve(ratios: Sequence[float] | torch.Tensor, advantage: float, eps: float,
               eps_high: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """min(r Â, clip(r, 1-ε, 1+ε_high) Â) at each ratio r, and its derivative d/dr (0 where clipping bites).
    ε_high = None is PPO's symmetric clip (ε_high = ε); DAPO's clip-higher takes ε_high > ε.

    The derivative comes from autograd through losses.clipped_surrogate, exactly what the optimiser sees.
    """
    r = as_tensor(ratios).clone().requires_grad_(True)
    objective = losses.clipped_surrogate(r, torch.full_like(r, advantage), eps, eps_high)
    (grad,) = torch.autograd.grad(objective.sum(), r)
    return objective.detach(), grad


def grad_wrt_logp(loss_fn: Callable[[torch.Tensor], torch.Tensor], logp: torch.Tensor) -> torch.Tensor:
    """d loss_fn(logp) / d logp: the gradient of a loss with respect to the per-token log-probs themselves.

    This is how hard (and which way) each token is pushed: a negative entry means gradient descent raises that
    token's log-probability. Used to compare objectives token by token (PPO at θ = θ_old against REINFORCE,
    GRPO's aggregations, the k3 penalty) without a model. `logp` itself is left untouched.
    """
    x = logp.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_fn(x), x)
    return grad


# ---------------------------------------------------------------------------------------------------------
# GRPO: noise of the group-mean baseline
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GroupNoise:
    """How reliable GRPO's baseline is for G binary (correct / wrong) rewards with P(correct) = p."""

    group_size: int
    p_correct: float
    baseline_std: float  # spread of mean({R_1..R_G}) across groups
    baseline_std_theory: float  # sqrt(p (1 - p) / G)
    zero_signal: float  # fraction of groups where every reward is equal, so every Â_i = 0
    zero_signal_theory: float  # p^G + (1 - p)^G
    correct_advantage_mean: float  # Â of a correct response, among groups with signal
    correct_advantage_std: float


def group_baseline_noise(p_correct: float, G: int, n_trials: int = 4000, seed: int = 0) -> GroupNoise:
    """Simulate n_trials groups of G Bernoulli(p_correct) rewards and GRPO's advantages on them."""
    check_count("G", G, minimum=2, why="a group of one has no baseline")
    generator = torch.Generator().manual_seed(seed)
    rewards = (torch.rand(n_trials, G, generator=generator, dtype=DTYPE) < p_correct).to(DTYPE)
    advantages = losses.grpo_advantages(rewards.flatten(), G).view(n_trials, G)
    baseline = rewards.mean(-1)
    all_equal = (rewards == rewards[:, :1]).all(-1)
    correct = (rewards == 1) & ~all_equal[:, None]
    correct_adv = advantages[correct]
    has_correct = correct_adv.numel() > 1
    return GroupNoise(
        group_size=G,
        p_correct=p_correct,
        baseline_std=float(baseline.std()),
        baseline_std_theory=(p_correct * (1 - p_correct) / G) ** 0.5,
        zero_signal=float(all_equal.to(DTYPE).mean()),
        zero_signal_theory=p_correct**G + (1 - p_correct) ** G,
        correct_advantage_mean=float(correct_adv.mean()) if has_correct else float("nan"),
        correct_advantage_std=float(correct_adv.std()) if has_correct else float("nan"),
    )


# ---------------------------------------------------------------------------------------------------------
# GAE on a fixed toy trajectory
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToyTrajectory:
    """One response of T tokens, shaped (1, T) like a batch: the LLM-RLHF reward pattern of small
    per-token KL penalties -β KL_t and the reward-model score added on the last token."""

    rewards: torch.Tensor
    values: torch.Tensor
    mask: torch.Tensor


def toy_trajectory() -> ToyTrajectory:
    """Eight tokens: per-token penalties of a few hundredths, RM score 1.0 at the end, a critic that
    becomes more optimistic as the response unfolds."""
    rewards = as_tensor([[-0.02, -0.01, -0.03, 0.00, -0.02, -0.01, -0.02, 0.98]])
    values = as_tensor([[0.30, 0.35, 0.30, 0.45, 0.50, 0.60, 0.70, 0.80]])
    return ToyTrajectory(rewards=rewards, values=values, mask=torch.ones_like(rewards))


def toy_gae(gamma: float, lam: float,
            trajectory: ToyTrajectory | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(advantages, returns), each (T,), from losses.gae on the toy (or a given) trajectory."""
    traj = trajectory or toy_trajectory()
    advantages, returns = losses.gae(traj.rewards, traj.values, traj.mask, gamma, lam)
    return advantages[0], returns[0]


# ---------------------------------------------------------------------------------------------------------
# What the k3 penalty differentiates to when it sits inside the loss
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KLGradients:
    """Exact gradients with respect to the logits θ of a softmax policy p_θ = softmax(θ), each (K,).

    Names follow the usual convention: KL(p_θ ‖ p_ref), the model first, is the *reverse* (mode-seeking) KL;
    KL(p_ref ‖ p_θ) is the *forward* (mass-covering) KL.

    in_loss_k3  E_{y~p_θ}[∇_θ k3(y)]: what β k3 inside a loss (GRPO) pushes with, on average, because the
                samples y are drawn before the gradient is taken and do not depend on θ
    in_loss_k1  E_{y~p_θ}[∇_θ k1(y)] = E_{y~p_θ}[∇_θ log p_θ(y)] = 0: k1 inside a loss pushes nowhere
    reverse_kl  ∇_θ KL(p_θ ‖ p_ref), the KL of the objective, which the k3 *value* estimates
    forward_kl  ∇_θ KL(p_ref ‖ p_θ), which in_loss_k3 equals
    """

    in_loss_k3: torch.Tensor
    in_loss_k1: torch.Tensor
    reverse_kl: torch.Tensor
    forward_kl: torch.Tensor


def kl_gradients(logits: Sequence[float] | torch.Tensor, p_ref: Sequence[float] | torch.Tensor) -> KLGradients:
    """The gradients of KLGradients, by autograd through exact K-term sums (no sampling).

    With d = log p_ref(y) - log p_θ(y):  ∇k3 = (e^d - 1) ∇d = (1 - p_ref/p_θ) ∇log p_θ, so
    E_{p_θ}[∇k3] = Σ_y p_θ ∇log p_θ - Σ_y p_ref ∇log p_θ = 0 - Σ_y p_ref ∇log p_θ = ∇KL(p_ref ‖ p_θ) (forward KL).
    """
    theta = as_tensor(logits).clone().requires_grad_(True)
    ref_logp = as_tensor(p_ref).log()
    logp = torch.log_softmax(theta, -1)
    sampling_weights = logp.exp().detach()  # y ~ p_θ, fixed before differentiating

    def grad(objective: torch.Tensor) -> torch.Tensor:
        (g,) = torch.autograd.grad(objective, theta, retain_graph=True)
        return g

    return KLGradients(
        in_loss_k3=grad((sampling_weights * losses.kl_k3(logp, ref_logp)).sum()),
        in_loss_k1=grad((sampling_weights * losses.kl_k1(logp, ref_logp)).sum()),
        reverse_kl=grad(exact_kl(logp.exp(), ref_logp.exp())),
        forward_kl=grad(exact_kl(ref_logp.exp(), logp.exp())),
    )


def k3_penalty_optimum(p_ref: Sequence[float] | torch.Tensor, rewards: Sequence[float] | torch.Tensor,
                       beta: float, iterations: int = 200) -> torch.Tensor:
    """The maximiser of E_p[R] - β KL(p_ref ‖ p) (forward KL): where the gradient of an in-loss k3 penalty leads
    when the policy-gradient term is unbiased and unscaled (see grpo_fixed_point for what GRPO's baseline changes).

    Lagrangian with Σ p = 1:  R(y) + β p_ref(y)/p(y) = λ  =>  p(y) = β p_ref(y) / (λ - R(y)),  λ > max R,
    and Σ_y p(y) falls from ∞ to 0 as λ grows past max R, so bisection finds the one λ with Σ p = 1.
    A polynomial tilt of p_ref, where optimal_policy's exact KL(p ‖ p_ref) gives the exponential one.
    """
    check_positive("beta", beta)
    p_ref, rewards = as_tensor(p_ref), as_tensor(rewards)
    support = p_ref > 0
    top = rewards[support].max()
    low, high = top, top + beta  # at λ = max R + β every p(y) ≤ p_ref(y), so Σ p ≤ 1 there
    for _ in range(iterations):
        lam = (low + high) / 2
        if (beta * p_ref / (lam - rewards)).sum() > 1:
            low = lam
        else:
            high = lam
    p = beta * p_ref / (high - rewards)
    return p / p.sum()


# ---------------------------------------------------------------------------------------------------------
# The exact expected GRPO gradient: every possible group, weighted by its probability
# ---------------------------------------------------------------------------------------------------------


def expected_grpo_gradient(logits: Sequence[float] | torch.Tensor, p_ref: Sequence[float] | torch.Tensor,
                           rewards: Sequence[float] | torch.Tensor, group_size: int, beta: float,
                           scale: str = "group") -> torch.Tensor:
    """E over groups y_1 … y_G ~ p_θ (i.i.d.) of GRPO's gradient ∇_θ J at θ = θ_old, exactly: a (K,) tensor.

        J = (1/G) Σ_i [ Â_i log p_θ(y_i) - β k3(y_i) ],   Â = losses.grpo_advantages(R(y_1 … y_G), G, scale)

    For one-token answers at θ = θ_old the clipped surrogate's gradient is Â_i ∇log p_θ(y_i) (every ratio is 1),
    so this is what one GRPO step pushes with on average. The expectation is a sum over all K^G groups, each
    weighted by Π_i p_θ(y_i): no sampling. scale="batch" is refused (its std would run over all K^G groups).
    """
    check_choice("scale", scale, ("group", "none"), why="an exact expectation runs over one group")
    theta = as_tensor(logits).clone().requires_grad_(True)
    ref_logp, rewards = as_tensor(p_ref).log(), as_tensor(rewards)
    groups = torch.cartesian_prod(*[torch.arange(len(rewards))] * group_size).view(-1, group_size)  # (K^G, G)
    logp = torch.log_softmax(theta, -1)
    group_prob = logp.detach().exp()[groups].prod(1)  # (K^G,) probability of drawing this group
    advantages = losses.grpo_advantages(rewards[groups].reshape(-1), group_size, scale=scale).view_as(groups)
    objective = (advantages * logp[groups] - beta * losses.kl_k3(logp[groups], ref_logp[groups])).mean(1)
    (grad,) = torch.autograd.grad((group_prob * objective).sum(), theta)
    return grad


def grpo_fixed_point(p_ref: Sequence[float] | torch.Tensor, rewards: Sequence[float] | torch.Tensor,
                     group_size: int, beta: float, scale: str = "group", lr: float = 2.0,
                     max_steps: int = 5000, tol: float = 1e-12) -> torch.Tensor:
    """The policy where GRPO's expected gradient (expected_grpo_gradient) is zero, found by exact gradient ascent
    from p_ref: where GRPO settles on average. With scale="none", Â_i = R_i - mean = (G-1)/G (R_i - mean_{-i}), so the
    fixed point is k3_penalty_optimum at β G/(G-1); with scale="group" the std couples the groups and it is not.
    """
    theta = as_tensor(p_ref).log().clone()
    for _ in range(max_steps):
        grad = expected_grpo_gradient(theta, p_ref, rewards, group_size, beta, scale)
        if grad.norm() < tol:
            return torch.softmax(theta, -1)
        theta = theta + lr * grad
    raise RuntimeError(f"no fixed point within {max_steps} steps (last |gradient| {grad.norm():.1e}); try a smaller lr")
