"""The capstone's checker (minirlhf.course.capstone): the worked my_step matches the library's reference step, the
wrong steps students write are each refused with the part that differs named, and so is every single-edit version of
the worked step (mutants.py) but the ones listed as right, with its kind named."""

from __future__ import annotations

import contextlib
import inspect
import io
import textwrap

import pytest
import torch

from minirlhf import losses
from minirlhf.course import capstone, exercises, solutions
from minirlhf.course.exercises import mutants
from minirlhf.logprobs import response_logprobs
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic


def _step(advantages_of=lambda r, g: losses.grpo_advantages(r, g), aggregation="token-mean", clip_grad=True,
          own_generator=False):
    """A GRPO step with one thing made wrong on purpose."""
    def step(model, tokenizer, optimizer, prompts, generator, group_size, eps):
        model.eval()
        generator = torch.Generator().manual_seed(1234) if own_generator else generator
        rollout = sample(model, tokenizer, prompts, group_size=group_size, max_new_tokens=arithmetic.MAX_NEW_TOKENS,
                         generator=generator)
        rewards = torch.tensor(arithmetic.correctness_reward(rollout.prompts, rollout.completions))
        advantages = advantages_of(rewards, group_size)
        model.train()
        logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                                 prompt_length=rollout.prompt_length)
        loss, _ = losses.grpo_loss(logp, rollout.logprobs, None, advantages, rollout.response_mask, eps=eps,
                                   beta=0.0, aggregation=aggregation)
        optimizer.zero_grad()
        loss.backward()
        if clip_grad:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return capstone.StepOutput(rollout.completions, rewards, advantages, loss.detach())
    return step


def test_the_worked_step_and_the_reference_agree(capsys):
    assert capstone.check_step(solutions.my_step) is True, capsys.readouterr().out


def test_a_stub_is_not_implemented_yet_and_strict_mode_raises(capsys, monkeypatch):
    def my_step(model, tokenizer, optimizer, prompts, generator, group_size, eps):
        raise NotImplementedError

    assert capstone.check_step(my_step) is False
    assert "not implemented yet" in capsys.readouterr().out
    monkeypatch.setenv(exercises.STRICT_ENV, "1")
    with pytest.raises(exercises.ExerciseFailed, match="not implemented yet"):
        capstone.check_step(my_step)


def _edited_solution(old: str, new: str):
    """The worked my_step with one line of its source edited: a wrong step as a student writes it."""
    source = textwrap.dedent(inspect.getsource(solutions.my_step))
    assert old in source, old
    namespace = dict(vars(solutions))
    exec(source.replace(old, new), namespace)  # noqa: S102 -- our own solution, edited
    return namespace["my_step"]


SECOND_STEP = capstone.SECOND_STEP
GUARD = "advantages = torch.where(std < 1e-4, torch.zeros_like(R), (R - R.mean(1, keepdim=True)) / std.clamp_min(1e-4))"
WRONG_STEPS = [
    ("no optimizer.zero_grad()", _edited_solution("    optimizer.zero_grad()\n", ""),
     f"{SECOND_STEP}: update: (gradient accumulated)"),
    ("the ratio not clipped", _edited_solution("torch.clamp(ratio, 1 - eps, 1 + eps) * A", "ratio * A"),
     f"{SECOND_STEP}: loss value: (no clipping)"),
    ("max instead of min", _edited_solution("torch.minimum(ratio * A", "torch.maximum(ratio * A"),
     f"{SECOND_STEP}: loss value: (min and max swapped)"),
    ("the loss's sign flipped", _edited_solution("loss = -torch.where", "loss = torch.where"),
     "(sign flipped)"),  # named by the loss value, or by the update when the first step's loss is about 0
    ("the advantage clipped", _edited_solution("torch.clamp(ratio, 1 - eps, 1 + eps) * A",
                                               "ratio * torch.clamp(A, 1 - eps, 1 + eps)"),
     "loss value: (the clip on the wrong quantity)"),
    ("population std", _edited_solution("std = R.std(1, keepdim=True)", "std = R.std(1, keepdim=True, correction=0)"),
     "the first step: advantages: (biased std)"),
    ("a batch sampled and thrown away", _edited_solution(
        "    rollout = sample(", "    sample(model, tokenizer, prompts, group_size=group_size, max_new_tokens=8, "
                                "generator=generator)\n    rollout = sample("), "sampling: the completions differ"),
    ("no gradient clipping", _edited_solution("    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)\n", ""),
     "update: (gradient norm not clipped)"),

    ("its own generator", _step(own_generator=True), "sampling: the completions differ"),
    ("advantages not scaled by the group std", _step(advantages_of=lambda r, g: losses.grpo_advantages(
        r, g, scale="none")), "advantages: expected"),
    ("advantages with the sign flipped", _step(advantages_of=lambda r, g: -losses.grpo_advantages(r, g)),
     "advantages: (sign flipped) expected"),
    ("each answer averaged first", _step(aggregation="seq-mean"), "the first step: update: (wrong axis)"),
    ("padding counted in the mean", _step(aggregation="constant"), "update: (mean over padding)"),
    ("a large ε guard of its own", _edited_solution(GUARD, "advantages = (R - R.mean(1, keepdim=True)) / (std + 1e-2)"),
     "the first step: advantages: (ε guard) your std has an ε added, (R - mean) / (std + 0.01)"),
    ("the loss returned as a float", _edited_solution("loss.detach())", "loss.item())"),
     "the first step: my_step's output: StepOutput.loss is a float, expected a torch.Tensor"),
    ("advantages normalised over the batch", _edited_solution(GUARD, "advantages = (R - R.mean()) / R.std()"),
     "the first step: advantages: (wrong axis) normalised over the whole batch"),
    ("old_logp recomputed", _edited_solution("logp - rollout.logprobs", "logp - logp.detach()"),
     f"{SECOND_STEP}: loss value: (old_logp recomputed) the ratio is 1 on every token"),
    ("no optimizer.step()", _edited_solution("    optimizer.step()\n", ""),
     "the first step: update: (optimizer.step() missing) no update at all, though the gradient is in .grad"),
    ("optimizer.zero_grad() after loss.backward()", _edited_solution(
        "    optimizer.zero_grad()\n    loss.backward()\n", "    loss.backward()\n    optimizer.zero_grad()\n"),
     "is optimizer.zero_grad() called after loss.backward() (it belongs before it)"),
    ("the reward in the loss for the advantage", _edited_solution("A = advantages[:, None]", "A = rewards[:, None]"),
     "the first step: loss value: (reward for advantage)"),
    ("the rewards returned as advantages", _edited_solution("advantages = advantages.reshape(-1)",
                                                            "advantages = rewards.float()"),
     "the first step: advantages: (no baseline) these are the rewards themselves"),
    ("the group mean over the batch's std", _edited_solution(GUARD, "advantages = (R - R.mean(1, keepdim=True)) / "
                                                                    "rewards.float().std()"),
     "the first step: advantages: (wrong axis) the group's mean, but the std of the whole batch"),
    ("old_logp recomputed with its gradient", _edited_solution(
        "logp - rollout.logprobs", "logp - response_logprobs(model, rollout.input_ids, rollout.attention_mask, "
                                   "rollout.response_mask, prompt_length=rollout.prompt_length)"),
     "the first step: update: (detach missing) your update is about 0"),
    ("the token sum over the number of answers", _edited_solution(".sum() / mask.sum()", ".sum() / len(prompts) / "
                                                                                        "group_size"),
     "loss value: (count of answers) the masked sum is divided by the number of answers"),
    ("the clipped term alone", _edited_solution("torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)",
                                                "torch.clamp(ratio, 1 - eps, 1 + eps) * A"),
     f"{SECOND_STEP}: loss value: (unclipped term dropped)"),
    ("one ratio per answer, the product of its tokens'", _edited_solution(
        "    A = advantages[:, None]\n"
        "    objective = torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)\n"
        "    loss = -torch.where(mask, objective, torch.zeros_like(objective)).sum() / mask.sum()  # token mean\n",
        "    ratio = ratio.prod(-1)  # one ratio per answer\n    A = advantages\n"
        "    objective = torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)\n"
        "    loss = -objective.mean()\n"),
     f"{SECOND_STEP}: loss value: expected"),  # both losses about 1e-7 at r = 1: no kind is read from them
    ("no guard for a constant group", _edited_solution(GUARD, "advantages = (R - R.mean(1, keepdim=True)) / std"),
     "the first step: advantages: (no guard for a constant group)"),
    ("the log-probs under torch.no_grad()", _edited_solution(
        "    logp = response_logprobs(", "    with torch.no_grad():\n        logp = response_logprobs("),
     "hint: the loss has no graph to backpropagate"),
    ("the sampling log-probs changed in place", _edited_solution(
        "    mask = rollout.response_mask.bool()\n",
        "    mask = rollout.response_mask.bool()\n    rollout.logprobs[~mask] = float('nan')  # 'masked'\n"),
     "the first step: (in-place change of an input) my_step changed rollout.logprobs of the sampled batch in place"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, step, words", WRONG_STEPS, ids=[n for n, _, _ in WRONG_STEPS])
def test_a_wrong_step_is_refused_with_what_differs(name, step, words, capsys):
    assert capstone.check_step(step) is False
    assert words in capsys.readouterr().out


def _probability_ratio_step(model, tokenizer, optimizer, prompts, generator, group_size, eps):
    """Right, written otherwise: zero_grad first, an ε guard, a ratio of probabilities, -min(x, y) as max(-x, -y)."""
    optimizer.zero_grad(set_to_none=False)
    rollout = sample(model, tokenizer, prompts, group_size=group_size, max_new_tokens=arithmetic.MAX_NEW_TOKENS,
                     generator=generator)
    rewards = torch.tensor(arithmetic.correctness_reward(rollout.prompts, rollout.completions))
    R = rewards.double().view(-1, group_size)
    advantages = ((R - R.mean(dim=1, keepdim=True)) / (R.std(dim=1, keepdim=True) + 1e-6)).flatten().float()
    logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                             prompt_length=rollout.prompt_length)
    mask = rollout.response_mask.float()
    ratio = torch.where(mask.bool(), logp.exp() / rollout.logprobs.exp(), torch.ones_like(logp))
    A = advantages.unsqueeze(1)
    per_token = torch.maximum(-ratio * A, -torch.clamp(ratio, 1 - eps, 1 + eps) * A)
    loss = (per_token * mask).sum() / mask.sum()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
    optimizer.step()
    return capstone.StepOutput(list(rollout.completions), rewards, advantages, loss.detach())


def _loop_over_groups_step(model, tokenizer, optimizer, prompts, generator, group_size, eps):
    """Right, written otherwise: advantages group by group in a loop, the loss over the response tokens selected."""
    rollout = sample(model, tokenizer, prompts, group_size=group_size, max_new_tokens=arithmetic.MAX_NEW_TOKENS,
                     generator=generator)
    rewards = torch.tensor(arithmetic.correctness_reward(rollout.prompts, rollout.completions), dtype=torch.float32)
    advantages = torch.zeros_like(rewards)
    for g in range(0, len(rewards), group_size):
        group = rewards[g:g + group_size]
        if group.std() > 0:
            advantages[g:g + group_size] = (group - group.mean()) / group.std()
    logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                             prompt_length=rollout.prompt_length)
    keep = rollout.response_mask.bool()
    ratio = (logp - rollout.logprobs)[keep].exp()  # (number of response tokens,)
    A = advantages[:, None].expand_as(logp)[keep]
    loss = -torch.minimum(ratio * A, ratio.clamp(1 - eps, 1 + eps) * A).mean()
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return capstone.StepOutput(rollout.completions, rewards, advantages, loss.detach())


RIGHT_STEPS = [
    ("TRL's ε guard, std + 1e-4", _edited_solution(GUARD, "advantages = (R - R.mean(1, keepdim=True)) / (std + 1e-4)")),
    ("the mask as a product", _edited_solution("-torch.where(mask, objective, torch.zeros_like(objective)).sum()",
                                               "-(objective * mask).sum()")),
    ("the clip with keywords", _edited_solution("torch.clamp(ratio, 1 - eps, 1 + eps)",
                                                "ratio.clamp(min=1 - eps, max=1 + eps)")),
    ("the library's advantages and loss", _step()),
    ("zero_grad first, a probability ratio, max of negatives", _probability_ratio_step),
    ("advantages in a loop, the response tokens selected", _loop_over_groups_step),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, step", RIGHT_STEPS, ids=[n for n, _ in RIGHT_STEPS])
def test_a_right_step_written_another_way_passes(name, step, capsys):
    assert capstone.check_step(step) is True, capsys.readouterr().out


def test_the_solution_source_defines_my_step():
    namespace: dict = {}
    exec(capstone.solution_source(), namespace)  # noqa: S102 -- our own solution's source
    assert namespace["my_step"].__doc__ == solutions.my_step.__doc__


def test_an_error_in_the_step_is_reported_with_its_line_and_a_hint(capsys):
    def my_step(model, tokenizer, optimizer, prompts, generator, group_size, eps):
        rewards = torch.zeros(len(prompts) * group_size)
        return rewards.view(-1, group_size + 1)  # the failing line
    line = my_step.__code__.co_firstlineno + 2
    assert capstone.check_step(my_step) is False
    out = capsys.readouterr().out
    assert "the first step: my_step raised RuntimeError: shape '[-1, 9]' is invalid" in out
    assert f"at: line {line} of {__file__}, in my_step: return rewards.view(-1, group_size + 1)" in out
    assert "hint: the view does not fit the number of elements" in out and "Traceback" not in out


def test_different_samples_are_shown_where_they_first_differ(capsys):
    assert capstone.check_step(_step(own_generator=True)) is False
    out = capsys.readouterr().out
    assert "first difference: answer " in out and ", token " in out and "expected '" in out and "yours    '" in out


def test_the_second_step_trains_on_the_first_ones_batch_with_the_clip_acting():
    """The check's second step replays the batch, the rewarded answers cut before their EOS: the ratio leaves
    [1 - ε, 1 + ε] on many tokens, and the answers of a group differ in length."""
    model, tokenizer = capstone.load_model("tiny-sft", device="cpu")
    capstone.disable_dropout(model)
    prompts = [p.prompt for p in arithmetic.sample_problems("train", 4, 0)]
    run = capstone._run(capstone.reference_step, model, tokenizer, prompts, seed=0)
    assert len(run.outputs) == len(run.rollouts) == capstone.CHECK_EPOCHS == 2
    assert run.outputs[0].completions == run.outputs[1].completions
    assert torch.equal(run.outputs[0].rewards, run.outputs[1].rewards)
    first, rollout = run.rollouts
    cut = first.response_lengths - rollout.response_lengths  # (B,)
    assert torch.equal(cut.bool(), run.outputs[0].rewards > 0)
    assert torch.equal(rollout.attention_mask.sum(-1), first.attention_mask.sum(-1) - cut)
    rewarded = (run.outputs[0].rewards > 0).view(-1, 8)
    assert (rewarded.any(1) & ~rewarded.all(1)).sum() >= 2  # groups whose answers now differ in length
    with torch.no_grad():
        logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                                 prompt_length=rollout.prompt_length)
    ratio = torch.exp(logp - rollout.logprobs)[rollout.response_mask.bool()]
    assert ((ratio < 0.8) | (ratio > 1.2)).float().mean() > 0.1
    assert capstone.sample is sample  # the replay is undone


@pytest.fixture(scope="module")
def mutant_reports() -> list[tuple[mutants.Mutant, bool, str]]:
    """check_step's verdict and report on every single-edit version of the worked step, shared by the tests below
    (one check, two steps of both the reference and the mutant, per mutant)."""
    reports = []
    for mutant in mutants.mutants(solutions.my_step):
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            reports.append((mutant, capstone.check_step(mutant.fn), out.getvalue()))
    return reports


@pytest.mark.slow
def test_every_wrong_mutant_of_the_worked_step_is_refused_with_its_kind_named(mutant_reports):
    wrong = [(m, passed, out) for m, passed, out in mutant_reports if m.edit not in capstone.EQUIVALENT_MUTANTS]
    assert {m.kind for m, _, _ in wrong} >= {mutants.SIGN, mutants.AXIS, mutants.BIASED_STD, mutants.MIN_MAX,
                                             mutants.PADDING, mutants.MASK, mutants.CLIP, mutants.DETACH_MISSING}
    unnamed = [f"({m.kind}) {m.edit}" for m, passed, out in wrong
               if passed or not (f"({m.kind})" in out or "my_step raised" in out)]  # an error: shown with its line
    assert not unnamed, unnamed


@pytest.mark.slow
def test_the_mutants_listed_as_right_pass_the_check(mutant_reports):
    assert {m.edit for m, passed, _ in mutant_reports if passed} == set(capstone.EQUIVALENT_MUTANTS)
