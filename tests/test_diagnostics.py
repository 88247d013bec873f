"""Live diagnostics: each check fires on a deliberately broken input, and all stay quiet on a healthy run."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest
import torch

from minirlhf import diagnostics
from minirlhf.diagnostics import DiagnosticWarning
from minirlhf.logprobs import response_logprobs
from minirlhf.losses import grpo_advantages, rloo_advantages
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce


@pytest.fixture
def quiet():
    """Inside, any DiagnosticWarning is an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", DiagnosticWarning)
        yield


def _sampled(model, tokenizer, temperature: float = 1.0):
    rollout = sample(model, tokenizer, ["17+25=", "The acting was", "3+4="], group_size=2, max_new_tokens=6,
                     temperature=temperature, generator=torch.Generator().manual_seed(0))
    return rollout


def _recomputed(model, rollout, temperature: float = 1.0):
    with torch.no_grad():
        return response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask, temperature)


def test_logprob_check_is_quiet_when_sampling_and_training_agree(tiny, quiet):
    model, tokenizer = tiny
    rollout = _sampled(model, tokenizer)
    metrics = diagnostics.check_logprobs(_recomputed(model, rollout), rollout.logprobs, rollout.response_mask)
    assert metrics["debug/logp_max_abs_diff"] < 1e-4 and metrics["debug/ratio_mean"] == pytest.approx(1, abs=1e-5)


def test_logprob_check_fires_when_dropout_is_left_on(tiny):
    model, tokenizer = tiny  # the shipped config has dropout 0.1; the trainers turn it off
    rollout = _sampled(model, tokenizer)
    with pytest.warns(DiagnosticWarning, match="dropout left on"):
        diagnostics.check_logprobs(_recomputed(copy.deepcopy(model).train(), rollout), rollout.logprobs,
                                   rollout.response_mask)


def test_logprob_check_fires_on_a_temperature_mismatch(tiny):
    model, tokenizer = tiny
    rollout = _sampled(model, tokenizer, temperature=0.7)
    with pytest.warns(DiagnosticWarning, match="temperature that differs"):
        diagnostics.check_logprobs(_recomputed(model, rollout, temperature=1.0), rollout.logprobs,
                                   rollout.response_mask)


def test_logprob_check_fires_when_the_mask_is_shifted(tiny):
    model, tokenizer = tiny
    rollout = _sampled(model, tokenizer)
    shifted = torch.roll(rollout.logprobs, 1, dims=1)  # log-probs one token late
    with pytest.warns(DiagnosticWarning, match="shifted by one token"):
        diagnostics.check_logprobs(_recomputed(model, rollout), shifted, rollout.response_mask)


def test_group_checks(quiet):
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    metrics = diagnostics.check_groups(rewards, grpo_advantages(rewards, 4), group_size=4)
    assert metrics == {"zero_std_groups": 0.0, "debug/group_advantage_mean_max": pytest.approx(0, abs=1e-6)}
    diagnostics.check_groups(rewards, rloo_advantages(rewards, 4), group_size=4)
    assert diagnostics.check_groups(rewards, None, group_size=1) == {}  # PPO's groups of one: nothing to check


def test_group_check_fires_on_constant_rewards():
    with pytest.warns(DiagnosticWarning, match="100% of the groups give every completion the same reward"):
        diagnostics.check_groups(torch.ones(8), None, group_size=4)


def test_group_check_fires_when_advantages_use_other_groups():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    interleaved = grpo_advantages(rewards.view(4, 2).T.reshape(-1), 4).view(2, 4).T.reshape(-1)  # rows i, i+2, ...
    with pytest.warns(DiagnosticWarning, match="not consecutive"):
        diagnostics.check_groups(rewards, interleaved, group_size=4)


def test_truncation_check(quiet):
    assert diagnostics.check_endings(torch.tensor([True, True, False]))["debug/truncation_rate"] == pytest.approx(1 / 3)
    with pytest.warns(DiagnosticWarning, match="cut at max_new_tokens"):
        diagnostics.check_endings(torch.tensor([False, False, True]))


def test_kl_sign_check(quiet):
    mask = torch.ones(16, 5)
    noise = torch.randn(16, 5, generator=torch.Generator().manual_seed(0))
    assert diagnostics.check_kl_sign(noise, noise, mask)["debug/kl_k1_mean"] == 0.0
    diagnostics.check_kl_sign(0.01 * noise, torch.zeros(16, 5), mask)  # noise around 0 is not negative
    with pytest.warns(DiagnosticWarning, match="negative"):
        diagnostics.check_kl_sign(torch.full((16, 5), -2.0), torch.full((16, 5), -1.0), mask)


def _no_eval_task():
    return dataclasses.replace(arithmetic.task(), evaluate=None)


def test_healthy_runs_log_the_diagnostics_and_stay_quiet(quiet):
    online = dict(device="cpu", steps=2, prompts_per_step=8, progress=False, debug=True)
    _, _, grpo = train_grpo(_no_eval_task(), GRPOConfig(**online, group_size=4, beta=0.04, epochs=2, minibatch_size=8))
    _, _, rloo = train_reinforce(_no_eval_task(), ReinforceConfig(**online, group_size=4, beta=0.04))
    _, _, ppo = train_ppo(_no_eval_task(), PPOConfig(**online, minibatch_size=4))
    for history in (grpo, rloo, ppo):
        first = history[0]
        assert first["debug/logp_max_abs_diff"] < 1e-4 and first["debug/ratio_mean"] == pytest.approx(1, abs=1e-5)
        assert first["debug/eos_rate"] > 0.5 and "debug/kl_k1_mean" in first
    assert "debug/group_advantage_mean_max" in grpo[0] and "debug/group_advantage_mean_max" in rloo[0]


def test_diagnostics_are_off_by_default():
    _, _, history = train_grpo(_no_eval_task(), GRPOConfig(device="cpu", steps=1, prompts_per_step=2, group_size=2,
                                                           progress=False))
    assert not any(key.startswith("debug/") for key in history[0])
