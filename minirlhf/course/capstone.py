"""The capstone: the student writes GRPO's whole training step on the tiny GPT-2, the course checks it against the
library's pieces on the same seed, then trains with it and measures held-out accuracy.

    from minirlhf.course import capstone
    capstone.check_step(my_step)              # True when my_step samples, scores, updates as the reference does
    history = capstone.train(my_step, steps)  # held-out accuracy before and after `steps` of my_step

A step is `my_step(model, tokenizer, optimizer, prompts, generator, group_size, eps)`: sample `group_size`
completions per prompt (minirlhf.sampling.sample, with `generator`), reward them (the arithmetic task's exact-match
reward), compute GRPO's group advantages, the clipped loss (β = 0: no reference model), and take one optimizer step
with the gradient norm clipped at 1. It returns a StepOutput. The reference (`reference_step`) is the same step
written with minirlhf.losses. `check_step` runs both from the same seed and the same weights, two steps on one
optimizer, the second on the first one's batch (sample() replays it: the ratio leaves 1 and the clip acts; with the
EOS of the rewarded answers dropped, so that a group's answers differ in length), and names the first thing that
differs: an error (with the line of the step that raised), the sampled batch changed in place, the samples (where
they first differ), the rewards, the advantages, the loss, the update, or a returned loss that keeps its graph, with
the kind of mistake it shows where it can tell (a flipped sign, max for min, the clip on the advantage, a mean over
padding, a dropped mask, a per-answer mean, a missing optimizer.zero_grad(), ...).

EQUIVALENT_MUTANTS lists the single-edit versions of the worked step (mutants.mutants(solutions.my_step)) that are
right, and why; check_step refuses every other one with its kind named (scripts/exercise_mutants.py --capstone).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import inspect
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

import minirlhf.course.exercises.mutants as mutants
from minirlhf import losses, sampling
from minirlhf.course.step_output import StepOutput  # what a step returns (its own module: solutions.py uses it)
from minirlhf.errors import env_flag
from minirlhf.logprobs import response_logprobs
from minirlhf.models import disable_dropout, load_model
from minirlhf.sampling import Rollout, sample
from minirlhf.tasks import arithmetic

MAX_GRAD_NORM = 1.0
LOSS_RTOL = 1e-4  # float32: the loss is a mean of a few hundred terms (a known mistake's loss matches to this)
# how far a step's advantages, and with them its loss, may be from the reference's: an ε guard of the step's own,
# (R - mean) / (std + ε) with TRL's ε = 1e-4, moves them by ε / std < 3e-4 (0/1 rewards in a group of 8: std ≥ 0.35);
# a mistake moves them by far more (the biased std by 7%)
GUARD_RTOL = 1e-3
# below this size a loss is float32's rounding of a sum that cancels (at r = 1 the token mean of group-centred Â is
# about 1e-7): two such values name no mistake, so the first step leaves the verdict to the weight update
LOSS_NOISE = 1e-6
UPDATE_RTOL = 1e-3  # relative size of the difference of the two weight updates
# check_step compares updates under plain SGD, so the update is the (clipped) gradient times CHECK_LR; a rate this
# large moves the policy enough that, on the batch's second epoch, many ratios leave [1 - ε, 1 + ε] and the clip acts
CHECK_LR = 0.1
CHECK_EPOCHS = 2  # steps run on one optimizer, the second on the first one's batch (sample() replays it)
SECOND_STEP = "the second step (the same batch again, the rewarded answers without their EOS: the ratio leaves 1)"
# the edits of the worked step (mutants.Mutant.edit) that leave it right: the same samples, outputs and updates on
# every batch, not only on the check's; why each is right
EQUIVALENT_MUTANTS = {
    "torch.where(mask, logp - rollout.logprobs, torch.zeros_like(logp)) -> logp - rollout.logprobs":
        "response_logprobs and the sampling log-probs are both zero off the response, so the ratio is 1 there with "
        "or without the mask (the mask guards against a log-prob that is not), and the objective is masked after",
}


StepFn = Callable[..., StepOutput]


def reference_step(model: nn.Module, tokenizer, optimizer: torch.optim.Optimizer, prompts: list[str],
                   generator: torch.Generator, group_size: int = 8, eps: float = 0.2) -> StepOutput:
    """One GRPO step (β = 0, one epoch, token-mean) written with the library's functions."""
    model.eval()
    rollout = sample(model, tokenizer, prompts, group_size=group_size, max_new_tokens=arithmetic.MAX_NEW_TOKENS,
                     generator=generator)
    rewards = torch.tensor(arithmetic.correctness_reward(rollout.prompts, rollout.completions))
    advantages = losses.grpo_advantages(rewards, group_size).to(rollout.logprobs.device)
    model.train()
    logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                             prompt_length=rollout.prompt_length)
    loss, _ = losses.grpo_loss(logp, rollout.logprobs, None, advantages, rollout.response_mask, eps=eps, beta=0.0,
                               aggregation="token-mean")
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), MAX_GRAD_NORM)
    optimizer.step()
    model.eval()
    return StepOutput(rollout.completions, rewards, advantages.cpu(), loss.detach())


def _weights(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@dataclass
class _Replay:
    batches: list[Rollout] = field(default_factory=list)  # the batch each step trained on (its first sample())
    copies: list[Rollout] = field(default_factory=list)  # each batch as it was handed to the step
    epoch: int = 0  # the step running now
    calls: int = 0  # its calls of sample() so far


def _uneven(rollout: Rollout, pad_id: int) -> Rollout:
    """The batch with the EOS of every rewarded answer dropped, as if each were cut at max_new_tokens one token
    before it (its text, so its reward, unchanged). The answers of a group then differ in length, so a loss that
    counts positions off the response differs from the reference's, as it does in training; on the batch as sampled,
    where a group's answers often share one length, the counted positions' terms Σ_i Â_i (P + N - |y_i|) cancel."""
    rewarded = torch.tensor(arithmetic.correctness_reward(rollout.prompts, rollout.completions)) > 0  # (B,)
    cut = rewarded & rollout.ended_with_eos  # (B,)
    last = rollout.response_mask.shape[1] - 1 - rollout.response_mask.flip(1).argmax(1)  # (B,) each EOS's column
    drop = torch.zeros_like(rollout.response_mask, dtype=torch.bool)  # (B, P + N)
    drop[cut, last[cut]] = True

    def without(x: torch.Tensor | None, value: float) -> torch.Tensor | None:
        return None if x is None else torch.where(drop, torch.full_like(x, value), x)
    return Rollout(rollout.prompts, rollout.completions, without(rollout.input_ids, pad_id),
                   without(rollout.attention_mask, 0), without(rollout.response_mask, 0),
                   without(rollout.logprobs, 0.0), rollout.prompt_length, rollout.ended_with_eos & ~cut,
                   without(rollout.sampler_logprobs, 0.0))


@contextlib.contextmanager
def _replayed_batch(step: StepFn, pad_id: int) -> Iterator[_Replay]:
    """While open, a later step's first call of sample() returns the batch the first step sampled (any other call
    samples as usual), in the step's module (or notebook) and in minirlhf.sampling: the second step trains on the
    first one's batch, with the log-probs it was sampled with as old_logp, a second epoch as PPO and GRPO run it;
    with the EOS of its rewarded answers dropped (_uneven), so that a group's answers differ in length."""
    state = _Replay()
    original = sampling.sample

    def replay(*args, **kwargs) -> Rollout:
        state.calls += 1
        if state.epoch > 0 and state.calls == 1 and state.batches:
            rollout = _uneven(state.copies[0], pad_id)
        else:
            rollout = original(*args, **kwargs)
        if state.calls == 1 and len(state.batches) == state.epoch:
            state.batches.append(rollout)
            state.copies.append(copy.deepcopy(rollout))
        return rollout
    fn = inspect.unwrap(step.func if isinstance(step, functools.partial) else step)  # decorated: the inner globals
    namespaces = [vars(sampling), globals(), getattr(fn, "__globals__", {})]
    patched = [(ns, name) for ns in {id(n): n for n in namespaces}.values() for name, value in list(ns.items())
               if value is original]
    for ns, name in patched:
        ns[name] = replay
    try:
        yield state
    finally:
        for ns, name in patched:
            ns[name] = original


@dataclass
class _Run:
    outputs: list = field(default_factory=list)  # what each step returned
    updates: list[torch.Tensor] = field(default_factory=list)  # the weight update each step made
    rollouts: list[Rollout] = field(default_factory=list)  # the batch each step trained on
    changed: list[list[str]] = field(default_factory=list)  # per step, the batch's tensors it changed in place
    gradient_left: list[bool] = field(default_factory=list)  # per step, whether .grad holds a non-zero gradient
    error: BaseException | None = None  # what a step raised, and where
    where: str = ""


def _run(step: StepFn, model: nn.Module, tokenizer, prompts: list[str], seed: int) -> _Run:
    """CHECK_EPOCHS steps from a seed, on one SGD optimizer and one batch; a step's error is caught and kept."""
    from minirlhf.course.exercises.engine import error_location  # not at the top: the course's checkers load last

    run = _Run()
    optimizer = torch.optim.SGD(model.parameters(), lr=CHECK_LR)
    torch.manual_seed(seed)  # the same global random state in both runs
    generator = torch.Generator().manual_seed(seed)
    with _replayed_batch(step, tokenizer.pad_token_id) as replay:
        for epoch in range(CHECK_EPOCHS):
            replay.epoch, replay.calls = epoch, 0
            before = _weights(model)
            try:
                out = step(model, tokenizer, optimizer, prompts, generator, 8, 0.2)
            except NotImplementedError:
                raise
            except Exception as error:  # noqa: BLE001 -- the student's error is reported, with its line
                run.error, run.where = error, error_location(error, step)
                break
            run.outputs.append(out)
            run.updates.append(_weights(model) - before)
            run.gradient_left.append(any(p.grad is not None and bool(p.grad.any()) for p in model.parameters()))
            run.changed.append(_changed(replay.batches[epoch], replay.copies[epoch]) if epoch < len(replay.batches)
                               else [])
            if not isinstance(out, StepOutput):
                break
    run.rollouts = replay.batches
    return run


def _changed(rollout: Rollout, copy_: Rollout) -> list[str]:
    """The names of the batch's tensors that differ from the copy taken when it was handed out."""
    return [f"rollout.{name}" for name, value in vars(rollout).items()
            if isinstance(value, torch.Tensor) and not torch.equal(value, getattr(copy_, name))]


def _tensor(value, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"StepOutput.{name} is a {type(value).__name__}, expected a torch.Tensor")
    return value.detach().cpu().double()


def _first_difference(expected: list[str], actual: list[str], tokenizer, group_size: int) -> list[str]:
    """Where two lists of completions first differ: the answer, and the token within it."""
    if len(expected) != len(actual):
        return [f"  expected {len(expected)} completions (prompts × group_size), got {len(actual)}"]
    i = next(i for i, (e, a) in enumerate(zip(expected, actual)) if e != a)
    e_ids, a_ids = (tokenizer(text, add_special_tokens=False)["input_ids"] for text in (expected[i], actual[i]))
    t = next((t for t, (x, y) in enumerate(zip(e_ids, a_ids)) if x != y), min(len(e_ids), len(a_ids)))
    token = [repr(tokenizer.decode(ids[t:t + 1])) if t < len(ids) else "(the end)" for ids in (e_ids, a_ids)]
    return [f"  first difference: answer {i} (prompt {i // group_size}, sample {i % group_size}), token {t}: "
            f"expected {token[0]}, yours {token[1]}",
            f"  expected {expected[i]!r}", f"  yours    {actual[i]!r}"]


def _advantage_kind(advantages: torch.Tensor, rewards: torch.Tensor, expected: torch.Tensor, group_size: int) -> str:
    """The kind of mistake the advantages show, as a label (with what it means where the kind alone does not say)
    for the message, or ""."""
    R = rewards.double().view(-1, group_size)
    mean, std = R.mean(1, keepdim=True), R.std(1, keepdim=True)

    def normalised(centred, std, floor=lambda s: s.clamp_min(1e-4)):
        return torch.where(std < 1e-4, torch.zeros_like(R), centred / floor(std)).reshape(-1)
    candidates = [
        (mutants.SIGN, "", -expected.double()),
        (mutants.SIGN, "R + mean where the baseline is subtracted, R - mean: ", normalised(R + mean, std)),
        (mutants.SIGN, "every advantage is 0, as if the guard for a constant group (std < 1e-4) fired on every group: "
                       "is the std negated, or the comparison turned round? ", torch.zeros_like(advantages)),
        (mutants.BIASED_STD, "", normalised(R - mean, R.std(1, keepdim=True, correction=0))),
        (mutants.AXIS, "", normalised(R - R.mean(0, keepdim=True), R.std(0, keepdim=True))),
        (mutants.AXIS, "", normalised(R - mean, R.std(0, keepdim=True))),
        (mutants.AXIS, "", normalised(R - R.mean(0, keepdim=True), std)),
        (mutants.AXIS, "normalised over the whole batch, not within each group of G: ",
         ((R - R.mean()) / R.std()).reshape(-1)),
        (mutants.AXIS, "the group's mean, but the std of the whole batch: ", ((R - mean) / R.std()).reshape(-1)),
        ("no baseline", "these are the rewards themselves: subtract the group mean and divide by the group std: ",
         R.reshape(-1)),
        (mutants.MIN_MAX, "the std's floor is a ceiling (clamp_max for clamp_min), so every group with a spread is "
                          "divided by 1e-4: ", normalised(R - mean, std, lambda s: s.clamp_max(1e-4))),
    ]
    i = int(expected.abs().argmax())  # the ε of a guard std + ε, read off the largest advantage
    if advantages.shape == expected.shape and advantages[i] != 0 and expected[i] / advantages[i] > 1:
        eps = float(std.expand_as(R).reshape(-1)[i] * (expected[i] / advantages[i] - 1))
        candidates.append(("ε guard", f"your std has an ε added, (R - mean) / (std + {eps:.2g}), more than the check "
                                      f"allows (TRL's 1e-4): guard as the reference does, torch.where(std < 1e-4, 0, "
                                      f"(R - mean) / std.clamp_min(1e-4)): ", normalised(R - mean, std + eps)))
    nan = advantages.isnan()
    if nan.any() and advantages.shape == expected.shape and torch.allclose(
            advantages.nan_to_num(0.0), expected.double(), rtol=1e-5, atol=1e-6):
        return ("(no guard for a constant group) a group whose rewards are all equal has std 0, so (R - mean) / std "
                "is 0/0 = nan there: give such a group advantage 0, torch.where(std < 1e-4, 0, (R - mean) / "
                "std.clamp_min(1e-4)): ")
    return next((f"({kind}) {words}" for kind, words, value in candidates if value.shape == advantages.shape and
                 torch.allclose(advantages, value, rtol=1e-5, atol=1e-6)), "")


def _loss_kind(loss: torch.Tensor, model: nn.Module, rollout: Rollout, advantages: torch.Tensor, rewards: torch.Tensor,
               eps: float) -> str:
    """The kind of mistake a step's loss shows, read from the policy the step started from, as a label (with where
    the mistake is, when the kind alone does not say), or ""."""
    with torch.no_grad():
        logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                                 prompt_length=rollout.prompt_length).double()
    keep = rollout.response_mask.bool()
    old, A = rollout.logprobs.double(), advantages.double()[:, None]

    def ratio_of(log_ratio):  # 1 off the response
        return torch.exp(torch.where(keep, log_ratio, torch.zeros_like(log_ratio)))
    ratio = ratio_of(logp - old)
    clipped = torch.clamp(ratio, 1 - eps, 1 + eps)

    def token_mean(x):
        return torch.where(keep, x, torch.zeros_like(x)).sum() / keep.sum()

    def surrogate_loss(r, A=A):
        return -token_mean(torch.minimum(r * A, torch.clamp(r, 1 - eps, 1 + eps) * A))
    objective = torch.minimum(ratio * A, clipped * A)
    in_ratio = "in the ratio, r = exp(logp - old_logp), the new log-prob minus the sampling one: "
    candidates = [
        (mutants.SIGN, "", token_mean(objective)),
        (mutants.SIGN, in_ratio, surrogate_loss(ratio_of(old - logp))),
        (mutants.SIGN, in_ratio, surrogate_loss(ratio_of(logp + old))),
        (mutants.SIGN, in_ratio, surrogate_loss(ratio_of(-logp - old))),
        (mutants.SIGN, "the ratio is negated: ", surrogate_loss(-ratio)),
        (mutants.MIN_MAX, "", -token_mean(torch.maximum(ratio * A, clipped * A))),
        (mutants.CLIP, "", -token_mean(torch.minimum(ratio * A, ratio * torch.clamp(A, 1 - eps, 1 + eps)))),
        (mutants.CLIP, "", -token_mean(torch.minimum(ratio * A, torch.clamp(ratio * A, 1 - eps, 1 + eps)))),
        ("no clipping", "", -token_mean(ratio * A)),
        ("old_logp recomputed", "the ratio is 1 on every token, as if old_logp were the current log-probs (detached): "
                                "use rollout.logprobs, the log-probs the answers were sampled with: ", -token_mean(A)),
        (mutants.PADDING, "", -torch.where(keep, objective, torch.zeros_like(objective)).sum() / keep.numel()),
        (mutants.AXIS, "", -(torch.where(keep, objective, torch.zeros_like(objective)).sum(-1) / keep.sum(-1)).mean()),
        (mutants.MASK, "", -objective.mean()),
        (mutants.MASK, "the sum counts every position, the prompt's and the padding's (each adds its Â, with r = 1 "
                       "there), not only the response's: ", -objective.sum() / keep.sum()),
        ("reward for advantage", "the loss weighs the tokens by the reward R, not by the advantage Â: ",
         surrogate_loss(ratio, rewards.double().to(A.device)[:, None])),
        ("count of answers", "the masked sum is divided by the number of answers, not by the number of real response "
                             "tokens (mask.sum()): ",
         -torch.where(keep, objective, torch.zeros_like(objective)).sum() / keep.shape[0]),
        ("unclipped term dropped", "the loss is clip(r, 1 - ε, 1 + ε) Â alone: take the min with r Â, so that the clip "
                                   "only ever removes an incentive: ", -token_mean(clipped * A)),
    ]
    for low, high in ((eps - 1, 1 + eps), (1 + eps, 1 + eps), (1 - eps, 1 - eps)):  # a sign flipped in the clip range
        candidates.append((mutants.SIGN, "in the clip range: ",
                           -token_mean(torch.minimum(ratio * A, torch.clamp(ratio, low, high) * A))))
    return next((f"({kind}) {words}" for kind, words, value in candidates
                 if torch.allclose(loss, value, rtol=LOSS_RTOL, atol=1e-7)), "")


def _gradient(model: nn.Module, rollout: Rollout, advantages: torch.Tensor, eps: float,
              aggregation: str = "token-mean") -> torch.Tensor:
    """The gradient of the clipped loss (aggregated so) at the policy a step started from, before clipping, flat."""
    model = copy.deepcopy(model)
    logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                             prompt_length=rollout.prompt_length)
    loss, _ = losses.grpo_loss(logp, rollout.logprobs, None, advantages, rollout.response_mask, eps=eps, beta=0.0,
                               aggregation=aggregation)
    loss.backward()
    return torch.cat([torch.zeros_like(p).flatten() if p.grad is None else p.grad.flatten()
                      for p in model.parameters()])


def _gradient_norm(model: nn.Module, rollout: Rollout, advantages: torch.Tensor, eps: float) -> float:
    """The norm of the reference loss's gradient at the policy a step started from, before clipping."""
    return float(_gradient(model, rollout, advantages, eps).norm())


def _scale_kind(scale: float, start: nn.Module, expected: _Run, epoch: int) -> str:
    """The mistake that makes the update the reference's times `scale`: a mean over padding (the gradient times the
    share of real tokens) or no clipping of the gradient norm, told apart by the unclipped gradient norm."""
    rollout = expected.rollouts[epoch]
    norm = _gradient_norm(start, rollout, expected.outputs[epoch].advantages, 0.2)
    share = float(rollout.response_mask.sum() / rollout.response_mask.numel())
    clipped = min(1.0, MAX_GRAD_NORM / norm)
    if abs(scale - share * min(1.0, MAX_GRAD_NORM / (share * norm)) / clipped) < 1e-2 * scale:
        return (f"({mutants.PADDING}) your update points the same way, scaled as if the loss were divided by every "
                f"position: divide the masked sum by the number of real response tokens (mask.sum()), not by every "
                f"position (.mean() or mask.numel())")
    if abs(scale - 1 / clipped) < 1e-2 * scale:
        return (f"(gradient norm not clipped) your update points the same way, {scale:.3g} times as long: clip the "
                f"gradient norm at {MAX_GRAD_NORM:g} (torch.nn.utils.clip_grad_norm_) after loss.backward(), before "
                f"optimizer.step()")
    return ("your update points the same way with another size: is the loss a token mean over the real response "
            f"tokens of the whole batch, and the gradient norm clipped at {MAX_GRAD_NORM:g} before optimizer.step()?")


def _is_update_of(aggregation: str, update: torch.Tensor, start: nn.Module, expected: _Run, epoch: int) -> bool:
    """Whether `update` is the SGD step of the clipped loss with another aggregation, from the policy `start`."""
    gradient = _gradient(start, expected.rollouts[epoch], expected.outputs[epoch].advantages, 0.2, aggregation)
    step = -CHECK_LR * gradient * min(1.0, MAX_GRAD_NORM / float(gradient.norm().clamp_min(1e-12)))
    return float((update - step).norm()) <= 1e-2 * float(step.norm())


def _update_problem(actual: _Run, expected: _Run, epoch: int, start: nn.Module) -> str:
    """What is wrong with a step's weight update ("" when it matches), with the kind it shows."""
    mine, theirs = actual.updates[epoch], expected.updates[epoch]
    gap = float((mine - theirs).norm() / theirs.norm().clamp_min(1e-12))
    if gap <= UPDATE_RTOL:
        return ""
    cosine = float(torch.nn.functional.cosine_similarity(mine, theirs, dim=0)) if mine.norm() > 0 else 0.0
    if mine.norm() == 0 and actual.gradient_left[epoch]:
        words = ("(optimizer.step() missing) no update at all, though the gradient is in .grad: call "
                 "optimizer.step() after loss.backward() and the gradient clipping")
    elif mine.norm() == 0:
        words = (f"({mutants.DETACH_EXTRA}) no update at all, and no gradient left in .grad: is optimizer.zero_grad() "
                 f"called after loss.backward() (it belongs before it), or the loss built from log-probs without a "
                 f"gradient (.detach(), torch.no_grad())?")
    elif mine.norm() < 1e-3 * theirs.norm():
        words = (f"({mutants.DETACH_MISSING}) your update is about 0, {float(mine.norm() / theirs.norm()):.1g} of the "
                 f"reference's: the ratio's gradient cancels when old_logp carries the same gradient as logp "
                 f"(recomputed without torch.no_grad()): use rollout.logprobs, the log-probs the answers were "
                 f"sampled with")
    elif epoch > 0 and not _update_problem(actual, expected, 0, start):
        words = ("(gradient accumulated) the first step's update is right, the second's is not: the first step's "
                 "gradient is still in .grad. Call optimizer.zero_grad() before loss.backward()")
    elif cosine < -0.999:
        words = f"({mutants.SIGN}) your update goes the opposite way: the loss is minus the clipped surrogate's mean"
    elif cosine > 0.999:
        words = _scale_kind(float(mine.norm() / theirs.norm()), start, expected, epoch)
    elif _is_update_of("seq-mean", mine, start, expected, epoch):
        words = (f"({mutants.AXIS}) your update is that of a loss averaged within each answer first, then over the "
                 f"answers (seq-mean): the reference averages over the real response tokens of the whole batch, the "
                 f"masked sum over both axes divided by mask.sum()")
    else:
        words = ("the gradient differs (is the loss averaged over the real response tokens of the whole batch, is it "
                 "built from log-probs with a gradient, is the gradient norm clipped at 1 before optimizer.step()?)")
    return f"update: {words}; relative difference of the weight updates {gap:.2g}"


def _step_problems(actual: _Run, expected: _Run, epoch: int, start: nn.Module, tokenizer) -> list[str]:
    """What differs in one step (the first epoch samples the batch, the second trains on it again)."""
    from minirlhf.course.exercises.engine import error_hint

    if actual.error is not None and len(actual.outputs) == epoch:
        lines = [f"my_step raised {type(actual.error).__name__}: {actual.error}"]
        lines += [f"  at: {actual.where}"] if actual.where else []
        return lines + [f"  hint: {error_hint(str(actual.error))} (stuck? capstone.solution())"]
    out, wanted = actual.outputs[epoch], expected.outputs[epoch]
    if not isinstance(out, StepOutput):
        return [f"my_step returned a {type(out).__name__}: return a capstone.StepOutput(completions, rewards, "
                f"advantages, loss)"]
    if actual.changed[epoch]:
        return [f"({mutants.IN_PLACE}) my_step changed {', '.join(actual.changed[epoch])} of the sampled batch in "
                f"place (x.sub_(...), x -= ..., x[...] = ...): the batch is the sampler's record, read again by a "
                f"second epoch; compute new tensors (x = x - ...) instead"]
    if list(out.completions) != wanted.completions:
        return ["sampling: the completions differ. Sample with sample(model, tokenizer, prompts, "
                "group_size=group_size, max_new_tokens=arithmetic.MAX_NEW_TOKENS, generator=generator), once, "
                "before the update, and draw nothing else from the generator.",
                *_first_difference(wanted.completions, list(out.completions), tokenizer, 8)]
    try:
        rewards, advantages, loss = (_tensor(getattr(out, n), n) for n in ("rewards", "advantages", "loss"))
    except TypeError as error:
        return [f"my_step's output: {error}"]
    if rewards.shape != wanted.rewards.shape or not torch.equal(rewards, wanted.rewards.double()):
        kind = f"({mutants.SIGN}) " if torch.equal(rewards, -wanted.rewards.double()) else ""
        return [f"rewards: {kind}expected {wanted.rewards.tolist()}, got {rewards.tolist()} "
                f"(arithmetic.correctness_reward(rollout.prompts, rollout.completions))"]
    if advantages.shape != wanted.advantages.shape or not torch.allclose(
            advantages, wanted.advantages.double(), rtol=GUARD_RTOL, atol=1e-6):
        kind = _advantage_kind(advantages, rewards, wanted.advantages, 8)
        return [f"advantages: {kind}expected {wanted.advantages.tolist()}, got {advantages.tolist()} "
                f"(group-normalised: (R - mean) / std within each group of G, sample std, 0 for a constant group)"]
    noise = max(float(loss.abs().max()), float(wanted.loss.abs())) < LOSS_NOISE
    if not noise and not torch.allclose(loss, wanted.loss.double(), rtol=GUARD_RTOL, atol=1e-7):
        kind = _loss_kind(loss, start, expected.rollouts[epoch], wanted.advantages, wanted.rewards, 0.2)
        return [f"loss value: {kind}expected {wanted.loss.item():.6g}, got {loss.item():.6g} (minus the clipped "
                f"surrogate min(r Â, clip(r, 1 - ε, 1 + ε) Â) averaged over the real response tokens of the batch, "
                f"with the sampling log-probs as old_logp)"]
    problem = _update_problem(actual, expected, epoch, start)
    if problem:
        return [problem]
    if out.loss.requires_grad:
        return [f"loss: ({mutants.DETACH_MISSING}) the loss returned carries the graph of the step: return "
                f"loss.detach(), a value to log (a loss kept with its graph keeps every activation of the step in "
                f"memory)"]
    return []


def compare(step: StepFn, seed: int = 0, model_name: str = "tiny-sft", n_prompts: int = 4) -> list[str]:
    """What differs between `step` and the reference over CHECK_EPOCHS steps on one optimizer, the batch of the
    first reused by the second (so the ratio leaves 1 and the clip acts): [] when nothing does."""
    model, tokenizer = load_model(model_name, device="cpu")
    disable_dropout(model)  # as the trainers do: p_θ scores the samples exactly as it drew them
    prompts = [p.prompt for p in arithmetic.sample_problems("train", n_prompts, seed)]
    start = copy.deepcopy(model)
    expected = _run(reference_step, copy.deepcopy(model), tokenizer, prompts, seed)
    actual = _run(step, model, tokenizer, prompts, seed)
    for epoch in range(CHECK_EPOCHS):
        if epoch:  # the policy the second step starts from: the reference's after the first
            torch.nn.utils.vector_to_parameters(_weights(start) + expected.updates[0], start.parameters())
        problems = _step_problems(actual, expected, epoch, start, tokenizer)
        if problems:
            where = "the first step" if epoch == 0 else SECOND_STEP
            return [f"{where}: {problems[0]}", *problems[1:]]
    return []


def check_step(step: StepFn, seed: int = 0) -> bool:
    """Print whether `step` matches the reference GRPO step over two steps on one optimizer (the second on the
    first one's batch), naming what differs; True if it does.
    With MINIRLHF_EXERCISES_STRICT=1 (the notebook test) a difference raises ExerciseFailed instead."""
    from minirlhf.course.exercises.engine import STRICT_ENV, ExerciseFailed  # not at the top: the checkers load last

    try:
        problems = compare(step, seed)
    except NotImplementedError:
        problems = ["not implemented yet. Replace `raise NotImplementedError` with your step (stuck? "
                    "capstone.solution() shows one way)."]
    if problems:
        message = "✗ capstone: my_step differs from the reference step: " + "\n  ".join(problems)
        print(message)
        if env_flag(STRICT_ENV):
            raise ExerciseFailed(message)
        return False
    print("✓ capstone: over two steps on one optimizer, the second on the same batch, my_step samples the same "
          "answers and computes the same rewards, advantages, loss and weight update as the reference step.")
    return True


@dataclass
class TrainHistory:
    reward: list[float] = field(default_factory=list)  # mean reward of each step's samples
    accuracy_before: float = 0.0  # greedy held-out accuracy
    accuracy_after: float = 0.0
    seconds: float = 0.0
    stepped_with: str = ""


def train(step: StepFn, steps: int, prompts_per_step: int = 32, group_size: int = 8, lr: float = 3e-4,
          seed: int = 0, model_name: str = "tiny-sft", held_out: int | None = None) -> TrainHistory:
    """Train a fresh copy of `model_name` with `steps` of `step` under AdamW; measure greedy held-out accuracy
    before and after, on every test problem (or on `held_out` of them drawn with the seed, for a quick look).

    A step that is not written yet (raises NotImplementedError) is replaced by the reference step, and said so.
    """
    model, tokenizer = load_model(model_name, device="cpu")
    disable_dropout(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    problems = None if held_out is None else arithmetic.sample_problems("test", held_out, seed)
    history = TrainHistory(accuracy_before=arithmetic.accuracy(model, tokenizer, problems), stepped_with=step.__name__)
    pool = arithmetic.problems("train")
    order = torch.randint(len(pool), (steps, prompts_per_step), generator=torch.Generator().manual_seed(seed + 1))
    start = time.perf_counter()
    for i in range(steps):
        prompts = [pool[j].prompt for j in order[i].tolist()]
        try:
            out = step(model, tokenizer, optimizer, prompts, generator, group_size, 0.2)
        except NotImplementedError:
            print("my_step is not written yet: training with the reference step instead.")
            step, history.stepped_with = reference_step, reference_step.__name__
            out = step(model, tokenizer, optimizer, prompts, generator, group_size, 0.2)
        history.reward.append(float(out.rewards.float().mean()))
    history.seconds = time.perf_counter() - start
    history.accuracy_after = arithmetic.accuracy(model, tokenizer, problems)
    return history


def solution_source() -> str:
    """A worked my_step, as code the notebook's stub cell can be replaced with."""
    from minirlhf.course import solutions

    return (CAPSTONE_IMPORTS + "\n\n" + inspect.getsource(solutions.my_step))


def solution() -> None:
    print(solution_source())


CAPSTONE_IMPORTS = """\
import torch

from minirlhf.course.capstone import StepOutput
from minirlhf.logprobs import response_logprobs
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic
"""
