"""The capstone's checker (minirlhf.course.capstone): the worked my_step matches the library's reference step, and
the wrong steps students write are each refused with the part that differs named."""

from __future__ import annotations

import pytest
import torch

from minirlhf import losses
from minirlhf.course import capstone, exercises, solutions
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


WRONG_STEPS = [
    ("its own generator", _step(own_generator=True), "sampling: the completions differ"),
    ("advantages not scaled by the group std", _step(advantages_of=lambda r, g: losses.grpo_advantages(
        r, g, scale="none")), "advantages: expected"),
    ("advantages with the sign flipped", _step(advantages_of=lambda r, g: -losses.grpo_advantages(r, g)),
     "advantages: expected"),
    ("each answer averaged first", _step(aggregation="seq-mean"), "update: the gradient differs"),
    ("padding counted in the mean", _step(aggregation="constant"), "update: the gradient differs"),
    ("no gradient clipping", _step(clip_grad=False), "update: the gradient differs"),
]


@pytest.mark.slow
@pytest.mark.parametrize("name, step, words", WRONG_STEPS, ids=[n for n, _, _ in WRONG_STEPS])
def test_a_wrong_step_is_refused_with_what_differs(name, step, words, capsys):
    assert capstone.check_step(step) is False
    assert words in capsys.readouterr().out


def test_the_solution_source_defines_my_step():
    namespace: dict = {}
    exec(capstone.solution_source(), namespace)  # noqa: S102 -- our own solution's source
    assert namespace["my_step"].__doc__ == solutions.my_step.__doc__
