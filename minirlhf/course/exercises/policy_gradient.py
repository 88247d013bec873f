"""Exercises of notebook 02: the REINFORCE gradient estimate, leave-one-out advantages, a REINFORCE loop."""

from __future__ import annotations

import torch

from minirlhf import losses
from minirlhf.course import toy
from minirlhf.course.exercises.engine import DTYPE, Case, Exercise, Mistake, randn, tensor


def _score(logits: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """(N, K) rows ∇_θ log softmax(θ)[a], by autograd, for the wrong versions that need it."""
    jacobian = torch.autograd.functional.jacobian(lambda t: torch.log_softmax(t, -1), logits)
    return jacobian[actions]


# ---------------------------------------------------------------------------------------------------------
# reinforce-gradient
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
        Case("random logits, baseline 0.3", dict(logits=randn(5, seed=1), actions=torch.tensor([4, 4, 1, 0, 3, 2]),
                                                 rewards=rewards, baseline=0.3)),
        Case("one sample", dict(logits=theta, actions=torch.tensor([3]), rewards=rewards, baseline=0.0)),
        Case("every sample the same action", dict(logits=randn(5, seed=2), actions=torch.tensor([1, 1, 1, 1]),
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


def _reinforce_gradient_onehot_score(logits, actions, rewards, baseline):
    onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(logits.dtype)
    return ((rewards[actions] - baseline)[:, None] * onehot).mean(0)


def _reinforce_gradient_batch_mean_baseline(logits, actions, rewards, baseline):
    r = rewards[actions]
    return _reinforce_gradient(logits, actions, rewards - r.mean() + baseline, baseline)


def _reinforce_gradient_baseline_added(logits, actions, rewards, baseline):
    return _reinforce_gradient(logits, actions, rewards, -baseline)


def _reinforce_gradient_with_probs(probs_of):
    """The score onehot(a) - q with q = probs_of(logits) in place of softmax(θ)."""
    def estimate(logits, actions, rewards, baseline):
        onehot = torch.nn.functional.one_hot(actions, logits.shape[-1]).to(logits.dtype)
        return ((rewards[actions] - baseline)[:, None] * (onehot - probs_of(logits))).mean(0)
    return estimate


def _reinforce_gradient_over_k(logits, actions, rewards, baseline):
    return _reinforce_gradient(logits, actions, rewards, baseline) * len(actions) / logits.shape[-1]


REINFORCE_GRADIENT = Exercise(
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
        Mistake("score without the normaliser", _reinforce_gradient_onehot_score,
                "the score is onehot(a) only: log softmax(θ)_a = θ_a - log Σ_k e^θ_k, and the log-sum-exp term "
                "contributes -p_θ, so ∇_θ log p_θ(a) = onehot(a) - p_θ."),
        Mistake("batch mean for the baseline", _reinforce_gradient_batch_mean_baseline,
                "you subtract the mean reward of the samples, not the baseline argument b: weight each score by "
                "R(a_i) - b with the b you are given."),
        Mistake("baseline added", _reinforce_gradient_baseline_added,
                "the baseline is added: weight each score by R(a_i) - b."),
        Mistake("log-probabilities in the score", _reinforce_gradient_with_probs(lambda t: torch.log_softmax(t, -1)),
                "the score subtracts log p_θ: ∇_θ log softmax(θ)_a = onehot(a) - p_θ, with the probabilities "
                "p_θ = softmax(θ), not their logs."),
        Mistake("logits used as probabilities", _reinforce_gradient_with_probs(lambda t: t),
                "the score subtracts the logits θ: ∇_θ log softmax(θ)_a = onehot(a) - p_θ with p_θ = softmax(θ)."),
        Mistake("divided by the number of actions", _reinforce_gradient_over_k,
                "you divide by the number of actions K: the estimate averages over the N SAMPLES, (1/N) Σ_i."),
    ),
)


# ---------------------------------------------------------------------------------------------------------
# rloo-baseline
# ---------------------------------------------------------------------------------------------------------


def _rloo_cases():
    return [
        Case("one group of 4", dict(rewards=tensor([1.0, 0.0, 1.0, 1.0]), group_size=4)),
        Case("two groups of 3", dict(rewards=tensor([0.2, -1.0, 0.7, 3.0, 2.5, 2.0]), group_size=3)),
        Case("G = 2", dict(rewards=tensor([1.0, 0.0, 0.5, 0.5]), group_size=2)),
        Case("ties: a group of equal rewards", dict(rewards=tensor([1.0, 1.0, 1.0, 0.0, 1.0, 0.0]), group_size=3)),
        Case("random rewards, groups of 8", dict(rewards=randn(16, seed=4), group_size=8)),
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


def _rloo_interleaved(rewards, group_size):
    R = rewards.view(group_size, -1)  # column j taken for one prompt's answers: every B/G-th reward
    return (R - (R.sum(0, keepdim=True) - R) / (group_size - 1)).reshape(-1)


def _rloo_others_summed(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - (R.sum(1, keepdim=True) - R)).reshape(-1)


def _rloo_floor_division(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - (R.sum(1, keepdim=True) - R) // (group_size - 1)).reshape(-1)


def _rloo_baseline_returned(rewards, group_size):
    R = rewards.view(-1, group_size)
    return ((R.sum(1, keepdim=True) - R) / (group_size - 1)).reshape(-1)


def _rloo_sum_over_dim0(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - (R.sum(0, keepdim=True) - R) / (group_size - 1)).reshape(-1)


RLOO_BASELINE = Exercise(
    "rloo-baseline", "policy-gradient", "leave_one_out_advantages", losses.rloo_advantages, _rloo_cases,
    (
        Mistake("baseline includes the sample", _rloo_mean_including_self,
                "the baseline includes the sample itself (R_i - mean of the whole group): leave R_i out, "
                "b_i = (Σ_j R_j - R_i) / (G - 1)."),
        Mistake("divide by G", _rloo_divide_by_g, "the others' sum is divided by G: there are only G - 1 others."),
        Mistake("whole-batch baseline", _rloo_batch_baseline,
                "the baseline mixes prompts: each group of G consecutive rewards belongs to one prompt, compare "
                "a response only with the other answers to ITS prompt (reshape to (B/G, G))."),
        Mistake("sign flip", _rloo_sign_flip, "the sign is flipped: Â_i = R_i - baseline, not baseline - R_i."),
        Mistake("groups read interleaved", _rloo_interleaved,
                "your groups are interleaved (every B/G-th reward): a group is G CONSECUTIVE rewards, "
                "rewards.view(-1, G) (one row per prompt), not rewards.view(G, -1)."),
        Mistake("others' sum not averaged", _rloo_others_summed,
                "the baseline is the SUM of the others: it is their mean, (Σ_j R_j - R_i) / (G - 1)."),
        Mistake("floor division", _rloo_floor_division,
                "`//` is floor division, it rounds the baseline down: divide with `/`."),
        Mistake("baseline returned", _rloo_baseline_returned,
                "you return the baseline b_i itself: the advantage is R_i - b_i."),
        Mistake("sum over the wrong dimension", _rloo_sum_over_dim0,
                "you sum over dim 0, across prompts: with R = rewards.view(-1, G) a group is a ROW, sum over dim 1 "
                "(keepdim=True)."),
    ),
)


# ---------------------------------------------------------------------------------------------------------
# reinforce-loop
# ---------------------------------------------------------------------------------------------------------


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


def _train_bandit_with(advantage_fn, lr_sign=1.0, resample=True, reseed=False, extra_steps=0, summed=False,
                       sample_initial=False):
    """A REINFORCE loop with its advantage rule, direction, sampling and bookkeeping made wrong on purpose."""
    def train(logits, rewards, n_steps, n_samples, lr, seed):
        generator = torch.Generator().manual_seed(seed)
        theta = logits.clone()
        actions = None
        for _ in range(n_steps + extra_steps):
            if reseed:
                generator = torch.Generator().manual_seed(seed)
            if resample or actions is None:
                p = torch.softmax(logits if sample_initial else theta, -1)
                actions = torch.multinomial(p, n_samples, replacement=True, generator=generator)
            r = rewards[actions]
            grad = (advantage_fn(r)[:, None] * _score(theta, actions)).mean(0) * (n_samples if summed else 1)
            theta = theta + lr_sign * lr * grad
        return theta
    return train


def _loo(r):
    return losses.rloo_advantages(r, len(r))


REINFORCE_LOOP = Exercise(
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
        Mistake("generator seeded at every step", _train_bandit_with(_loo, reseed=True),
                "the generator is made (and seeded) inside the loop, so every step replays the same random numbers: "
                "make it once, before the loop."),
        Mistake("sum instead of mean", _train_bandit_with(_loo, summed=True),
                "you sum over the N samples: the gradient estimate is their MEAN, (1/N) Σ_i Â_i ∇ log p_θ(a_i)."),
        Mistake("samples from the initial policy", _train_bandit_with(_loo, sample_initial=True),
                "the actions are drawn from softmax of the INITIAL logits: draw them from softmax(θ) of the current "
                "θ, updated at every step."),
        Mistake("one step too few", _train_bandit_with(_loo, extra_steps=-1),
                "one update is missing: make exactly n_steps updates, for _ in range(n_steps)."),
        Mistake("one step too many", _train_bandit_with(_loo, extra_steps=1),
                "one update too many: make exactly n_steps updates, for _ in range(n_steps)."),
        Mistake("advantages divided by their std", _train_bandit_with(lambda r: (r - r.mean()) / (r.std() + 1e-8)),
                "the advantages are divided by the rewards' std (that is GRPO's rule): REINFORCE with a "
                "leave-one-out baseline uses Â_i = R_i - mean of the other N - 1 rewards, unscaled."),
        Mistake("leave-one-out divided by N", _train_bandit_with(lambda r: r - (r.sum() - r) / len(r)),
                "the others' sum is divided by N: there are only N - 1 others."),
    ),
)

EXERCISES = [REINFORCE_GRADIENT, REINFORCE_LOOP, RLOO_BASELINE]
