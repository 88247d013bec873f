"""Implement-it exercises: the student writes the function, the library checks it.

    from minirlhf.course import exercises
    exercises.check_function("ppo-clip", clipped_policy_loss)   # True when it matches minirlhf.losses everywhere
    exercises.solution("ppo-clip")                              # prints a worked solution

`check_function` runs the student's function and the library's own (minirlhf.losses, never a second copy of the
math) on named cases: random inputs and the edge cases where the classic mistakes show (padding in the mask, ties,
groups with zero std, ratios at 1 ± ε, Â of both signs, one-token and empty responses, G = 2). Values are compared,
and gradients too where a mistake hides in them (a detached ratio gives the right loss and no gradient). On the
first failing case it prints the case, the inputs, the expected and actual values and a hint. Each exercise keeps
a list of classic wrong versions; the hint is the one whose outputs agree with the student's.

In the notebooks each stub cell carries the tag "exercise:<id>" in its metadata; `fill_solutions(nb)` replaces
those stubs with the solutions (the headless notebook test runs them that way). With the environment variable
MINIRLHF_EXERCISES_STRICT=1 a failed check raises instead of only printing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from minirlhf import losses
from minirlhf.course import solutions, toy
from minirlhf.errors import env_flag

DTYPE = torch.float64
RTOL, ATOL = 1e-4, 1e-6
TAG_PREFIX = "exercise:"
STRICT_ENV = "MINIRLHF_EXERCISES_STRICT"


class ExerciseFailed(AssertionError):
    """Raised by check_function in strict mode (MINIRLHF_EXERCISES_STRICT=1) when the student's function fails."""


@dataclass(frozen=True)
class Case:
    name: str
    inputs: dict[str, Any]
    check_grad: bool = True  # False where a tie (r exactly at 1 ± ε) leaves the gradient up to the implementation


@dataclass(frozen=True)
class Mistake:
    name: str
    fn: Callable[..., Any]  # the wrong version, same signature as the exercise
    hint: str


@dataclass(frozen=True)
class Exercise:
    id: str
    topic: str  # the notebook's topic, as in quiz.TOPICS
    stub: str  # name of the function the student writes (and of its solution in minirlhf.course.solutions)
    reference: Callable[..., Any]  # the library's answer, called with the same keyword arguments
    cases: Callable[[], list[Case]]
    mistakes: tuple[Mistake, ...]
    grad_inputs: tuple[str, ...] = ()  # inputs whose gradient (of the first output, summed) is compared too

    @property
    def solution_fn(self) -> Callable[..., Any]:
        return getattr(solutions, self.stub)


def _t(values: Any) -> torch.Tensor:
    return torch.as_tensor(values, dtype=DTYPE)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


def _score(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """(N, K) rows ∇_θ log softmax(θ)[a], by autograd, for the wrong versions that need it."""
    jacobian = torch.autograd.functional.jacobian(lambda t: torch.log_softmax(t, -1), logits)
    return jacobian[actions]


# ---------------------------------------------------------------------------------------------------------
# 02 · REINFORCE gradient estimate, REINFORCE loop on the toy bandit, leave-one-out baseline
# ---------------------------------------------------------------------------------------------------------


def _reinforce_gradient(logits, actions, rewards, baseline):
    theta = logits.detach().clone().requires_grad_(True)
    logp = torch.log_softmax(theta, -1)[actions][:, None]  # (N, 1): each sample is a one-token response
    advantages = rewards[actions] - baseline  # (N,)
    loss = losses.reinforce_loss(logp, advantages, torch.ones_like(logp))  # -(1/N) Σ_i Â_i log p_θ(a_i)
    (grad,) = torch.autograd.grad(loss, theta)
    return -grad  # the estimate of ∇J is minus the gradient of the loss


def _reinforce_gradient_cases():
    _, p_ref, rewards = toy.toy_bandit()
    theta = p_ref.log()
    return [
        Case("toy bandit, 8 samples, no baseline", dict(logits=theta, actions=torch.tensor([0, 2, 2, 1, 4, 3, 2, 0]),
                                                          rewards=rewards, baseline=0.0)),
        Case("random logits, baseline 0.3", dict(logits=_randn(5, seed=1), actions=torch.tensor([4, 4, 1, 0, 3, 2]),
                                                 rewards=rewards, baseline=0.3)),
        Case("one sample", dict(logits=theta, actions=torch.tensor([3]), rewards=rewards, baseline=0.0)),
        Case("every sample the same action", dict(logits=_randn(5, seed=2), actions=torch.tensor([1, 1, 1, 1]),
                                                  rewards=rewards, baseline=-0.5)),
        Case("all rewards negative", dict(logits=theta, actions=torch.tensor([0, 1, 2, 3, 4]),
                                          rewards=rewards - 2.0, baseline=0.0)),
    ]


def _reinforce_gradient_sign_flip(logits, actions, rewards, baseline):
    return -_reinforce_gradient(logits, actions, rewards, baseline)


def _reinforce_gradient_no_baseline(logits, actions, rewards, baseline):
    return _reinforce_gradient(logits, actions, rewards, 0.0)


def _reinforce_gradient_of_p(logits, actions, rewards, baseline):
    p = torch.softmax(logits, -1)
    return ((rewards[actions] - baseline)[:, None] * p[actions][:, None] * _score(logits, actions)).mean(0)


def _reinforce_gradient_summed(logits, actions, rewards, baseline):
    return _reinforce_gradient(logits, actions, rewards, baseline) * len(actions)


def _train_bandit(logits, rewards, n_steps, n_samples, lr, seed):
    generator = torch.Generator().manual_seed(seed)
    theta = logits.detach().clone().requires_grad_(True)
    optimizer = torch.optim.SGD([theta], lr=lr)
    for _ in range(n_steps):
        with torch.no_grad():
            actions = torch.multinomial(torch.softmax(theta, -1), n_samples, replacement=True, generator=generator)
        advantages = losses.rloo_advantages(rewards[actions], n_samples)  # the whole batch is one group
        logp = torch.log_softmax(theta, -1)[actions][:, None]  # (N, 1)
        loss = losses.reinforce_loss(logp, advantages, torch.ones_like(logp))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return theta.detach()


def _train_bandit_cases():
    _, p_ref, rewards = toy.toy_bandit()
    return [
        Case("toy bandit, 20 steps of 8 samples", dict(logits=p_ref.log(), rewards=rewards, n_steps=20, n_samples=8,
                                                       lr=1.0, seed=0)),
        Case("uniform start, another seed", dict(logits=torch.zeros(5, dtype=DTYPE), rewards=rewards, n_steps=10,
                                                 n_samples=4, lr=0.5, seed=3)),
        Case("G = 2 samples per step", dict(logits=p_ref.log(), rewards=rewards, n_steps=15, n_samples=2, lr=1.0,
                                            seed=1)),
        Case("all rewards equal: nothing to learn", dict(logits=p_ref.log(), rewards=torch.ones(5, dtype=DTYPE),
                                                         n_steps=5, n_samples=4, lr=1.0, seed=0)),
    ]


def _train_bandit_with(advantage_fn, lr_sign=1.0, resample=True):
    """A REINFORCE loop with its advantage rule, direction and sampling made wrong on purpose."""
    def train(logits, rewards, n_steps, n_samples, lr, seed):
        generator = torch.Generator().manual_seed(seed)
        theta = logits.clone()
        actions = None
        for _ in range(n_steps):
            if resample or actions is None:
                actions = torch.multinomial(torch.softmax(theta, -1), n_samples, replacement=True, generator=generator)
            r = rewards[actions]
            grad = (advantage_fn(r)[:, None] * _score(theta, actions)).mean(0)
            theta = theta + lr_sign * lr * grad
        return theta
    return train


def _loo(r):
    return losses.rloo_advantages(r, len(r))


def _rloo_cases():
    return [
        Case("one group of 4", dict(rewards=_t([1.0, 0.0, 1.0, 1.0]), group_size=4)),
        Case("two groups of 3", dict(rewards=_t([0.2, -1.0, 0.7, 3.0, 2.5, 2.0]), group_size=3)),
        Case("G = 2", dict(rewards=_t([1.0, 0.0, 0.5, 0.5]), group_size=2)),
        Case("ties: a group of equal rewards", dict(rewards=_t([1.0, 1.0, 1.0, 0.0, 1.0, 0.0]), group_size=3)),
        Case("random rewards, groups of 8", dict(rewards=_randn(16, seed=4), group_size=8)),
    ]


def _rloo_mean_including_self(rewards, group_size):
    return losses.grpo_advantages(rewards, group_size, scale="none")


def _rloo_batch_baseline(rewards, group_size):
    n = rewards.numel()
    return rewards - (rewards.sum() - rewards) / (n - 1)


def _rloo_sign_flip(rewards, group_size):
    return -losses.rloo_advantages(rewards, group_size)


def _rloo_divide_by_g(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - (R.sum(1, keepdim=True) - R) / group_size).reshape(-1)


# ---------------------------------------------------------------------------------------------------------
# 03 · PPO clipped loss, GAE
# ---------------------------------------------------------------------------------------------------------


def _ppo_clip(logp, old_logp, advantages, mask, eps):
    return losses.ppo_clip_loss(logp, old_logp, advantages, mask, eps)[0]


def _ppo_cases():
    eps = 0.2
    at_bounds = torch.log(_t([[1 - eps, 1 + eps, 1 - eps, 1 + eps]]))
    padded_logp = _t([[-1.0, -0.5, -2.0, -9.0], [-0.3, -9.0, -9.0, -9.0]])
    padded_old = _t([[-1.2, -0.2, -2.0, 0.0], [-0.9, 0.0, 0.0, 0.0]])
    padded_mask = _t([[1, 1, 1, 0], [1, 0, 0, 0]])
    padded_adv = _t([[1.0, -1.0, 0.5, 5.0], [2.0, 5.0, 5.0, 5.0]])
    logp, old_logp = _randn(3, 6, seed=5) * 0.3 - 1.0, _randn(3, 6, seed=6) * 0.3 - 1.0
    return [
        Case("random ratios, Â of both signs", dict(logp=logp, old_logp=old_logp, advantages=_randn(3, 6, seed=7),
                                                    mask=torch.ones(3, 6, dtype=DTYPE), eps=eps)),
        Case("r far above 1 + ε, Â > 0", dict(logp=_t([[0.0, -0.1]]), old_logp=_t([[-1.0, -1.0]]),
                                              advantages=_t([[1.0, 2.0]]), mask=torch.ones(1, 2, dtype=DTYPE),
                                              eps=eps)),
        Case("r far below 1 - ε, Â < 0", dict(logp=_t([[-3.0, -2.5]]), old_logp=_t([[-1.0, -1.0]]),
                                              advantages=_t([[-1.0, -2.0]]), mask=torch.ones(1, 2, dtype=DTYPE),
                                              eps=eps)),
        Case("r far above 1 + ε, Â < 0 (not clipped)", dict(logp=_t([[0.0]]), old_logp=_t([[-1.0]]),
                                                            advantages=_t([[-1.5]]), mask=torch.ones(1, 1, dtype=DTYPE),
                                                            eps=eps)),
        Case("r far below 1 - ε, Â > 0 (not clipped)", dict(logp=_t([[-3.0]]), old_logp=_t([[-1.0]]),
                                                            advantages=_t([[1.5]]), mask=torch.ones(1, 1, dtype=DTYPE),
                                                            eps=eps)),
        Case("r exactly at 1 ± ε", dict(logp=at_bounds, old_logp=torch.zeros(1, 4, dtype=DTYPE),
                                        advantages=_t([[1.0, 1.0, -1.0, -1.0]]), mask=torch.ones(1, 4, dtype=DTYPE),
                                        eps=eps), check_grad=False),
        Case("padding at the end of each row", dict(logp=padded_logp, old_logp=padded_old, advantages=padded_adv,
                                                    mask=padded_mask, eps=eps)),
        Case("one-token response next to a longer one", dict(logp=padded_logp, old_logp=padded_old,
                                                             advantages=-padded_adv, mask=padded_mask, eps=0.1)),
    ]


def _ppo_with(surrogate, detach_ratio=False, use_mask=True, mean_over_all=False, sign=-1.0):
    """The PPO loss with one thing made wrong on purpose."""
    def loss(logp, old_logp, advantages, mask, eps):
        ratio = torch.exp(logp - old_logp)
        if detach_ratio:
            ratio = ratio.detach()
        objective = surrogate(ratio, advantages, eps)
        if not use_mask:
            return sign * objective.mean()
        objective = objective * mask
        return sign * (objective.mean() if mean_over_all else objective.sum() / mask.sum())
    return loss


def _surrogate_max(ratio, advantages, eps):
    return torch.maximum(ratio * advantages, torch.clamp(ratio, 1 - eps, 1 + eps) * advantages)


def _surrogate_upper_clip_only(ratio, advantages, eps):
    return torch.minimum(ratio * advantages, torch.clamp(ratio, max=1 + eps) * advantages)


def _surrogate_clipped_only(ratio, advantages, eps):
    return torch.clamp(ratio, 1 - eps, 1 + eps) * advantages


def _gae(rewards, values, mask, gamma, lam):
    return losses.gae(rewards, values, mask, gamma, lam)[0]


def _gae_cases():
    traj = toy.toy_trajectory()
    padded_rewards = _t([[0.0, -0.1, 1.0, 7.0, 7.0], [0.5, 7.0, 7.0, 7.0, 7.0], [0.1, 0.0, 0.2, -0.3, 1.0]])
    padded_values = _t([[0.2, 0.4, 0.6, 9.0, 9.0], [0.3, 9.0, 9.0, 9.0, 9.0], [0.5, 0.4, 0.3, 0.2, 0.1]])
    padded_mask = _t([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    empty_mask = _t([[1, 1, 0], [0, 0, 0]])
    return [
        Case("toy trajectory, γ = 1, λ = 0.95", dict(rewards=traj.rewards, values=traj.values, mask=traj.mask,
                                                     gamma=1.0, lam=0.95)),
        Case("λ = 0: one-step TD errors", dict(rewards=traj.rewards, values=traj.values, mask=traj.mask, gamma=0.9,
                                               lam=0.0)),
        Case("λ = 1, γ = 0.9: discounted return minus V", dict(rewards=traj.rewards, values=traj.values,
                                                               mask=traj.mask, gamma=0.9, lam=1.0)),
        Case("padding (garbage r and V after the last token), one-token row",
             dict(rewards=padded_rewards, values=padded_values, mask=padded_mask, gamma=0.99, lam=0.9)),
        Case("an empty response", dict(rewards=_t([[0.0, 1.0, 4.0], [4.0, 4.0, 4.0]]),
                                       values=_t([[0.5, 0.5, 4.0], [4.0, 4.0, 4.0]]), mask=empty_mask, gamma=1.0,
                                       lam=0.95)),
    ]


def _gae_loop(rewards, values, mask, gamma, lam, decay, zero_padded_values=True, reverse=True):
    """GAE's backward recursion Â_t = δ_t + decay · Â_{t+1}, with its bookkeeping made wrong on purpose."""
    if zero_padded_values:
        rewards, values = rewards * mask, values * mask
    T = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[:, 0])
    for t in (reversed(range(T)) if reverse else range(T)):
        next_value = values[:, t + 1] if t + 1 < T else torch.zeros_like(running)
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + decay(gamma, lam) * running) * mask[:, t]
        advantages[:, t] = running
    return advantages


def _gae_padding_bootstrap(rewards, values, mask, gamma, lam):
    return _gae_loop(rewards, values, mask, gamma, lam, lambda g, la: g * la, zero_padded_values=False)


def _gae_gamma_only(rewards, values, mask, gamma, lam):
    return _gae_loop(rewards, values, mask, gamma, lam, lambda g, la: g)


def _gae_forward(rewards, values, mask, gamma, lam):
    return _gae_loop(rewards, values, mask, gamma, lam, lambda g, la: g * la, reverse=False)


def _gae_returns(rewards, values, mask, gamma, lam):
    return losses.gae(rewards, values, mask, gamma, lam)[1]


# ---------------------------------------------------------------------------------------------------------
# 04 · group-normalised advantages, k3
# ---------------------------------------------------------------------------------------------------------


def _grpo_advantages(rewards, group_size):
    return losses.grpo_advantages(rewards, group_size)


def _grpo_cases():
    return [
        Case("the lecture's group: 2 correct out of 8", dict(rewards=_t([1, 0, 1, 0, 0, 0, 0, 0]), group_size=8)),
        Case("two groups of 4 with different spreads", dict(rewards=_t([0.1, 0.9, 0.4, 0.6, 3.0, -2.0, 1.0, 0.0]),
                                                            group_size=4)),
        Case("G = 2", dict(rewards=_t([1.0, 0.0, 0.3, 0.8]), group_size=2)),
        Case("a group with zero std (every answer right)", dict(rewards=_t([1, 1, 1, 1, 1, 0, 0, 1]), group_size=4)),
        Case("random rewards, groups of 8", dict(rewards=_randn(16, seed=8), group_size=8)),
    ]


def _grpo_population_std(rewards, group_size):
    R = rewards.view(-1, group_size)
    std = R.std(1, keepdim=True, correction=0)
    return torch.where(std < 1e-4, torch.zeros_like(R), (R - R.mean(1, keepdim=True)) / std.clamp_min(1e-4)).flatten()


def _grpo_no_std(rewards, group_size):
    return losses.grpo_advantages(rewards, group_size, scale="none")


def _grpo_batch_statistics(rewards, group_size):
    return (rewards - rewards.mean()) / rewards.std()


def _grpo_unguarded(rewards, group_size):
    R = rewards.view(-1, group_size)
    return ((R - R.mean(1, keepdim=True)) / R.std(1, keepdim=True)).flatten()


def _k3_cases():
    logp, ref_logp = _randn(2, 5, seed=9) - 1.0, _randn(2, 5, seed=10) - 1.0
    return [
        Case("random tokens", dict(logp=logp, ref_logp=ref_logp)),
        Case("p_θ = p_ref: k3 = 0", dict(logp=_t([[-0.5, -2.0, -7.0]]), ref_logp=_t([[-0.5, -2.0, -7.0]]))),
        Case("p_θ far above and far below p_ref", dict(logp=_t([[-0.1, -6.0]]), ref_logp=_t([[-5.0, -0.2]]))),
        Case("tiny differences", dict(logp=_t([[-1.0, -2.0]]), ref_logp=_t([[-1.0 + 1e-6, -2.0 - 1e-6]]))),
    ]


def _k3_upside_down(logp, ref_logp):
    return losses.kl_k3(ref_logp, logp)


def _k3_is_k1(logp, ref_logp):
    return losses.kl_k1(logp, ref_logp)


def _k3_is_k2(logp, ref_logp):
    return losses.kl_k2(logp, ref_logp)


def _k3_without_minus_one(logp, ref_logp):
    return losses.kl_k3(logp, ref_logp) + 1


# ---------------------------------------------------------------------------------------------------------
# 05 · DPO loss with its implicit rewards, Bradley–Terry reward-model loss
# ---------------------------------------------------------------------------------------------------------


def _dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    return losses.dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)


def _dpo_cases():
    def pairs(pc, pr, rc, rr, beta):
        return dict(policy_chosen_logps=_t(pc), policy_rejected_logps=_t(pr), ref_chosen_logps=_t(rc),
                    ref_rejected_logps=_t(rr), beta=beta)
    return [
        Case("the lecture's quiz pair", pairs([0.1], [-2.0], [0.0], [0.0], 0.1)),
        Case("a batch, the reference differs per answer", pairs([-12.0, -30.5, -8.0], [-14.0, -29.0, -8.5],
                                                                [-13.0, -31.0, -7.0], [-13.5, -30.0, -9.0], 0.5)),
        Case("p_θ = p_ref: loss log 2, rewards 0", pairs([-5.0, -9.0], [-6.0, -4.0], [-5.0, -9.0], [-6.0, -4.0], 0.1)),
        Case("a huge margin the wrong way round", pairs([-900.0], [-10.0], [-10.0], [-10.0], 1.0)),
    ]


def _dpo_no_reference(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    zero = torch.zeros_like(policy_chosen_logps)
    return losses.dpo_loss(policy_chosen_logps, policy_rejected_logps, zero, zero, beta)


def _dpo_swapped(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    loss, chosen, rejected = losses.dpo_loss(policy_rejected_logps, policy_chosen_logps, ref_rejected_logps,
                                             ref_chosen_logps, beta)
    return loss, rejected, chosen


def _dpo_no_beta_in_rewards(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    loss, chosen, rejected = _dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                                  beta)
    return loss, chosen / beta, rejected / beta


def _dpo_log_of_sigmoid(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    _, chosen, rejected = _dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)
    margin = beta * ((policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps))
    return -torch.log(torch.sigmoid(margin)), chosen, rejected


def _bt_cases():
    return [
        Case("four pairs", dict(chosen_scores=_t([1.0, 0.2, -0.5, 2.0]), rejected_scores=_t([0.0, 0.4, -1.5, 2.0]))),
        Case("one pair", dict(chosen_scores=_t([0.3]), rejected_scores=_t([-0.3]))),
        Case("random scores", dict(chosen_scores=_randn(6, seed=11), rejected_scores=_randn(6, seed=12))),
        Case("a margin of -800: the model is sure and wrong", dict(chosen_scores=_t([-400.0, 1.0]),
                                                                   rejected_scores=_t([400.0, 0.0]))),
    ]


def _bt_swapped(chosen_scores, rejected_scores):
    return losses.bradley_terry_loss(rejected_scores, chosen_scores)


def _bt_summed(chosen_scores, rejected_scores):
    return losses.bradley_terry_loss(chosen_scores, rejected_scores) * chosen_scores.numel()


def _bt_log_of_sigmoid(chosen_scores, rejected_scores):
    return -torch.log(torch.sigmoid(chosen_scores - rejected_scores)).mean()


def _bt_no_minus(chosen_scores, rejected_scores):
    return F.logsigmoid(chosen_scores - rejected_scores).mean()


# ---------------------------------------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------------------------------------

LOG_SIGMOID_HINT = "log(sigmoid(x)) underflows to -inf for large negative x: use F.logsigmoid(x)."
SIGN_HINT = "the sign is flipped: check which way the gradient should point, and whether you return a loss " \
            "(to minimise) or an objective (to maximise)."

EXERCISES_LIST = [
    Exercise(
        "reinforce-gradient", "policy-gradient", "reinforce_gradient", _reinforce_gradient, _reinforce_gradient_cases,
        (
            Mistake("sign flip", _reinforce_gradient_sign_flip,
                    "your estimate points downhill: ∇J = E[(R - b) ∇ log p_θ(y)] is the direction that RAISES the "
                    "expected reward, the minus sign belongs to the loss, not to the estimate."),
            Mistake("baseline ignored", _reinforce_gradient_no_baseline,
                    "the baseline b is not subtracted: weight each score by R(a_i) - b, not by R(a_i)."),
            Mistake("∇p instead of ∇log p", _reinforce_gradient_of_p,
                    "this is ∇p_θ(a), not ∇ log p_θ(a) = ∇p_θ(a) / p_θ(a): the log-derivative trick divides by p, "
                    "for a softmax ∇_θ log p_θ(a) = onehot(a) - p_θ."),
            Mistake("sum instead of mean", _reinforce_gradient_summed,
                    "you sum over the N samples: the estimate is an AVERAGE, (1/N) Σ_i."),
        ),
    ),
    Exercise(
        "reinforce-loop", "policy-gradient", "train_bandit", _train_bandit, _train_bandit_cases,
        (
            Mistake("sign flip", _train_bandit_with(_loo, lr_sign=-1.0),
                    "the logits move downhill: REINFORCE ascends J, θ ← θ + lr · ĝ (or minimises the loss -ĝ·θ)."),
            Mistake("no baseline", _train_bandit_with(lambda r: r),
                    "no baseline: use the leave-one-out advantages Â_i = R_i - mean of the other N - 1 rewards."),
            Mistake("mean baseline includes the sample", _train_bandit_with(lambda r: r - r.mean()),
                    "the baseline includes the sample itself (R_i - mean of all N): leave R_i out, divide by N - 1."),
            Mistake("samples drawn once", _train_bandit_with(_loo, resample=False),
                    "the samples are drawn once, before the loop: REINFORCE is on-policy, draw fresh actions from "
                    "softmax(θ) at every step."),
        ),
    ),
    Exercise(
        "rloo-baseline", "policy-gradient", "leave_one_out_advantages", losses.rloo_advantages, _rloo_cases,
        (
            Mistake("baseline includes the sample", _rloo_mean_including_self,
                    "the baseline includes the sample itself (R_i - mean of the whole group): leave R_i out, "
                    "b_i = (Σ_j R_j - R_i) / (G - 1)."),
            Mistake("divide by G", _rloo_divide_by_g,
                    "the others' sum is divided by G: there are only G - 1 others."),
            Mistake("whole-batch baseline", _rloo_batch_baseline,
                    "the baseline mixes prompts: each group of G consecutive rewards belongs to one prompt, compare "
                    "a response only with the other answers to ITS prompt (reshape to (B/G, G))."),
            Mistake("sign flip", _rloo_sign_flip, "the sign is flipped: Â_i = R_i - baseline, not baseline - R_i."),
        ),
    ),
    Exercise(
        "ppo-clip", "ppo", "clipped_policy_loss", _ppo_clip, _ppo_cases,
        (
            Mistake("max instead of min", _ppo_with(_surrogate_max),
                    "you take the max of the two terms: PPO takes the MIN, the pessimistic bound, so that moving "
                    "the ratio beyond the clip range never pays."),
            Mistake("sign flip", _ppo_with(losses.clipped_surrogate, sign=1.0),
                    "the sign is flipped: min(r Â, clip(r) Â) is an objective to MAXIMISE, the loss is its negative."),
            Mistake("clip on one side only", _ppo_with(_surrogate_upper_clip_only),
                    "only 1 + ε is clipped: with Â < 0 the ratio must be clipped at 1 - ε as well, "
                    "clip(r, 1 - ε, 1 + ε)."),
            Mistake("no min", _ppo_with(_surrogate_clipped_only),
                    "you return only the clipped term: the min with the unclipped r Â is what keeps the full "
                    "(unclipped) penalty when the ratio moves the wrong way."),
            Mistake("detached ratio", _ppo_with(losses.clipped_surrogate, detach_ratio=True),
                    "the values are right but no gradient reaches logp: the ratio is detached (or built from "
                    "numbers that are). Compute r = exp(logp - old_logp) with torch ops on logp itself."),
            Mistake("forgotten mask", _ppo_with(losses.clipped_surrogate, use_mask=False),
                    "padded tokens are counted: apply the mask, and average over the real tokens only."),
            Mistake("padding counted in the mean", _ppo_with(losses.clipped_surrogate, mean_over_all=True),
                    "padding is counted in the mean: divide by the number of real tokens (mask.sum()), not by B·T."),
        ),
        grad_inputs=("logp",),
    ),
    Exercise(
        "gae", "ppo", "gae_advantages", _gae, _gae_cases,
        (
            Mistake("bootstrap from padding", _gae_padding_bootstrap,
                    "after the last real token you bootstrap from a padded V: the response has ended, V(s_T) = 0 "
                    "there (zero the padded values, or mask them)."),
            Mistake("γ instead of γλ", _gae_gamma_only,
                    "the recursion decays by γ only: Â_t = δ_t + γλ Â_{t+1}."),
            Mistake("forward recursion", _gae_forward,
                    "the recursion runs forwards: Â_t needs Â_{t+1}, so loop t from the last token back to the first."),
            Mistake("returns instead of advantages", _gae_returns,
                    "these are the returns Â_t + V(s_t), the value target: return the advantages themselves."),
        ),
    ),
    Exercise(
        "grpo-advantages", "grpo", "group_advantages", _grpo_advantages, _grpo_cases,
        (
            Mistake("population std", _grpo_population_std,
                    "you divide by the population std (1/G): the library, like TRL, uses the sample std "
                    "(1/(G - 1), torch.std's default)."),
            Mistake("no std", _grpo_no_std,
                    "the advantages are centred but not scaled: divide by the group's std (that is Dr. GRPO, "
                    "scale='none')."),
            Mistake("batch statistics", _grpo_batch_statistics,
                    "mean and std are taken over the whole batch: normalise within each group of G consecutive "
                    "rewards (reshape to (B/G, G))."),
            Mistake("zero std not handled", _grpo_unguarded,
                    "a group whose rewards are all equal has std 0, and 0/0 is NaN: give such a group Â = 0."),
        ),
    ),
    Exercise(
        "k3-estimator", "grpo", "k3_estimate", losses.kl_k3, _k3_cases,
        (
            Mistake("ratio upside down", _k3_upside_down,
                    "the ratio is upside down: k3 uses p_ref/p_θ (samples come from p_θ, so E[p_ref/p_θ] = 1)."),
            Mistake("k1", _k3_is_k1, "this is k1 = log p_θ - log p_ref; k3 = p_ref/p_θ - log(p_ref/p_θ) - 1."),
            Mistake("k2", _k3_is_k2, "this is k2 = ½ (log p_θ - log p_ref)²; k3 = p_ref/p_θ - log(p_ref/p_θ) - 1."),
            Mistake("forgotten - 1", _k3_without_minus_one,
                    "the '- 1' is missing: without it k3 is 1 where p_θ = p_ref instead of 0."),
        ),
        grad_inputs=("logp",),
    ),
    Exercise(
        "dpo-loss", "dpo", "dpo_pair_loss", _dpo, _dpo_cases,
        (
            Mistake("no reference", _dpo_no_reference,
                    "the reference model is missing: the implicit reward is β log p_θ(y|x)/p_ref(y|x), subtract "
                    "the reference log-probs."),
            Mistake("chosen and rejected swapped", _dpo_swapped,
                    "chosen and rejected are swapped: the loss is -log σ(r_w - r_l), with r_w of the chosen answer."),
            Mistake("β missing from the rewards", _dpo_no_beta_in_rewards,
                    "the loss is right but the implicit rewards lack β: r = β (log p_θ - log p_ref)."),
            Mistake("log of sigmoid", _dpo_log_of_sigmoid, LOG_SIGMOID_HINT),
        ),
        grad_inputs=("policy_chosen_logps", "policy_rejected_logps"),
    ),
    Exercise(
        "bradley-terry", "dpo", "reward_model_loss", losses.bradley_terry_loss, _bt_cases,
        (
            Mistake("chosen and rejected swapped", _bt_swapped,
                    "chosen and rejected are swapped: P(y_w ≻ y_l) = σ(RM(y_w) - RM(y_l))."),
            Mistake("sum instead of mean", _bt_summed, "you sum over the pairs: the loss is the MEAN over pairs."),
            Mistake("log of sigmoid", _bt_log_of_sigmoid, LOG_SIGMOID_HINT),
            Mistake("no minus", _bt_no_minus,
                    "the minus sign is missing: the loss is the NEGATIVE log-likelihood -log σ(...)."),
        ),
        grad_inputs=("chosen_scores",),
    ),
]
EXERCISES: dict[str, Exercise] = {e.id: e for e in EXERCISES_LIST}


def list_exercises(topic: str | None = None) -> list[str]:
    """Ids of the implement-it exercises, optionally only those of one notebook topic."""
    return [e.id for e in EXERCISES_LIST if topic is None or e.topic == topic]


def _lookup(exercise_id: str) -> Exercise:
    if exercise_id not in EXERCISES:
        raise KeyError(f"unknown exercise id {exercise_id!r}; valid ids: {', '.join(EXERCISES)}")
    return EXERCISES[exercise_id]


# ---------------------------------------------------------------------------------------------------------
# Running and comparing
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    values: tuple[torch.Tensor, ...] | None  # None when the function raised
    grads: dict[str, torch.Tensor]
    error: BaseException | None = None


def _fresh_inputs(case: Case, grad_inputs: Sequence[str]) -> dict[str, Any]:
    """Copies of the case's inputs (so a function that writes into them cannot spoil the next call)."""
    inputs = {}
    for name, value in case.inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().clone()
            if name in grad_inputs:
                value.requires_grad_(True)
        inputs[name] = value
    return inputs


def _as_outputs(result: Any) -> tuple[torch.Tensor, ...]:
    items = result if isinstance(result, (tuple, list)) else (result,)
    return tuple(torch.as_tensor(item).to(DTYPE) for item in items)


def _run(fn: Callable[..., Any], case: Case, grad_inputs: Sequence[str]) -> Outcome:
    """Call fn on fresh copies of the case's inputs; the outputs and the gradients of the first output's sum."""
    wanted = grad_inputs if case.check_grad else ()
    inputs = _fresh_inputs(case, wanted)
    try:
        outputs = _as_outputs(fn(**inputs))
        grads = {}
        for name in wanted:
            grad = None
            if outputs[0].requires_grad:
                (grad,) = torch.autograd.grad(outputs[0].sum(), inputs[name], allow_unused=True, retain_graph=True)
            grads[name] = torch.zeros_like(inputs[name]) if grad is None else grad.detach().to(DTYPE)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 -- any error of the student's code is reported, not raised
        return Outcome(None, {}, error)
    return Outcome(tuple(o.detach() for o in outputs), grads)


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True))


def _same(actual: Outcome, expected: Outcome) -> tuple[bool, str]:
    """(agree, what differs) between two outcomes on one case."""
    if actual.values is None or expected.values is None:
        return actual.values is None and expected.values is None, "an error"
    if len(actual.values) != len(expected.values):
        return False, f"the number of outputs ({len(actual.values)}, expected {len(expected.values)})"
    for i, (a, e) in enumerate(zip(actual.values, expected.values)):
        if not _close(a, e):
            return False, "the values" if len(expected.values) == 1 else f"the values of output {i}"
    for name, grad in expected.grads.items():
        if not _close(actual.grads[name], grad):
            return False, f"the gradient with respect to {name}"
    return True, ""


def _fmt(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.is_floating_point():
            value = value.double().round(decimals=4)
        return str(value.tolist())
    return repr(value)


def _hint(exercise: Exercise, student: list[Outcome], failing: int) -> str:
    """The hint of the wrong version that agrees with the student on every case, else on the failing case."""
    cases = exercise.cases()
    outcomes = {m.name: [_run(m.fn, case, exercise.grad_inputs) for case in cases[: len(student)]]
                for m in exercise.mistakes}
    for rule in (range(len(student)), (failing,)):
        for mistake in exercise.mistakes:
            if all(_same(student[i], outcomes[mistake.name][i])[0] for i in rule):
                return f"({mistake.name}) {mistake.hint}"
    return f"compare your steps with the equation term by term (stuck? exercises.solution({exercise.id!r}))."


def _fmt_outputs(values: tuple[torch.Tensor, ...]) -> str:
    return _fmt(values[0]) if len(values) == 1 else "(" + ", ".join(_fmt(v) for v in values) + ")"


def _report(exercise: Exercise, case: Case, expected: Outcome, actual: Outcome, what: str, hint: str) -> str:
    problem = "your function raised an error" if actual.values is None else f"mismatch in {what}"
    lines = [f"✗ {exercise.id}: case '{case.name}' failed: {problem}.", "  inputs:"]
    lines += [f"    {name} = {_fmt(value)}" for name, value in case.inputs.items()]
    if actual.values is None:
        lines.append(f"  error: {type(actual.error).__name__}: {actual.error}")
    elif what.startswith("the gradient"):
        name = what.rsplit(" ", 1)[-1]
        lines += [f"  expected gradient: {_fmt(expected.grads[name])}",
                  f"  yours:             {_fmt(actual.grads[name])}"]
    else:
        lines += [f"  expected: {_fmt_outputs(expected.values)}", f"  yours:    {_fmt_outputs(actual.values)}"]
    lines.append(f"  hint: {hint}")
    return "\n".join(lines)


def check_function(exercise_id: str, fn: Callable[..., Any], strict: bool | None = None) -> bool:
    """Run `fn` and the library's function on every case of the exercise; print the verdict, return True if all pass.

    The first failing case is printed with its inputs, the expected and actual values (or gradients) and a hint
    naming the classic mistake the function makes. `strict` (default: the environment variable
    MINIRLHF_EXERCISES_STRICT=1) raises ExerciseFailed instead of returning False.
    """
    exercise = _lookup(exercise_id)
    strict = env_flag(STRICT_ENV) if strict is None else strict
    student: list[Outcome] = []
    message = None
    for case in exercise.cases():
        expected = _run(exercise.reference, case, exercise.grad_inputs)
        try:
            actual = _run(fn, case, exercise.grad_inputs)
        except NotImplementedError:
            message = (f"{exercise_id}: not implemented yet. Replace `raise NotImplementedError` in "
                       f"{exercise.stub}() with your code and run the check again "
                       f"(stuck? exercises.solution({exercise_id!r}) shows one way).")
            break
        student.append(actual)
        agree, what = _same(actual, expected)
        if not agree:
            message = _report(exercise, case, expected, actual, what, _hint(exercise, student, len(student) - 1))
            break
    if message is None:
        grads = " and gradients" if exercise.grad_inputs else ""
        print(f"✓ {exercise_id}: passed {len(student)} cases (values{grads} match minirlhf's own function).")
        return True
    print(message)
    if strict:
        raise ExerciseFailed(message)
    return False


# ---------------------------------------------------------------------------------------------------------
# Solutions
# ---------------------------------------------------------------------------------------------------------


def solution_source(exercise_id: str) -> str:
    """The worked solution as code: the imports it needs and the function, named like the notebook's stub."""
    source = inspect.getsource(_lookup(exercise_id).solution_fn)
    imports = "import torch\n" + ("import torch.nn.functional as F\n" if "F." in source else "")
    return f"{imports}\n\n{source}"


def solution(exercise_id: str) -> None:
    """Print a worked solution of the exercise."""
    print(solution_source(exercise_id))


def fill_solutions(nb: Any) -> Any:
    """Replace every stub cell tagged "exercise:<id>" in a notebook (nbformat node or dict) with its solution.

    Returns the notebook (changed in place) so the headless test can run a notebook with every exercise solved.
    """
    for cell in nb["cells"]:
        tags = [t for t in cell.get("metadata", {}).get("tags", []) if t.startswith(TAG_PREFIX)]
        if cell["cell_type"] == "code" and tags:
            cell["source"] = solution_source(tags[0][len(TAG_PREFIX):])
    return nb
