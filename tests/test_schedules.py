"""What a run changes by rule from step to step: the learning rate (warmup, then constant, linear or cosine
decay) and the adaptive KL coefficient β of Ziegler et al. (2019). Each against its formula, in the trainers (the
lr the optimizer used, β logged per step), and through a resume (the same numbers, bit-identical weights)."""

from __future__ import annotations

import math

import pytest
import torch
from _checkpoints import Interrupt, stop_after
from hypothesis import given
from hypothesis import strategies as st
from safetensors.torch import load_file

from minirlhf.tasks import arithmetic
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.run.checkpoint import list_checkpoints
from minirlhf.trainers.run.schedule import adaptive_kl_beta, scheduled_lr
from minirlhf.trainers.sft import SFTConfig, train_sft

QUIET = dict(seed=0, device="cpu", eval_every=0, progress=False)
ONLINE = dict(QUIET, prompts_per_step=2, group_size=4, max_new_tokens=4)
EXAMPLES = arithmetic.sft_examples()[:64]


# ----------------------------------------------------------------------------- the learning rate


@pytest.mark.parametrize(("schedule", "expected"), [
    # 10 steps, W = 4 of warmup: lr·1/4 .. lr, then 6 steps of decay from lr, p = 0, 1/6, .., 5/6
    ("constant", [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]),
    ("linear", [0.25, 0.5, 0.75, 1.0, 1.0, 5 / 6, 4 / 6, 3 / 6, 2 / 6, 1 / 6]),
    ("cosine", [0.25, 0.5, 0.75, 1.0] + [(1 + math.cos(math.pi * k / 6)) / 2 for k in range(6)]),
])
def test_the_learning_rate_warms_up_then_follows_its_schedule(schedule, expected):
    lrs = [scheduled_lr(t, 10, 2.0, schedule, warmup_steps=4) / 2.0 for t in range(len(expected))]
    assert lrs == pytest.approx(expected, abs=1e-12)


def test_without_warmup_the_first_step_runs_at_the_full_rate_and_the_decay_never_reaches_zero():
    for schedule in ("constant", "linear", "cosine"):
        assert scheduled_lr(0, 5, 1e-3, schedule) == 1e-3
        assert 0 < scheduled_lr(4, 5, 1e-3, schedule) <= 1e-3
    assert scheduled_lr(2, 4, 1e-3, "cosine") == pytest.approx(0.5e-3)  # half-way down the cosine


def test_the_optimizer_steps_with_the_scheduled_rate():
    """A first step of warmup (lr/W) moves the weights exactly as a constant run at lr/W does, and the history
    logs the schedule's lr at every step."""
    warm = train_sft(EXAMPLES, SFTConfig(**QUIET, steps=1, batch_size=4, lr=8e-3, warmup_steps=4))
    plain = train_sft(EXAMPLES, SFTConfig(**QUIET, steps=1, batch_size=4, lr=2e-3))
    assert all(torch.equal(a, b) for a, b in zip(warm[0].parameters(), plain[0].parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(warm[0].parameters(), train_sft(
        EXAMPLES, SFTConfig(**QUIET, steps=1, batch_size=4, lr=8e-3))[0].parameters()))

    history = train_sft(EXAMPLES, SFTConfig(**QUIET, steps=6, batch_size=4, lr_schedule="linear", warmup_steps=2))[2]
    assert history.column("lr")[1] == pytest.approx([scheduled_lr(t, 6, 2e-3, "linear", 2) for t in range(6)])



def _final_weights(out) -> dict[str, torch.Tensor]:
    return load_file(list_checkpoints(out)[-1] / "model.safetensors")


@pytest.mark.parametrize("method", ["sft-cosine", "grpo-adaptive-kl"])
def test_a_resumed_run_continues_the_schedule_and_beta_bit_identically(method, tmp_path):
    """A 5-step run with warmup and decay (GRPO: and the adaptive β), killed after step 2 (its checkpoint is at
    step 2) and resumed, logs the same lr, β and metrics as the run left alone, to bit-identical weights."""
    if method == "sft-cosine":
        def run(config, callbacks=()):
            return train_sft(EXAMPLES, config, callbacks=callbacks)[2]
        settings = dict(QUIET, model="tiny", batch_size=4, lr_schedule="cosine", warmup_steps=2)
        config_cls = SFTConfig
    else:
        def run(config, callbacks=()):
            return train_grpo(arithmetic.task(), config, callbacks=callbacks)[2]
        settings = dict(ONLINE, model="tiny-sft", beta=0.04, kl_target=0.01, kl_horizon=40.0,
                        lr_schedule="linear", warmup_steps=1)
        config_cls = GRPOConfig
    full = config_cls(**settings, steps=5, save_every=2, out_dir=str(tmp_path / "full"))
    expected = run(full)
    with pytest.raises(Interrupt):
        run(config_cls(**settings, steps=5, save_every=2, out_dir=str(tmp_path / "resumed")), [stop_after(2)])
    resumed = run(config_cls(**settings, steps=5, save_every=2, resume=str(tmp_path / "resumed")))
    assert resumed == expected
    assert len(set(expected.column("lr")[1])) > 2  # the lr did change
    if method == "grpo-adaptive-kl":
        assert len(set(expected.column("beta")[1])) == 5  # so did β, at every step
    a, b = _final_weights(tmp_path / "full"), _final_weights(tmp_path / "resumed")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ----------------------------------------------------------------------------- the adaptive KL controller


@pytest.mark.parametrize(("kl", "error"), [
    (6.0, 0.0),  # on target: β stays
    (6.6, 0.1),  # 10 % too much KL: β up by K_β · 0.1
    (5.4, -0.1),
    (60.0, 0.2),  # far too much: the error is clipped at +0.2
    (0.0, -0.2),  # none at all: clipped at -0.2
])
def test_adaptive_beta_follows_ziegler_et_als_update(kl, error):
    """β_{t+1} = β_t (1 + K_β e_t), e_t = clip((KL_t - KL_target) / KL_target, -0.2, 0.2), K_β = n / horizon."""
    beta, n, horizon = 0.1, 64, 10000.0
    assert adaptive_kl_beta(beta, kl, kl_target=6.0, n=n, horizon=horizon) == pytest.approx(
        beta * (1 + n / horizon * error), rel=1e-12)


def test_adaptive_beta_approaches_the_target_from_either_side():
    """A toy policy whose KL falls as β rises (KL = 1 / β): β settles where KL = KL_target, from above or below."""
    for beta in (0.01, 10.0):
        for _ in range(3000):
            beta = adaptive_kl_beta(beta, 1.0 / beta, kl_target=2.0, n=64, horizon=1000.0)
        assert beta == pytest.approx(0.5, rel=1e-3)


@pytest.mark.parametrize(("train", "config_cls"), [(train_grpo, GRPOConfig), (train_reinforce, ReinforceConfig),
                                                   (train_ppo, PPOConfig)])
def test_online_trainers_log_beta_and_move_it_by_the_batches_kl(train, config_cls):
    settings = dict(ONLINE, model="tiny-sft", steps=3, beta=0.05, kl_target=0.01, kl_horizon=20.0)
    if config_cls is PPOConfig:
        settings |= dict(group_size=1, prompts_per_step=8, minibatch_size=4)
    history = train(arithmetic.task(), config_cls(**settings))[2]
    betas, kls = history.column("beta")[1], history.column("kl_ref")[1]
    assert betas[0] == 0.05 and len(betas) == 3
    for t in range(2):  # β_{t+1} from β_t and the step's own KL
        assert betas[t + 1] == pytest.approx(adaptive_kl_beta(betas[t], kls[t], 0.01, 8, 20.0), rel=1e-12)
    fixed = train(arithmetic.task(), config_cls(**{k: v for k, v in settings.items()
                                                   if k not in ("kl_target", "kl_horizon")}))[2]
    assert fixed.column("beta")[1] == [0.05] * 3  # kl_target = None: β stays fixed


@pytest.mark.parametrize(("settings", "message"), [
    (dict(kl_target=1.0), r"kl_target=1.0 adapts β, which starts at beta = 0"),
    (dict(beta=0.1, kl_target=0.0), r"kl_target must be > 0, got 0.0"),
    (dict(beta=0.1, kl_horizon=500.0), r"kl_horizon=500.0 paces the adaptive KL controller, which is off"),
    (dict(warmup_steps=-1), r"warmup_steps must be >= 0, got -1"),
    (dict(lr_schedule="step"), r"lr_schedule must be one of: constant, linear, cosine; got 'step'"),
])
def test_schedule_settings_that_cannot_work_are_refused_naming_the_field(settings, message):
    with pytest.raises(ValueError, match=r"GRPOConfig\." + message):
        GRPOConfig(**settings)


@given(st.integers(1, 8), st.integers(2, 8), st.floats(1e-6, 100.0), st.floats(0.0, 1e6), st.floats(1e-3, 10.0))
def test_every_accepted_horizon_keeps_beta_positive(prompts, group, horizon, kl, kl_target):
    """A config the door lets through never moves β to 0 or below, whatever the batch's KL; one that could is
    refused naming kl_horizon."""
    settings = dict(prompts_per_step=prompts, group_size=group, beta=0.04, kl_target=kl_target, kl_horizon=horizon)
    try:
        config = GRPOConfig(**settings)
    except ValueError as err:
        assert "kl_horizon" in str(err) and horizon <= 0.2 * prompts * group
        return
    assert adaptive_kl_beta(config.beta, kl, kl_target, config.batch_size, horizon) > 0
