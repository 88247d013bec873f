"""The implement-it checkers cannot be fooled: generated wrong versions of every exercise are refused, and the ones
students really write get the hint that names their mistake.

For every exercise the worked solution is wrapped into mechanical mutations (an argument dropped or frozen, a
differentiable input detached, two arguments swapped, inputs shifted by one, the output negated, rescaled,
reordered, reduced, or returned as None, a list, a number, a wrong shape or dtype, an input changed in place): each
must be refused, and so must the solution computed in float32 and cast back. Student-style wrong versions, written
here independently of the catalogue, must each be refused with their named hint (or at least refused), and correct
rewrites (renamed parameters, other formulas, loops, numpy round trips, *args, extra keyword arguments with
defaults, lambdas, functools.partial, a callable instance, TRL's GRPO advantage) must pass.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
from collections.abc import Callable
from numbers import Number

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from minirlhf import losses
from minirlhf.course import exercises
from minirlhf.course.exercises import engine, grpo, mutants

IDS = exercises.list_exercises()


def _cases(exercise_id: str) -> tuple[engine.Case, ...]:
    return engine.cases_of(exercises.EXERCISES[exercise_id])


def _parameters(exercise_id: str) -> list[str]:
    return list(_cases(exercise_id)[0].inputs)


def _with_args(fn: Callable, change: Callable[[list], None]) -> Callable:
    def wrapped(*args):
        args = list(args)
        change(args)
        return fn(*args)
    return wrapped


def _on_output(fn: Callable, transform: Callable) -> Callable:
    """fn with its (first) output transformed."""
    def wrapped(*args):
        out = fn(*args)
        if isinstance(out, tuple):
            return (transform(out[0]), *out[1:])
        return transform(out)
    return wrapped


def _refused(exercise_id: str, fn: Callable, capsys) -> str:
    passed = exercises.check_function(exercise_id, fn)
    out = capsys.readouterr().out
    assert passed is False, out
    assert f"✗ {exercise_id}: case '" in out and "  hint: " in out, out
    return out


# ---------------------------------------------------------------------------------------------------------
# Every argument and every differentiable input changes the result of at least one case
# ---------------------------------------------------------------------------------------------------------


def _frozen_versions(exercise_id: str):
    """(label, wrong version): each argument replaced by a value that ignores what the caller passed."""
    solution = exercises.EXERCISES[exercise_id].solution_fn
    for i, name in enumerate(_parameters(exercise_id)):
        values = [case.inputs[name] for case in _cases(exercise_id)]
        if isinstance(values[0], torch.Tensor):
            for fill in (torch.zeros_like, torch.ones_like):
                ignored = _with_args(solution, lambda a, i=i, f=fill: a.__setitem__(i, f(a[i])))
                yield f"{name} -> {fill.__name__}", ignored
        else:
            for value in sorted(set(values)):
                yield f"{name} fixed at {value}", _with_args(solution, lambda a, i=i, v=value: a.__setitem__(i, v))


FROZEN = [(i, label, fn) for i in IDS for label, fn in _frozen_versions(i)]


@pytest.mark.parametrize("exercise_id, label, wrong", FROZEN, ids=[f"{i}: {label}" for i, label, _ in FROZEN])
def test_an_ignored_or_hard_coded_argument_is_refused(exercise_id, label, wrong, capsys):
    _refused(exercise_id, wrong, capsys)


def _reference_detaches(exercise: engine.Exercise, name: str) -> bool:
    """Whether no gradient of the reference reaches the input on any case (KTO's mismatched pairs, via z_ref)."""
    return all(o.grads.get(name) is None or not o.grads[name].any() for o in engine.expected_outcomes(exercise))


DIFFERENTIABLE = [(e.id, name) for e in exercises.EXERCISES_LIST for name in e.grad_inputs
                  if not _reference_detaches(e, name)]
DETACHED_BY_THE_REFERENCE = [(e.id, name) for e in exercises.EXERCISES_LIST for name in e.grad_inputs
                             if _reference_detaches(e, name)]


@pytest.mark.parametrize("exercise_id, name", DIFFERENTIABLE, ids=[f"{i}: {n}" for i, n in DIFFERENTIABLE])
def test_a_detached_input_is_refused_on_its_gradient(exercise_id, name, capsys):
    i = _parameters(exercise_id).index(name)
    wrong = _with_args(exercises.EXERCISES[exercise_id].solution_fn, lambda a: a.__setitem__(i, a[i].detach()))
    out = _refused(exercise_id, wrong, capsys)
    assert f"mismatch in the gradient with respect to {name}" in out


def kto_z_ref_not_detached(policy_logps, ref_logps, desirable, policy_kl_logps, ref_kl_logps, beta, desirable_weight,
                           undesirable_weight):
    """KTO with z_ref kept in the graph: the values are right, a gradient reaches the mismatched pairs."""
    logratio = policy_logps - ref_logps
    z_ref = (policy_kl_logps - ref_kl_logps).mean().clamp_min(0)
    value = torch.where(desirable, desirable_weight * torch.sigmoid(beta * (logratio - z_ref)),
                        undesirable_weight * torch.sigmoid(beta * (z_ref - logratio)))
    weight = torch.where(desirable, desirable_weight, undesirable_weight).to(value)
    return weight - value, beta * logratio.detach(), z_ref.detach()


def test_the_inputs_a_reference_detaches_are_checked_to_get_no_gradient():
    assert DETACHED_BY_THE_REFERENCE == [("kto-loss", "policy_kl_logps"), ("sequence-mask", "behaviour_logp")]


def test_a_gradient_through_a_detached_quantity_is_refused_as_detach_missing(capsys):
    out = _refused("kto-loss", kto_z_ref_not_detached, capsys)
    assert "mismatch in the gradient with respect to policy_kl_logps" in out
    assert engine.hint_names(out, mutants.DETACH_MISSING) and "which the reference detaches" in out, out


def test_every_float_tensor_input_of_a_loss_is_differentiable_or_declared_frozen():
    """The exercises whose first output is a loss compare the gradient of every input a model produces."""
    assert exercises.EXERCISES["kto-loss"].grad_inputs == ("policy_logps", "policy_kl_logps")
    assert exercises.EXERCISES["bradley-terry"].grad_inputs == ("chosen_scores", "rejected_scores")
    assert exercises.EXERCISES["dpo-loss"].grad_inputs == ("policy_chosen_logps", "policy_rejected_logps")
    assert exercises.EXERCISES["ppo-clip"].grad_inputs == ("logp",)  # old_logp and Â are data, detached by PPO
    assert exercises.EXERCISES["k3-estimator"].grad_inputs == ("logp",)  # p_ref is frozen


def _swaps(exercise_id: str):
    names, cases = _parameters(exercise_id), _cases(exercise_id)

    def alike(a, b):
        if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
            return a.shape == b.shape and a.dtype == b.dtype
        return isinstance(a, Number) and isinstance(b, Number) and type(a) is type(b)
    for i, j in itertools.combinations(range(len(names)), 2):
        if all(alike(case.inputs[names[i]], case.inputs[names[j]]) for case in cases):
            yield f"{names[i]} <-> {names[j]}", i, j


SWAPS = [(e, label, i, j) for e in IDS for label, i, j in _swaps(e)]


@pytest.mark.parametrize("exercise_id, label, i, j", SWAPS, ids=[f"{e}: {label}" for e, label, _, _ in SWAPS])
def test_swapped_arguments_are_refused(exercise_id, label, i, j, capsys):
    def swap(args):
        args[i], args[j] = args[j], args[i]
    _refused(exercise_id, _with_args(exercises.EXERCISES[exercise_id].solution_fn, swap), capsys)


def test_every_exercise_has_swappable_arguments_checked():
    assert {e for e, *_ in SWAPS} >= {"ppo-clip", "gae", "k3-estimator", "dpo-loss", "bradley-terry"}


# ---------------------------------------------------------------------------------------------------------
# Mechanical mutations of the output and the inputs
# ---------------------------------------------------------------------------------------------------------


def _shift(x: torch.Tensor) -> torch.Tensor:
    """The off-by-one reading of a tensor: every entry taken from its right neighbour, the last one 0."""
    return torch.cat([x[..., 1:], torch.zeros_like(x[..., :1])], -1)


def _in_place(i: int) -> Callable:
    def wrong(fn):
        def wrapped(*args):
            out = fn(*args)
            with torch.no_grad():
                args[i].logical_not_() if args[i].dtype == torch.bool else args[i].add_(1)
            return out
        return wrapped
    return wrong


OUTPUT_MUTATIONS = {  # name: (transform of the first output, words the message must contain)
    "negated": (lambda out: -out, "mismatch"),
    "doubled": (lambda out: 2 * out, "mismatch"),
    "off by 0.1%": (lambda out: out * 1.001, "mismatch"),
    "shifted by 1e-3": (lambda out: out + 1e-3, "mismatch"),
    "None": (lambda out: None, "None"),
    "a list": (lambda out: out.tolist(), "not a torch.Tensor"),
    "an extra dimension": (lambda out: out.unsqueeze(0), "shape"),
    "float32": (lambda out: out.float(), "dtype torch.float32"),
    "reduced to its sum": (lambda out: out.sum() if out.dim() else out.sum() * 1.5, ""),
    "reduced to its mean": (lambda out: out.mean() if out.dim() else out / 2, ""),
    "reversed": (lambda out: out.flip(-1) if out.dim() else -out, "mismatch"),
}


BOOL_OUTPUT_MUTATIONS = {  # a mask's own mutations (arithmetic on a bool tensor raises or changes its dtype)
    "inverted": (lambda out: ~out, "mismatch"),
    "all True": (lambda out: torch.ones_like(out), "mismatch"),
    "as 0/1 integers": (lambda out: out.long(), "dtype torch.int64, expected torch.bool: a mask is True/False"),
    "as 0/1 floats": (lambda out: out.double(), "dtype torch.float64, expected torch.bool: a mask is True/False"),
    "None": OUTPUT_MUTATIONS["None"],
    "a list": OUTPUT_MUTATIONS["a list"],
    "an extra dimension": OUTPUT_MUTATIONS["an extra dimension"],
    "float32": (lambda out: out.float(), "dtype torch.float32"),
    "reduced to any": (lambda out: out.any(), "shape"),
    "reversed": (lambda out: out.flip(-1), "mismatch"),
}


def _returns_a_mask(exercise_id: str) -> bool:
    result = engine.expected_outcomes(exercises.EXERCISES[exercise_id])[0].result
    return isinstance(result, torch.Tensor) and result.dtype == torch.bool


def _mechanical_versions(exercise_id: str):
    solution = exercises.EXERCISES[exercise_id].solution_fn
    mutations = BOOL_OUTPUT_MUTATIONS if _returns_a_mask(exercise_id) else OUTPUT_MUTATIONS
    for name, (transform, words) in mutations.items():
        yield f"output {name}", _on_output(solution, transform), words
    for i, name in enumerate(_parameters(exercise_id)):
        if isinstance(_cases(exercise_id)[0].inputs[name], torch.Tensor):
            yield f"{name} shifted by one", _with_args(solution, lambda a, i=i: a.__setitem__(i, _shift(a[i]))), ""
            yield f"{name} changed in place", _in_place(i)(solution), f"changed its input `{name}` in place"


MECHANICAL = [(e, label, fn, words) for e in IDS for label, fn, words in _mechanical_versions(e)]


@pytest.mark.parametrize("exercise_id, label, wrong, words", MECHANICAL,
                         ids=[f"{e}: {label}" for e, label, _, _ in MECHANICAL])
def test_a_mechanical_mutation_is_refused_with_a_message_about_it(exercise_id, label, wrong, words, capsys):
    out = _refused(exercise_id, wrong, capsys)
    assert words in out
    if label.endswith("float32"):  # the numbers are right: no mistake may be named
        assert "hint: (" not in out, out
    if label.endswith("in place"):  # the numbers are right: only the in-place change is named
        assert f"hint: ({mutants.IN_PLACE}) " in out, out


def test_a_number_instead_of_a_tensor_is_named(capsys):
    as_number = _on_output(exercises.EXERCISES["bradley-terry"].solution_fn, lambda out: out.item())
    out = _refused("bradley-terry", as_number, capsys)
    assert "the result is a float, not a torch.Tensor" in out and ".item()" in out


def test_a_tuple_where_one_tensor_is_expected_and_a_missing_output_are_named(capsys):
    k3 = exercises.EXERCISES["k3-estimator"].solution_fn
    assert "is a tuple of 2, not a torch.Tensor" in _refused("k3-estimator", lambda a, b: (k3(a, b), a), capsys)
    dpo = exercises.EXERCISES["dpo-loss"].solution_fn
    assert "returned 2 outputs, expected 3" in _refused("dpo-loss", lambda *a: dpo(*a)[:2], capsys)
    assert "returned a torch.Tensor, expected a tuple of 3" in _refused("dpo-loss", lambda *a: dpo(*a)[0], capsys)


# ---------------------------------------------------------------------------------------------------------
# Wrong versions as students write them get the hint that names the mistake
# ---------------------------------------------------------------------------------------------------------


def ppo_eps_ignored(logp, old_logp, advantages, mask, eps):
    ratio = torch.exp(logp - old_logp)
    objective = torch.min(ratio * advantages, torch.clamp(ratio, 0.8, 1.2) * advantages)
    return -(objective * mask).sum() / mask.sum()


def ppo_summed(logp, old_logp, advantages, mask, eps):
    ratio = torch.exp(logp - old_logp)
    objective = torch.min(ratio * advantages, torch.clamp(ratio, 1 - eps, 1 + eps) * advantages)
    return -(objective * mask).sum()


def ppo_log_ratio(logp, old_logp, advantages, mask, eps):
    ratio = logp - old_logp
    objective = torch.min(ratio * advantages, torch.clamp(ratio, 1 - eps, 1 + eps) * advantages)
    return -(objective * mask).sum() / mask.sum()


def ppo_no_min(logp, old_logp, advantages, mask, eps):
    ratio = torch.exp(logp - old_logp)
    return -(torch.clamp(ratio, 1 - eps, 1 + eps) * advantages * mask).sum() / mask.sum()


def grpo_exact_zero(rewards, group_size):
    out = []
    for group in rewards.split(group_size):
        std = group.std()
        out.append(torch.zeros_like(group) if std == 0 else (group - group.mean()) / std)
    return torch.cat(out)


def grpo_interleaved(rewards, group_size):
    R = rewards.reshape(group_size, -1)  # columns taken for prompts
    std = R.std(0, keepdim=True)
    A = torch.where(std < 1e-4, torch.zeros_like(R), (R - R.mean(0, keepdim=True)) / std.clamp_min(1e-4))
    return A.reshape(-1)


def grpo_population(rewards, group_size):
    R = rewards.view(-1, group_size)
    std = R.std(1, unbiased=False, keepdim=True)
    return torch.where(std < 1e-4, 0.0, (R - R.mean(1, keepdim=True)) / std.clamp_min(1e-4)).flatten()


def bt_rejected_detached(chosen_scores, rejected_scores):
    return -F.logsigmoid(chosen_scores - rejected_scores.detach()).mean()


def bt_summed(chosen_scores, rejected_scores):
    return -F.logsigmoid(chosen_scores - rejected_scores).sum()


def dpo_ref_sign(pc, pr, rc, rr, beta):
    pi_logratios = pc - pr
    ref_logratios = rc - rr
    logits = pi_logratios + ref_logratios
    return -F.logsigmoid(beta * logits), (beta * (pc - rc)).detach(), (beta * (pr - rr)).detach()


def dpo_beta_outside(pc, pr, rc, rr, beta):
    logits = (pc - rc) - (pr - rr)
    return -beta * F.logsigmoid(logits), beta * (pc - rc).detach(), beta * (pr - rr).detach()


def dpo_beta_once(pc, pr, rc, rr, beta):
    chosen, rejected = beta * (pc - rc), pr - rr
    return -F.logsigmoid(chosen - rejected), chosen.detach(), beta * rejected.detach()


def dpo_positive(pc, pr, rc, rr, beta):
    chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return F.logsigmoid(chosen - rejected), chosen.detach(), rejected.detach()


def gae_no_mask(rewards, values, mask, gamma, lam):
    T = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(T)):
        next_value = values[:, t + 1] if t + 1 < T else torch.zeros_like(last)
        last = rewards[:, t] + gamma * next_value - values[:, t] + gamma * lam * last
        advantages[:, t] = last
    return advantages


def gae_next_value_off_by_one(rewards, values, mask, gamma, lam):
    rewards, values = rewards * mask, values * mask
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(rewards.shape[1])):
        last = (rewards[:, t] + gamma * values[:, t] - values[:, t] + gamma * lam * last) * mask[:, t]
        advantages[:, t] = last
    return advantages


def gae_lambda_only(rewards, values, mask, gamma, lam):
    rewards, values = rewards * mask, values * mask
    T = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[:, 0])
    for t in reversed(range(T)):
        next_value = values[:, t + 1] if t + 1 < T else 0.0
        last = (rewards[:, t] + gamma * next_value - values[:, t] + lam * last) * mask[:, t]
        advantages[:, t] = last
    return advantages


def k3_detached(logp, ref_logp):
    d = ref_logp - logp.detach()
    return d.exp() - d - 1


def k3_ratio_of_logps(logp, ref_logp):
    r = ref_logp / logp
    return r - r.log() - 1


def rloo_interleaved(rewards, group_size):
    R = rewards.reshape(group_size, -1)
    return (R - (R.sum(0) - R) / (group_size - 1)).reshape(-1)


def reinforce_gradient_summed(logits, actions, rewards, baseline):
    p = torch.softmax(logits, -1)
    score = F.one_hot(actions, len(logits)).double() - p
    return ((rewards[actions] - baseline)[:, None] * score).sum(0)


STUDENT_MISTAKES = [
    ("ppo-clip", "ε fixed at 0.2", ppo_eps_ignored),
    ("ppo-clip", "sum instead of mean", ppo_summed),
    ("ppo-clip", "log-ratio used as the ratio", ppo_log_ratio),
    ("ppo-clip", "no min", ppo_no_min),
    ("grpo-advantages", "constant only when std is exactly 0", grpo_exact_zero),
    ("grpo-advantages", "groups read interleaved", grpo_interleaved),
    ("grpo-advantages", "population std", grpo_population),
    ("bradley-terry", "rejected scores detached", bt_rejected_detached),
    ("bradley-terry", "sum instead of mean", bt_summed),
    ("dpo-loss", "reference sign flipped", dpo_ref_sign),
    ("dpo-loss", "β outside the sigmoid", dpo_beta_outside),
    ("dpo-loss", "β on the chosen term only", dpo_beta_once),
    ("dpo-loss", "loss sign flipped", dpo_positive),
    ("gae", "no mask at all", gae_no_mask),
    ("gae", "next value off by one", gae_next_value_off_by_one),
    ("gae", "λ instead of γλ", gae_lambda_only),
    ("k3-estimator", "detached log-prob", k3_detached),
    ("k3-estimator", "ratio of log-probs", k3_ratio_of_logps),
    ("rloo-baseline", "groups read interleaved", rloo_interleaved),
    ("reinforce-gradient", "sum instead of mean", reinforce_gradient_summed),
]


# Found by attacking the checkers as a student would: each of these once got the generic hint, or passed.


def _score(logits, actions):
    return F.one_hot(actions, logits.shape[-1]).to(logits.dtype) - torch.softmax(logits, -1)


def rg_batch_mean_baseline(logits, actions, rewards, baseline):
    r = rewards[actions]
    return ((r - r.mean())[:, None] * _score(logits, actions)).mean(0)


def rg_plus_baseline(logits, actions, rewards, baseline):
    return ((rewards[actions] + baseline)[:, None] * _score(logits, actions)).mean(0)


def rg_log_softmax_score(logits, actions, rewards, baseline):
    score = F.one_hot(actions, logits.shape[-1]).double() - torch.log_softmax(logits, -1)
    return ((rewards[actions] - baseline)[:, None] * score).mean(0)


def rg_over_k(logits, actions, rewards, baseline):
    return ((rewards[actions] - baseline)[:, None] * _score(logits, actions)).sum(0) / len(logits)


def rloo_others_summed(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - (R.sum(1, keepdim=True) - R)).flatten()


def rloo_floor_division(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - (R.sum(1, keepdim=True) - R) // (group_size - 1)).flatten()


def rloo_sum_over_dim0(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - (R.sum(0, keepdim=True) - R) / (group_size - 1)).flatten()


def _bandit(logits, rewards, n_steps, n_samples, lr, seed, sample_from_start=False, steps=0, summed=False):
    generator = torch.Generator().manual_seed(seed)
    theta = logits.clone()
    for _ in range(n_steps + steps):
        p = torch.softmax(logits if sample_from_start else theta, -1)
        actions = torch.multinomial(p, n_samples, replacement=True, generator=generator)
        r = rewards[actions]
        grad = ((r - (r.sum() - r) / (n_samples - 1))[:, None] * _score(theta, actions))
        theta = theta + lr * (grad.sum(0) if summed else grad.mean(0))
    return theta


def loop_summed(logits, rewards, n_steps, n_samples, lr, seed):
    return _bandit(logits, rewards, n_steps, n_samples, lr, seed, summed=True)


def loop_samples_from_start(logits, rewards, n_steps, n_samples, lr, seed):
    return _bandit(logits, rewards, n_steps, n_samples, lr, seed, sample_from_start=True)


def loop_range_minus_one(logits, rewards, n_steps, n_samples, lr, seed):
    return _bandit(logits, rewards, n_steps, n_samples, lr, seed, steps=-1)


def _ppo_objective(logp, old_logp, advantages, eps, low=None, high=None):
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - eps if low is None else low, 1 + eps if high is None else high)
    return torch.min(ratio * advantages, clipped * advantages)


def ppo_mask_is_padding(logp, old_logp, advantages, mask, eps):
    pad = 1 - mask
    return -(_ppo_objective(logp, old_logp, advantages, eps) * pad).sum() / pad.sum().clamp_min(1)


def ppo_clip_in_log_space(logp, old_logp, advantages, mask, eps):
    log_ratio = logp - old_logp
    objective = torch.min(log_ratio.exp() * advantages, log_ratio.clamp(-eps, eps).exp() * advantages)
    return -(objective * mask).sum() / mask.sum()


def ppo_clip_minus_eps_eps(logp, old_logp, advantages, mask, eps):
    return -(_ppo_objective(logp, old_logp, advantages, eps, -eps, eps) * mask).sum() / mask.sum()


def ppo_advantage_clipped(logp, old_logp, advantages, mask, eps):
    ratio = torch.exp(logp - old_logp)
    objective = torch.min(ratio * advantages, ratio * advantages.clamp(1 - eps, 1 + eps))
    return -(objective * mask).sum() / mask.sum()


def ppo_over_length(logp, old_logp, advantages, mask, eps):
    return -(_ppo_objective(logp, old_logp, advantages, eps) * mask).sum() / mask.shape[1]


def _gae_student(rewards, values, mask, gamma, lam, ts=None, delta_discount=None, carry_delta=False):
    rewards, values = rewards * mask, values * mask
    T = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    last, last_delta = torch.zeros_like(rewards[:, 0]), torch.zeros_like(rewards[:, 0])
    for t in (reversed(range(T)) if ts is None else ts(T)):
        next_value = values[:, t + 1] if t + 1 < T else 0.0
        delta = rewards[:, t] + (gamma if delta_discount is None else delta_discount) * next_value - values[:, t]
        last = (delta + gamma * lam * (last_delta if carry_delta else last)) * mask[:, t]
        last_delta = delta * mask[:, t]
        advantages[:, t] = last
    return advantages


def gae_range_to_one(rewards, values, mask, gamma, lam):
    return _gae_student(rewards, values, mask, gamma, lam, ts=lambda T: range(T - 1, 0, -1))


def gae_mask_is_padding(rewards, values, mask, gamma, lam):
    return _gae_student(rewards, values, 1 - mask, gamma, lam)


def gae_lambda_in_delta(rewards, values, mask, gamma, lam):
    return _gae_student(rewards, values, mask, gamma, lam, delta_discount=gamma * lam)


def gae_next_delta(rewards, values, mask, gamma, lam):
    return _gae_student(rewards, values, mask, gamma, lam, carry_delta=True)


def gae_absolute_powers(rewards, values, mask, gamma, lam):
    deltas = _gae_student(rewards, values, mask, gamma, 0.0)  # λ = 0: the TD errors themselves
    T = rewards.shape[1]
    advantages = torch.zeros_like(rewards)
    for t in range(T):
        advantages[:, t] = sum((gamma * lam) ** k * deltas[:, k] for k in range(t, T)) * mask[:, t]
    return advantages


def gae_whitened(rewards, values, mask, gamma, lam):
    a = _gae_student(rewards, values, mask, gamma, lam)
    real = a[mask.bool()]
    return ((a - real.mean()) / real.std()) * mask


def grpo_std_plus_tiny(rewards, group_size):
    R = rewards.view(-1, group_size)
    return ((R - R.mean(1, keepdim=True)) / (R.std(1, keepdim=True) + 1e-8)).flatten()


def grpo_variance(rewards, group_size):
    R = rewards.view(-1, group_size)
    var = R.var(1, keepdim=True)
    return torch.where(var < 1e-4, 0.0, (R - R.mean(1, keepdim=True)) / var.clamp_min(1e-4)).flatten()


def grpo_threshold_1e3(rewards, group_size):
    R = rewards.view(-1, group_size)
    std = R.std(1, keepdim=True)
    return torch.where(std < 1e-3, 0.0, (R - R.mean(1, keepdim=True)) / std.clamp_min(1e-3)).flatten()


def grpo_leave_one_out(rewards, group_size):
    R = rewards.view(-1, group_size)
    std = R.std(1, keepdim=True)
    others = (R.sum(1, keepdim=True) - R) / (group_size - 1)
    return torch.where(std < 1e-4, 0.0, (R - others) / std.clamp_min(1e-4)).flatten()


def grpo_range_below_threshold(rewards, group_size):
    R = rewards.view(-1, group_size)
    constant = (R.max(1, keepdim=True).values - R.min(1, keepdim=True).values) <= 1e-4
    return torch.where(constant, 0.0, (R - R.mean(1, keepdim=True)) / R.std(1, keepdim=True)).flatten()


def k3_log_softmax_first(logp, ref_logp):
    d = torch.log_softmax(ref_logp, -1) - torch.log_softmax(logp, -1)
    return d.exp() - d - 1


def k3_abs_k1(logp, ref_logp):
    return torch.abs(logp - ref_logp)


def k3_plus_log(logp, ref_logp):
    d = ref_logp - logp
    return d.exp() + d - 1


def k3_negated(logp, ref_logp):
    d = ref_logp - logp
    return d - d.exp() + 1


def k3_ratio_detached(logp, ref_logp):
    d = ref_logp - logp
    return d.exp().detach() - d - 1


def dpo_margin_reversed(pc, pr, rc, rr, beta):
    chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return -F.logsigmoid(rejected - chosen), chosen.detach(), rejected.detach()


def dpo_beta_divides(pc, pr, rc, rr, beta):
    return -F.logsigmoid(((pc - rc) - (pr - rr)) / beta), (beta * (pc - rc)).detach(), (beta * (pr - rr)).detach()


def dpo_sigmoid_no_log(pc, pr, rc, rr, beta):
    chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return -torch.sigmoid(chosen - rejected), chosen.detach(), rejected.detach()


def dpo_beta_on_policy(pc, pr, rc, rr, beta):
    loss = -F.logsigmoid((beta * pc - rc) - (beta * pr - rr))
    return loss, (beta * (pc - rc)).detach(), (beta * (pr - rr)).detach()


def dpo_rewards_in_wrong_order(pc, pr, rc, rr, beta):
    chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return -F.logsigmoid(chosen - rejected), rejected.detach(), chosen.detach()


def dpo_rewards_without_reference(pc, pr, rc, rr, beta):
    chosen, rejected = beta * (pc - rc), beta * (pr - rr)
    return -F.logsigmoid(chosen - rejected), (beta * pc).detach(), (beta * pr).detach()


def bt_bce_of_sigmoid(chosen_scores, rejected_scores):
    p = torch.sigmoid(chosen_scores - rejected_scores)
    return F.binary_cross_entropy(p, torch.ones_like(p))


def bt_each_on_its_own(chosen_scores, rejected_scores):
    return -(F.logsigmoid(chosen_scores) + F.logsigmoid(-rejected_scores)).mean()


def bt_hinge(chosen_scores, rejected_scores):
    return F.relu(1 - chosen_scores + rejected_scores).mean()


def bt_means_first(chosen_scores, rejected_scores):
    return -F.logsigmoid(chosen_scores.mean() - rejected_scores.mean())


STUDENT_MISTAKES += [
    ("reinforce-gradient", "batch mean for the baseline", rg_batch_mean_baseline),
    ("reinforce-gradient", "baseline added", rg_plus_baseline),
    ("reinforce-gradient", "log-probabilities in the score", rg_log_softmax_score),
    ("reinforce-gradient", "divided by the number of actions", rg_over_k),
    ("rloo-baseline", "others' sum not averaged", rloo_others_summed),
    ("rloo-baseline", "floor division", rloo_floor_division),
    ("rloo-baseline", "sum over the wrong dimension", rloo_sum_over_dim0),
    ("reinforce-loop", "sum instead of mean", loop_summed),
    ("reinforce-loop", "samples from the initial policy", loop_samples_from_start),
    ("reinforce-loop", "one step too few", loop_range_minus_one),
    ("ppo-clip", "mask read as 1 = padding", ppo_mask_is_padding),
    ("ppo-clip", "log-ratio clipped at ±ε", ppo_clip_in_log_space),
    ("ppo-clip", "clip range [-ε, ε]", ppo_clip_minus_eps_eps),
    ("ppo-clip", "advantage clipped", ppo_advantage_clipped),
    ("ppo-clip", "divided by the length T", ppo_over_length),
    ("gae", "first token skipped", gae_range_to_one),
    ("gae", "mask read as 1 = padding", gae_mask_is_padding),
    ("gae", "γλ in δ", gae_lambda_in_delta),
    ("gae", "δ carried instead of Â", gae_next_delta),
    ("gae", "discount counted from the first token", gae_absolute_powers),
    ("gae", "advantages normalised", gae_whitened),
    ("grpo-advantages", "a tiny ε added to the std", grpo_std_plus_tiny),
    ("grpo-advantages", "variance instead of std", grpo_variance),
    ("grpo-advantages", "threshold too high", grpo_threshold_1e3),
    ("grpo-advantages", "leave-one-out centring", grpo_leave_one_out),
    ("grpo-advantages", "range as the constant test", grpo_range_below_threshold),
    ("k3-estimator", "log-softmax of log-probs", k3_log_softmax_first),
    ("k3-estimator", "|k1|", k3_abs_k1),
    ("k3-estimator", "log term added", k3_plus_log),
    ("k3-estimator", "sign flipped", k3_negated),
    ("k3-estimator", "ratio detached", k3_ratio_detached),
    ("dpo-loss", "margin the wrong way round", dpo_margin_reversed),
    ("dpo-loss", "β divides", dpo_beta_divides),
    ("dpo-loss", "no log", dpo_sigmoid_no_log),
    ("dpo-loss", "β on the policy log-probs only", dpo_beta_on_policy),
    ("dpo-loss", "rewards swapped", dpo_rewards_in_wrong_order),
    ("dpo-loss", "rewards without the reference", dpo_rewards_without_reference),
    ("bradley-terry", "BCE on probabilities", bt_bce_of_sigmoid),
    ("bradley-terry", "each score on its own", bt_each_on_its_own),
    ("bradley-terry", "hinge loss", bt_hinge),
    ("bradley-terry", "scores averaged first", bt_means_first),
]


@pytest.mark.parametrize("exercise_id, name, wrong", STUDENT_MISTAKES,
                         ids=[f"{e}: {n}" for e, n, _ in STUDENT_MISTAKES])
def test_a_students_wrong_version_gets_the_hint_that_names_it(exercise_id, name, wrong, capsys):
    mistake = next(m for m in exercises.EXERCISES[exercise_id].mistakes if m.name == name)
    assert engine.names_mistake(_refused(exercise_id, wrong, capsys), mistake), "the hint does not name it"


def _in_float32(fn: Callable) -> Callable:
    """fn computed in float32 and cast back to float64: the dtype is right, the digits are not."""
    def wrapped(*args):
        out = fn(*(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args))
        return tuple(o.double() for o in out) if isinstance(out, tuple) else out.double()
    return wrapped


@pytest.mark.parametrize("exercise_id", ["ppo-clip", "gae", "k3-estimator", "bradley-terry", "dpo-loss",
                                         "grpo-advantages"])
def test_a_float32_computation_cast_back_is_refused(exercise_id, capsys):
    out = _refused(exercise_id, _in_float32(exercises.EXERCISES[exercise_id].solution_fn), capsys)
    if exercise_id in ("ppo-clip", "gae", "k3-estimator", "bradley-terry"):
        assert "agree with the reference to about 5 digits" in out and "float32" in out, out


_BANDIT_GENERATORS: dict[str, torch.Generator] = {}


def loop_generator_kept_across_calls(logits, rewards, n_steps, n_samples, lr, seed):
    generator = _BANDIT_GENERATORS.setdefault("g", torch.Generator().manual_seed(seed))  # state leaks between calls
    theta = logits.clone()
    for _ in range(n_steps):
        actions = torch.multinomial(torch.softmax(theta, -1), n_samples, replacement=True, generator=generator)
        r = rewards[actions]
        theta = theta + lr * ((r - (r.sum() - r) / (n_samples - 1))[:, None] * _score(theta, actions)).mean(0)
    return theta


def loop_lr_over_n(logits, rewards, n_steps, n_samples, lr, seed):
    return _bandit(logits, rewards, n_steps, n_samples, lr / n_samples, seed)


def rloo_median(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - R.median(1, keepdim=True).values).flatten()


def ppo_ratio_of_logps(logp, old_logp, advantages, mask, eps):
    ratio = logp / old_logp
    objective = torch.min(ratio * advantages, ratio.clamp(1 - eps, 1 + eps) * advantages)
    return -(objective * mask).sum() / mask.sum()


def gae_wraps_around(rewards, values, mask, gamma, lam):
    rewards, values = rewards * mask, values * mask
    T = rewards.shape[1]
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(rewards[:, 0])
    for t in reversed(range(T)):
        last = (rewards[:, t] + gamma * values[:, (t + 1) % T] - values[:, t] + gamma * lam * last) * mask[:, t]
        advantages[:, t] = last
    return advantages


def gae_output_masked_only(rewards, values, mask, gamma, lam):
    T = rewards.shape[1]
    advantages, last = torch.zeros_like(rewards), torch.zeros_like(rewards[:, 0])
    for t in reversed(range(T)):
        next_value = values[:, t + 1] * mask[:, t + 1] if t + 1 < T else 0.0
        last = rewards[:, t] + gamma * next_value - values[:, t] + gamma * lam * last
        advantages[:, t] = last * mask[:, t]
    return advantages


def grpo_min_max(rewards, group_size):
    R = rewards.view(-1, group_size)
    spread = R.max(1, keepdim=True).values - R.min(1, keepdim=True).values
    return torch.where(spread < 1e-4, 0.0, (R - R.mean(1, keepdim=True)) / spread.clamp_min(1e-4)).flatten()


def k3_difference_of_probs(logp, ref_logp):
    return ref_logp.exp() - logp.exp() - (ref_logp - logp)


def dpo_ipo(pc, pr, rc, rr, beta):
    h = (pc - rc) - (pr - rr)
    return (h - 1 / (2 * beta)) ** 2, (beta * (pc - rc)).detach(), (beta * (pr - rr)).detach()


def dpo_reference_of_chosen_twice(pc, pr, rc, rr, beta):
    chosen, rejected = beta * (pc - rc), beta * (pr - rc)
    return -F.logsigmoid(chosen - rejected), chosen.detach(), rejected.detach()


def bt_margin_clamped(chosen_scores, rejected_scores):
    return -F.logsigmoid((chosen_scores - rejected_scores).clamp(-50, 50)).mean()


def bt_squared_error(chosen_scores, rejected_scores):
    return ((chosen_scores - rejected_scores - 1) ** 2).mean()


REFUSED = [("reinforce-loop", loop_generator_kept_across_calls), ("reinforce-loop", loop_lr_over_n),
           ("rloo-baseline", rloo_median), ("ppo-clip", ppo_ratio_of_logps), ("gae", gae_wraps_around),
           ("gae", gae_output_masked_only), ("grpo-advantages", grpo_min_max),
           ("k3-estimator", k3_difference_of_probs), ("dpo-loss", dpo_ipo), ("dpo-loss", dpo_reference_of_chosen_twice),
           ("bradley-terry", bt_margin_clamped), ("bradley-terry", bt_squared_error)]


@pytest.mark.parametrize("exercise_id, wrong", REFUSED, ids=[f"{e}: {w.__name__}" for e, w in REFUSED])
def test_other_wrong_versions_are_refused(exercise_id, wrong, capsys):
    _BANDIT_GENERATORS.clear()
    _refused(exercise_id, wrong, capsys)


def test_the_issues_three_wrong_versions_are_refused(capsys):
    """ε ignored, a GRPO group zeroed only at std exactly 0, Bradley–Terry with the rejected scores detached."""
    for exercise_id, wrong in (("ppo-clip", ppo_eps_ignored), ("grpo-advantages", grpo_exact_zero),
                               ("bradley-terry", bt_rejected_detached)):
        _refused(exercise_id, wrong, capsys)


def test_every_case_refuses_some_catalogued_mistake_and_sits_above_the_tolerance():
    for exercise in exercises.EXERCISES_LIST:
        expected = engine.expected_outcomes(exercise)
        for i, case in enumerate(engine.cases_of(exercise)):
            wrong = [engine.run(m.fn, case, exercise) for m in exercise.mistakes]
            assert any(engine.difference(w, expected[i]) for w in wrong), (exercise.id, case.name)
            for value in expected[i].values:
                tiny = (value.abs() > 1e-15) & (value.abs() < 100 * engine.ATOL)  # not float noise, yet near ATOL
                assert not tiny.any(), (exercise.id, case.name, value)


def test_the_grpo_cases_straddle_the_librarys_constant_group_threshold():
    assert grpo.CONSTANT_GROUP_STD == inspect.signature(losses.grpo_advantages).parameters["eps"].default
    stds = [case.inputs["rewards"].view(-1, case.inputs["group_size"]).std(1) for case in _cases("grpo-advantages")]
    stds = torch.cat(stds)
    assert ((stds > 0) & (stds < grpo.CONSTANT_GROUP_STD)).any()
    assert ((stds > grpo.CONSTANT_GROUP_STD) & (stds < 10 * grpo.CONSTANT_GROUP_STD)).any()


def test_ppo_cases_clip_at_an_eps_other_than_the_default():
    clipped_elsewhere = False
    for case in _cases("ppo-clip"):
        i = case.inputs
        ratio, adv, eps = torch.exp(i["logp"] - i["old_logp"]), i["advantages"], i["eps"]
        active = ((adv > 0) & (ratio > 1 + eps)) | ((adv < 0) & (ratio < 1 - eps))
        active_at_default = ((adv > 0) & (ratio > 1.2)) | ((adv < 0) & (ratio < 0.8))
        clipped_elsewhere |= bool((i["mask"].bool() & (active != active_at_default)).any())
    assert clipped_elsewhere


# ---------------------------------------------------------------------------------------------------------
# Correct versions pass, and failures are easy to read
# ---------------------------------------------------------------------------------------------------------


def test_renamed_parameters_pass(capsys):
    def k3(a, b):
        return (b - a).exp() - (b - a) - 1

    def gae(r, v, m, g, l):  # noqa: E741 -- a student's names
        return exercises.EXERCISES["gae"].solution_fn(r, v, m, g, l)
    assert exercises.check_function("k3-estimator", k3) is True
    assert exercises.check_function("gae", gae) is True


def ppo_with_masked_mean(logp, old_logp, advantages, mask, eps):
    ratio = (logp - old_logp).exp()
    return -losses.masked_mean(losses.clipped_surrogate(ratio, advantages, eps), mask)


def reinforce_gradient_by_autograd(logits, actions, rewards, baseline):
    theta = logits.clone().requires_grad_(True)
    objective = ((rewards[actions] - baseline) * torch.log_softmax(theta, -1)[actions]).mean()
    return torch.autograd.grad(objective, theta)[0]


def bt_with_softplus(chosen_scores, rejected_scores):
    return F.softplus(rejected_scores - chosen_scores).mean()


def k3_with_expm1(logp, ref_logp):
    d = ref_logp - logp
    return torch.expm1(d) - d


def grpo_vectorised_with_unbiased(rewards, group_size):
    R = rewards.reshape(-1, group_size)
    std = R.std(dim=-1, unbiased=True, keepdim=True)
    A = (R - R.mean(-1, keepdim=True)) / torch.where(std < 1e-4, torch.ones_like(std), std)
    return torch.where(std < 1e-4, torch.zeros_like(A), A).reshape(-1)


def ppo_bound_by_sign(logp, old_logp, advantages, mask, eps):
    """min(r Â, clip(r) Â) written per sign of Â: the upper bound for Â > 0, the lower one for Â < 0."""
    ratio = torch.exp(logp - old_logp)
    bounded = torch.where(advantages > 0, ratio.clamp(max=1 + eps), ratio.clamp(min=1 - eps))
    return -(bounded * advantages * mask).sum() / mask.sum()


def ppo_loop_over_real_tokens(logp, old_logp, advantages, mask, eps, *, eps_high=None):
    terms = []
    for b, t in mask.nonzero().tolist():
        r = torch.exp(logp[b, t] - old_logp[b, t])
        terms.append(torch.min(r * advantages[b, t], r.clamp(1 - eps, 1 + (eps_high or eps)) * advantages[b, t]))
    return -torch.stack(terms).mean()


def loop_seeding_the_global_generator(logits, rewards, n_steps, n_samples, lr, seed):
    torch.manual_seed(seed)  # the default generator, seeded once, draws the same numbers as a seeded Generator
    theta = logits.clone()
    for _ in range(n_steps):
        actions = torch.multinomial(theta.exp(), n_samples, replacement=True)  # multinomial normalises the weights
        r = rewards[actions]
        theta = theta + lr * (n_samples / (n_samples - 1) * (r - r.mean())[:, None] * _score(theta, actions)).mean(0)
    return theta


def rloo_with_numpy(rewards, group_size):
    R = rewards.numpy().reshape(-1, group_size)
    return torch.from_numpy((R - (R.sum(1, keepdims=True) - R) / (group_size - 1)).reshape(-1))


def grpo_with_numpy(rewards, group_size):
    R = rewards.numpy().reshape(-1, group_size)
    std = R.std(1, ddof=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return torch.from_numpy(np.where(std < 1e-4, 0.0, (R - R.mean(1, keepdims=True)) / std).reshape(-1))


def gae_as_a_matrix_product(rewards, values, mask, gamma, lam):
    real = mask.bool()
    r, v = torch.where(real, rewards, 0.0), torch.where(real, values, 0.0)
    deltas = r + gamma * torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], 1) - v
    i = torch.arange(r.shape[1])
    lags = i[None, :] - i[:, None]  # l = k - t
    weights = torch.where(lags >= 0, (gamma * lam) ** lags.clamp_min(0).to(r.dtype), 0.0)
    return deltas @ weights.T * mask


class K3Estimator:
    def __call__(self, logp, ref_logp):
        return torch.expm1(ref_logp - logp) - (ref_logp - logp)


def dpo_with_label_smoothing(pc, pr, rc, rr, beta, label_smoothing=0.0):
    h = beta * ((pc - rc) - (pr - rr))
    loss = -(1 - label_smoothing) * F.logsigmoid(h) - label_smoothing * F.logsigmoid(-h)
    return loss, beta * (pc - rc), beta * (pr - rr)  # rewards left attached: harmless, they are metrics


def bt_with_star_args(*scores):
    return F.binary_cross_entropy_with_logits(scores[0] - scores[1], torch.ones_like(scores[0]))


CORRECT = [("ppo-clip", ppo_with_masked_mean), ("reinforce-gradient", reinforce_gradient_by_autograd),
           ("bradley-terry", bt_with_softplus), ("k3-estimator", k3_with_expm1),
           ("grpo-advantages", grpo_vectorised_with_unbiased), ("ppo-clip", ppo_bound_by_sign),
           ("ppo-clip", ppo_loop_over_real_tokens), ("reinforce-loop", loop_seeding_the_global_generator),
           ("rloo-baseline", rloo_with_numpy), ("grpo-advantages", grpo_with_numpy), ("gae", gae_as_a_matrix_product),
           ("k3-estimator", K3Estimator()), ("dpo-loss", dpo_with_label_smoothing),
           ("bradley-terry", bt_with_star_args),
           ("reinforce-gradient", lambda *args: reinforce_gradient_by_autograd(*args)),
           ("gae", functools.partial(exercises.EXERCISES["gae"].solution_fn))]


@pytest.mark.parametrize("exercise_id, fn", CORRECT, ids=[f"{e}: {getattr(f, '__name__', type(f).__name__)}"
                                                           for e, f in CORRECT])
def test_correct_rewrites_pass(exercise_id, fn, capsys):
    with torch.random.fork_rng():  # one of them seeds the global generator
        assert exercises.check_function(exercise_id, fn) is True, capsys.readouterr().out


def test_trls_grpo_advantage_is_accepted_with_a_note_on_how_it_differs(capsys):
    def trl(rewards, group_size):
        grouped = rewards.view(-1, group_size)
        mean, std = grouped.mean(dim=1), grouped.std(dim=1)
        mean = mean.repeat_interleave(group_size)
        std = std.repeat_interleave(group_size)
        return (rewards - mean) / (std + 1e-4)
    assert exercises.check_function("grpo-advantages", trl) is True
    out = capsys.readouterr().out
    assert "passed 7 cases as TRL's form (R - mean) / (std + 1e-4)" in out and "exactly 0" in out


def test_an_error_shows_the_line_of_the_students_code(capsys):
    def gae(rewards, values, mask, gamma, lam):
        advantages = torch.zeros_like(rewards)
        return advantages + rewards.nope  # the failing line
    line = gae.__code__.co_firstlineno + 2
    out = _refused("gae", gae, capsys)
    assert "failed: your function raised an error" in out and "AttributeError" in out
    assert f"at: line {line} of {__file__}, in gae: return advantages + rewards.nope" in out


def test_an_error_inside_torch_points_at_the_students_call(capsys):
    def k3(logp, ref_logp):
        return torch.cat([logp, ref_logp], dim=5)
    line = k3.__code__.co_firstlineno + 1
    assert f"at: line {line} of {__file__}, in k3: return torch.cat" in _refused("k3-estimator", k3, capsys)


def test_an_in_place_change_of_an_input_is_reported_even_when_the_values_are_right(capsys):
    def gae(rewards, values, mask, gamma, lam):
        rewards *= mask  # overwrites the caller's rewards
        values.mul_(mask)
        return exercises.EXERCISES["gae"].solution_fn(rewards, values, mask, gamma, lam)
    out = _refused("gae", gae, capsys)
    assert "changed its input `rewards`, `values` in place" in out and "x = x * mask" in out


def test_a_missing_gradient_is_explained(capsys):
    def bt(chosen_scores, rejected_scores):
        return torch.tensor(-F.logsigmoid(chosen_scores - rejected_scores).mean().item(), dtype=torch.float64)
    out = _refused("bradley-terry", bt, capsys)
    assert "none (no gradient reaches it)" in out and "no gradient reaches chosen_scores" in out


def rloo_sum_without_keepdim(rewards, group_size):
    R = rewards.view(-1, group_size)
    return (R - (R.sum(1) - R) / (group_size - 1)).reshape(-1)


def k3_through_numpy(logp, ref_logp):
    d = torch.from_numpy(ref_logp.numpy() - logp.numpy())
    return d.exp() - d - 1


def bt_margin_in_place(chosen_scores, rejected_scores):
    chosen_scores -= rejected_scores
    return -F.logsigmoid(chosen_scores).mean()


def k3_trailing_comma(logp, ref_logp):
    d = ref_logp - logp
    return d.exp() - d - 1,


@pytest.mark.parametrize("exercise_id, wrong, words", [
    ("rloo-baseline", rloo_sum_without_keepdim, "keepdim=True drops a dimension"),
    ("k3-estimator", k3_through_numpy, "numpy leaves autograd"),
    ("bradley-terry", bt_margin_in_place, "an input is changed in place"),
    ("k3-estimator", k3_trailing_comma, "a stray trailing comma?"),
], ids=["broadcast error", "numpy on a grad input", "in-place on a grad input", "trailing comma"])
def test_common_errors_and_forms_are_explained(exercise_id, wrong, words, capsys):
    assert words in _refused(exercise_id, wrong, capsys)


def grpo_with_own_guard(delta: float, zero_constant_groups: bool = True) -> Callable:
    """GRPO's advantage (R - mean) / (std + δ), a near-constant group zeroed or not."""
    def advantages(rewards, group_size):
        R = rewards.view(-1, group_size)
        std = R.std(1, keepdim=True)
        A = (R - R.mean(1, keepdim=True)) / (std + delta)
        return (torch.where(std < 1e-4, torch.zeros_like(R), A) if zero_constant_groups else A).reshape(-1)
    return advantages


@pytest.mark.parametrize("delta", [1e-8, 1e-7, 1e-6])
def test_a_grpo_advantage_with_its_own_small_epsilon_guard_passes(delta, capsys):
    assert exercises.check_function("grpo-advantages", grpo_with_own_guard(delta)) is True
    assert f"Your ε guard adds at most {delta:.2g} to the std" in capsys.readouterr().out


@pytest.mark.parametrize("delta, zero, words", [
    (1e-5, True, "your ε guard adds δ ≈ 1e-05 to the std, the reference's none"),
    (1e-3, True, "on a group of std 0.00015 that shrinks Â by 87%"),
    (1e-8, False, "a group whose std is below 0.0001 gets advantages up to 1.5 from your guard"),
])
def test_an_epsilon_guard_that_changes_the_advantages_is_refused_saying_what_differs(delta, zero, words, capsys):
    assert words in _refused("grpo-advantages", grpo_with_own_guard(delta, zero), capsys)


# CISPO (notebook 09a): wrong versions students write, each refused with the hint of its catalogued mistake, and
# correct rewrites that pass. Written apart from the catalogue in minirlhf/course/exercises/toolbox.py.
def _cispo_weight(logp, old_logp, lo, hi):
    return torch.exp(logp - old_logp).clamp(1 - lo, 1 + hi).detach()


CISPO_WRONG = [
    ("sign flipped", lambda lp, old, a, lo, hi: -(_cispo_weight(lp, old, lo, hi) * a * lp)),
    ("weight not detached", lambda lp, old, a, lo, hi: torch.exp(lp - old).clamp(1 - lo, 1 + hi) * a * lp),
    ("weight not capped", lambda lp, old, a, lo, hi: (lp - old).exp().detach() * a * lp),
    ("the ratio in place of log p_θ",
     lambda lp, old, a, lo, hi: _cispo_weight(lp, old, lo, hi) * a * torch.exp(lp - old)),
    ("log-ratio clipped", lambda lp, old, a, lo, hi: (lp - old).clamp(-lo, hi).exp().detach() * a * lp),
    ("tokens outside the range dropped",
     lambda lp, old, a, lo, hi: torch.where((torch.exp(lp - old) - 1).abs() <= torch.where(
         lp > old, torch.full_like(lp, hi), torch.full_like(lp, lo)), torch.exp(lp - old), 0.0).detach() * a * lp),
    ("ε_low on both sides", lambda lp, old, a, lo, hi: _cispo_weight(lp, old, lo, lo) * a * lp),
    ("averaged over the answer",
     lambda lp, old, a, lo, hi: (_cispo_weight(lp, old, lo, hi) * a * lp).mean(dim=1, keepdim=True).expand_as(lp)),
    ("ratio upside down", lambda lp, old, a, lo, hi: torch.exp(old - lp).clamp(1 - lo, 1 + hi).detach() * a * lp),
]


@pytest.mark.parametrize("name, wrong", CISPO_WRONG, ids=[n for n, _ in CISPO_WRONG])
def test_a_students_wrong_cispo_gets_the_hint_that_names_it(name, wrong, capsys):
    mistake = next(m for m in exercises.EXERCISES["cispo"].mistakes if m.name == name)
    out = _refused("cispo", wrong, capsys)
    assert engine.names_mistake(out, mistake), out


def _cispo_no_grad_block(logp, old_logp, advantages, eps_low, eps_high):
    with torch.no_grad():
        weight = torch.clip((logp - old_logp).exp(), min=1 - eps_low, max=1 + eps_high)
    return logp * advantages * weight


def _cispo_by_min_max(logp, old_logp, advantages, eps_low, eps_high):
    ratio = torch.exp(logp.detach() - old_logp)
    high, low = torch.full_like(ratio, 1 + eps_high), torch.full_like(ratio, 1 - eps_low)
    weight = torch.maximum(torch.minimum(ratio, high), low)
    return advantages * weight * logp


@pytest.mark.parametrize("fn", [_cispo_no_grad_block, _cispo_by_min_max])
def test_a_correct_cispo_written_otherwise_passes(fn, capsys):
    assert exercises.check_function("cispo", fn) is True, capsys.readouterr().out


# The sampler's sequence mask on PPO's objective (notebook 09b): wrong versions students write, refused with the hint
# of their catalogued mistake, and correct rewrites that pass. Written apart from the catalogue in
# minirlhf/course/exercises/toolbox.py.
def _clip_objective(lp, old, a, eps):
    r = (lp - old).exp()
    return torch.min(r * a[:, None], r.clamp(1 - eps, 1 + eps) * a[:, None])


def _answer_rho(old, mu, mask):
    return ((old - mu) * mask).sum(dim=1, keepdim=True).exp().detach()  # (B, 1) Π_t ρ_t over the real tokens


def _masked_answers(rho, cap, mask):
    return rho * (rho <= cap) * mask


SEQUENCE_MASK_WRONG = [
    ("masked per token", lambda lp, old, mu, a, m, eps, c: ((old - mu).exp() * ((old - mu).exp() <= c) * m).detach()
     * _clip_objective(lp, old, a, eps)),
    ("truncated, not masked",
     lambda lp, old, mu, a, m, eps, c: _answer_rho(old, mu, m).clamp(max=c) * m * _clip_objective(lp, old, a, eps)),
    ("ratio upside down", lambda lp, old, mu, a, m, eps, c: _masked_answers(_answer_rho(mu, old, m), c, m)
     * _clip_objective(lp, old, a, eps)),
    ("the cap on p_θ / μ", lambda lp, old, mu, a, m, eps, c: _masked_answers(_answer_rho(lp, mu, m), c, m)
     * _clip_objective(lp, old, a, eps)),
    ("the sampler in the clip", lambda lp, old, mu, a, m, eps, c: _clip_objective(lp, mu, a, eps) * m),
    ("no correction", lambda lp, old, mu, a, m, eps, c: _clip_objective(lp, old, a, eps) * m),
    ("no clip", lambda lp, old, mu, a, m, eps, c: _masked_answers(_answer_rho(old, mu, m), c, m)
     * (lp - old).exp() * a[:, None]),
    ("weight not detached",
     lambda lp, old, mu, a, m, eps, c: ((old - mu) * m).sum(1, keepdim=True).exp() * (_answer_rho(old, mu, m) <= c)
     * m * _clip_objective(lp, old, a, eps)),
    ("padding in the product",
     lambda lp, old, mu, a, m, eps, c: _masked_answers((old - mu).sum(1, keepdim=True).exp().detach(), c, m)
     * _clip_objective(lp, old, a, eps)),
]


@pytest.mark.parametrize("name, wrong", SEQUENCE_MASK_WRONG, ids=[n for n, _ in SEQUENCE_MASK_WRONG])
def test_a_students_wrong_sequence_mask_gets_the_hint_that_names_it(name, wrong, capsys):
    mistake = next(m for m in exercises.EXERCISES["sequence-mask"].mistakes if m.name == name)
    out = _refused("sequence-mask", wrong, capsys)
    assert engine.names_mistake(out, mistake), out


def _sequence_mask_by_log_rho(logp, old_logp, behaviour_logp, advantages, mask, eps, cap):
    with torch.no_grad():
        log_rho = (old_logp - behaviour_logp).masked_fill(mask == 0, 0.0).sum(-1, keepdim=True)  # log Π_t ρ_t
        weight = log_rho.exp() * (log_rho <= math.log(cap))
    ratio = torch.exp(logp - old_logp)
    surrogate = torch.where(advantages[:, None] >= 0, torch.clamp(ratio, max=1 + eps), torch.clamp(ratio, min=1 - eps))
    return weight * surrogate * advantages[:, None] * mask


def _sequence_mask_old_detached(logp, old_logp, behaviour_logp, advantages, mask, eps, cap):
    old_logp, behaviour_logp = old_logp.detach(), behaviour_logp.detach()  # p_θold and μ are fixed in the step
    return _masked_answers(_answer_rho(old_logp, behaviour_logp, mask), cap, mask) * _clip_objective(
        logp, old_logp, advantages, eps)


@pytest.mark.parametrize("fn", [_sequence_mask_by_log_rho, _sequence_mask_old_detached,
                                exercises.EXERCISES["sequence-mask"].solution_fn])
def test_a_correct_sequence_mask_written_otherwise_passes(fn, capsys):
    assert exercises.check_function("sequence-mask", fn) is True, capsys.readouterr().out


# The policy-gradient loss of answers that hold a tool's tokens (notebook 09a): wrong versions students write, refused
# with the hint of their catalogued mistake, and correct rewrites that pass. Written apart from the catalogue in
# minirlhf/course/exercises/toolbox.py.
def _real(lp, n):
    return torch.arange(lp.shape[1]).expand_as(lp) < n.unsqueeze(1)  # (B, T) the first n tokens of each row


def _token_mean(lp, a, m):
    return -(lp * a.unsqueeze(1) * m).sum() / m.sum()  # padding's logp is finite here, so a product masks it


TOOL_USE_WRONG = [
    ("the tool's tokens in the loss", lambda lp, a, n, tool: _token_mean(lp, a, _real(lp, n))),
    ("the tool's tokens counted in N", lambda lp, a, n, tool: -(lp * a.unsqueeze(1) * (_real(lp, n) & ~tool)).sum()
     / _real(lp, n).sum()),
    ("the tool's tokens counted in N", lambda lp, a, n, tool: _token_mean(lp.masked_fill(tool, 0.0), a, _real(lp, n))),
    ("EOS dropped", lambda lp, a, n, tool: _token_mean(lp, a, _real(lp, n - 1) & ~tool)),
    ("one padding token too many", lambda lp, a, n, tool: _token_mean(lp, a, _real(lp, n + 1) & ~tool)),
    ("only the tool's tokens", lambda lp, a, n, tool: _token_mean(lp, a, _real(lp, n) & tool)),
    ("a mean per answer first", lambda lp, a, n, tool: -((lp * a.unsqueeze(1) * (_real(lp, n) & ~tool)).sum(1)
                                                        / (_real(lp, n) & ~tool).sum(1)).mean()),
    ("sign flipped", lambda lp, a, n, tool: -_token_mean(lp, a, _real(lp, n) & ~tool)),
    ("the padding kept", lambda lp, a, n, tool: _token_mean(lp, a, ~tool)),  # the mask read off tool_mask alone
    ("the tool's mask a column early", lambda lp, a, n, tool: _token_mean(
        lp, a, _real(lp, n) & ~torch.nn.functional.pad(tool[:, 1:], (0, 1)))),  # the logits[:, :-1] habit
    ("the tool's mask a column late", lambda lp, a, n, tool: _token_mean(
        lp, a, _real(lp, n) & ~torch.nn.functional.pad(tool[:, :-1], (1, 0)))),
]


@pytest.mark.parametrize("name, wrong", TOOL_USE_WRONG, ids=[f"{n} {i}" for i, (n, _) in enumerate(TOOL_USE_WRONG)])
def test_a_students_wrong_tool_use_loss_gets_the_hint_that_names_it(name, wrong, capsys):
    mistake = next(m for m in exercises.EXERCISES["tool-use-loss"].mistakes if m.name == name)
    out = _refused("tool-use-loss", wrong, capsys)
    assert engine.names_mistake(out, mistake), out


def _tool_use_by_indexing(logp, advantages, lengths, tool_mask):
    rows, cols = torch.meshgrid(torch.arange(logp.shape[0]), torch.arange(logp.shape[1]), indexing="ij")
    mine = (cols < lengths[:, None]) & ~tool_mask  # the policy's tokens, picked by boolean indexing
    return -(advantages[rows[mine]] * logp[mine]).mean()


def _tool_use_from_a_rollout_mask(logp, advantages, lengths, tool_mask):
    attention = (torch.arange(logp.shape[1])[None, :] < lengths[:, None]).long()  # what Rollout.attention_mask holds
    response_mask = attention - tool_mask.long()  # Rollout.tool_mask = attention_mask - response_mask, read backwards
    return losses.reinforce_loss(logp, advantages, response_mask, aggregation="token-mean")


def _tool_use_by_xor(logp, advantages, lengths, tool_mask):
    mine = _real(logp, lengths) ^ tool_mask  # the tool's tokens lie inside the answer, so XOR removes them
    return -(advantages[:, None] * logp)[mine].sum() / mine.sum()


def _tool_use_by_a_loop(logp, advantages, lengths, tool_mask):
    total, count = logp.new_zeros(()), 0
    for row in range(logp.shape[0]):
        for t in range(int(lengths[row])):
            if not tool_mask[row, t]:
                total, count = total + advantages[row] * logp[row, t], count + 1
    return -total / count


@pytest.mark.parametrize("fn", [_tool_use_by_indexing, _tool_use_from_a_rollout_mask, _tool_use_by_xor,
                                _tool_use_by_a_loop])
def test_a_correct_tool_use_loss_written_otherwise_passes(fn, capsys):
    assert exercises.check_function("tool-use-loss", fn) is True, capsys.readouterr().out
