"""The capstone: the student writes GRPO's whole training step on the tiny GPT-2, the course checks it against the
library's pieces on the same seed, then trains with it and measures held-out accuracy.

    from minirlhf.course import capstone
    capstone.check_step(my_step)              # True when my_step samples, scores, updates as the reference does
    history = capstone.train(my_step, steps)  # held-out accuracy before and after `steps` of my_step

A step is `my_step(model, tokenizer, optimizer, prompts, generator, group_size, eps)`: sample `group_size`
completions per prompt (minirlhf.sampling.sample, with `generator`), reward them (the arithmetic task's exact-match
reward), compute GRPO's group advantages, the clipped loss (β = 0: no reference model), and take one optimizer step
with the gradient norm clipped at 1. It returns a StepOutput. The reference (`reference_step`) is the same step
written with minirlhf.losses; `check_step` runs both from the same seed and the same weights and names the first
thing that differs: the samples, the rewards, the advantages, the loss, or the update (the gradient).
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from minirlhf import losses
from minirlhf.course.step_output import StepOutput  # what a step returns (its own module: solutions.py uses it)
from minirlhf.errors import env_flag
from minirlhf.logprobs import response_logprobs
from minirlhf.models import disable_dropout, load_model
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic

MAX_GRAD_NORM = 1.0
LOSS_RTOL = 1e-4  # float32: the loss is a mean of a few hundred terms
UPDATE_RTOL = 1e-3  # relative size of the difference of the two weight updates
CHECK_LR = 1e-2  # check_step compares updates under plain SGD, so the update is the (clipped) gradient itself


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


def _run(step: StepFn, model: nn.Module, tokenizer, prompts: list[str], seed: int) -> tuple[StepOutput, torch.Tensor]:
    """Run a step from a seed under SGD; return its output and the weight update it made."""
    before = _weights(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=CHECK_LR)
    torch.manual_seed(seed)  # the same global random state in both runs
    out = step(model, tokenizer, optimizer, prompts, torch.Generator().manual_seed(seed), 8, 0.2)
    return out, _weights(model) - before


def _tensor(value, name: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"StepOutput.{name} is a {type(value).__name__}, expected a torch.Tensor")
    return value.detach().cpu().double()


def compare(step: StepFn, seed: int = 0, model_name: str = "tiny-sft", n_prompts: int = 4) -> list[str]:
    """What differs between `step` and the reference on one seeded step: [] when nothing does."""
    model, tokenizer = load_model(model_name, device="cpu")
    disable_dropout(model)  # as the trainers do: p_θ scores the samples exactly as it drew them
    prompts = [p.prompt for p in arithmetic.sample_problems("train", n_prompts, seed)]
    expected, expected_update = _run(reference_step, copy.deepcopy(model), tokenizer, prompts, seed)
    actual, actual_update = _run(step, model, tokenizer, prompts, seed)
    if not isinstance(actual, StepOutput):
        return [f"my_step returned a {type(actual).__name__}: return a capstone.StepOutput(completions, rewards, "
                f"advantages, loss)"]
    if list(actual.completions) != expected.completions:
        return ["sampling: the completions differ. Sample with sample(model, tokenizer, prompts, "
                "group_size=group_size, max_new_tokens=arithmetic.MAX_NEW_TOKENS, generator=generator), once, "
                "before the update, and draw nothing else from the generator.",
                f"  expected {expected.completions[:8]}", f"  yours    {list(actual.completions)[:8]}"]
    problems = []
    rewards, advantages, loss = (_tensor(getattr(actual, n), n) for n in ("rewards", "advantages", "loss"))
    if rewards.shape != expected.rewards.shape or not torch.equal(rewards, expected.rewards.double()):
        problems.append(f"rewards: expected {expected.rewards.tolist()}, got {rewards.tolist()} "
                        f"(arithmetic.correctness_reward(rollout.prompts, rollout.completions))")
    elif advantages.shape != expected.advantages.shape or not torch.allclose(
            advantages, expected.advantages.double(), rtol=1e-5, atol=1e-6):
        problems.append(f"advantages: expected {expected.advantages.tolist()}, got {advantages.tolist()} "
                        f"(group-normalised: (R - mean) / std within each group of G, 0 for a constant group)")
    if not problems and not torch.allclose(loss, expected.loss.double(), rtol=LOSS_RTOL, atol=1e-7):
        problems.append(f"loss value: expected {expected.loss.item():.6g}, got {loss.item():.6g} (the clipped "
                        f"surrogate averaged over the real response tokens, with the sampling log-probs as old_logp)")
    gap = (actual_update - expected_update).norm() / expected_update.norm().clamp_min(1e-12)
    if not problems and gap > UPDATE_RTOL:
        words = "no update at all (was optimizer.step() called?)" if actual_update.norm() == 0 else (
            "the gradient differs (is the loss averaged over the real response tokens of the whole batch, is it "
            "built from log-probs with a gradient, is the gradient norm clipped at 1 before optimizer.step()? On "
            "policy the ratio is 1 and the loss's value is about 0, so a wrong average often shows only here)")
        problems.append(f"update: {words}; relative difference of the weight updates {gap:.2g}")
    return problems


def check_step(step: StepFn, seed: int = 0) -> bool:
    """Print whether `step` matches the reference GRPO step on a seeded batch, naming what differs; True if it does.
    With MINIRLHF_EXERCISES_STRICT=1 (the notebook test) a difference raises ExerciseFailed instead."""
    from minirlhf.course.exercises.engine import STRICT_ENV, ExerciseFailed  # not at the top: engine imports us

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
    print("✓ capstone: my_step samples the same answers and computes the same rewards, advantages, loss and "
          "weight update as the reference step.")
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
