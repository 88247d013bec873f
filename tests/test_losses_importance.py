"""Three policies (minirlhf.losses.importance): the sampler μ's importance weight p_θold/μ, truncated or masked at
a cap, by hand and as properties (cap respected, mask zeroes, identity when μ = p_θold, no gradient, padding never
changes anything); the sampler's own log-probs; the GRPO config, trainer and CLI fields that reach it.

TRL 1.16's vllm_importance_sampling_mode is cross-checked in benchmarks/trl_grpo.py (tests/test_benchmarks_trl.py).
"""

from __future__ import annotations

import argparse
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from minirlhf.cli import add_config_arguments, config_from_args
from minirlhf.losses import BEHAVIOUR_CORRECTIONS, behaviour_metrics, behaviour_weight, grpo_loss
from minirlhf.sampling import sample
from minirlhf.trainers.grpo import GRPOConfig, train_grpo

F64 = torch.float64
CORRECTIONS = [c for c in BEHAVIOUR_CORRECTIONS if c != "none"]
TINY = dict(model="tiny-sft", device="cpu", steps=2, prompts_per_step=2, group_size=4, max_new_tokens=4,
            eval_every=0, progress=False)


def _batch(seed: int, spread: float = 0.8, B: int = 6, T: int = 5):
    """Ragged right-padded rows (one of them empty), log p_θold and a sampler log μ `spread` away from it."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    old = -torch.rand(B, T, generator=g, dtype=F64) * 3
    behaviour = old + spread * torch.randn(B, T, generator=g, dtype=F64)
    return old, behaviour, mask


# ----------------------------------------------------------------------------- by hand


def test_the_four_weights_by_hand():
    """ρ_t = e^{log p_θold - log μ}: 2, 4, 1/2 on one answer of three tokens (ρ_i = 4), C = 3."""
    old = torch.log(torch.tensor([[0.4, 0.8, 0.1]], dtype=F64))
    behaviour = torch.log(torch.tensor([[0.2, 0.2, 0.2]], dtype=F64))
    mask = torch.ones(1, 3)
    expected = {"token-truncate": [2.0, 3.0, 0.5], "token-mask": [2.0, 0.0, 0.5],
                "sequence-truncate": [3.0, 3.0, 3.0], "sequence-mask": [0.0, 0.0, 0.0], "none": [1.0, 1.0, 1.0]}
    for correction, want in expected.items():
        got = behaviour_weight(old, behaviour, mask, correction, cap=3.0)
        assert torch.allclose(got, torch.tensor([want], dtype=F64)), correction
    assert torch.allclose(behaviour_weight(old, behaviour, mask, "sequence-mask", cap=5.0), torch.full((1, 3), 4.0,
                                                                                                       dtype=F64))


def test_the_metrics_by_hand():
    old = torch.log(torch.tensor([[0.4, 0.8, 0.1]]))
    behaviour = torch.log(torch.tensor([[0.2, 0.2, 0.2]]))
    stats = behaviour_metrics(old, behaviour, torch.ones(1, 3), "token-truncate", cap=3.0)
    assert stats["sampler/logp_diff"] == pytest.approx(math.log(2) * 4 / 3)  # |log 2| + |log 4| + |log 1/2|
    assert stats["sampler/logp_diff_max"] == pytest.approx(math.log(4))
    assert stats["sampler/rho_mean"] == pytest.approx((2 + 4 + 0.5) / 3)
    assert stats["sampler/capped_frac"] == pytest.approx(1 / 3)
    sequence = behaviour_metrics(old, behaviour, torch.ones(1, 3), "sequence-mask", cap=3.0)
    assert sequence["sampler/rho_mean"] == pytest.approx(4.0) and sequence["sampler/capped_frac"] == 1.0


# ----------------------------------------------------------------------------- properties


@given(seed=st.integers(0, 10_000), cap=st.floats(1.0, 10.0), spread=st.floats(0.0, 3.0))
def test_the_cap_is_respected_and_masking_zeroes(seed, cap, spread):
    """Truncation: w = min(ρ, C) ≤ C. Masking: w = ρ where ρ ≤ C, else exactly 0. Padding: w = 0."""
    old, behaviour, mask = _batch(seed, spread)
    real = mask.bool()
    token_rho = torch.exp(old - behaviour)
    sequence_rho = torch.exp(((old - behaviour) * mask).sum(-1, keepdim=True)).expand_as(old)
    for correction in CORRECTIONS:
        weight = behaviour_weight(old, behaviour, mask, correction, cap)
        rho = sequence_rho if correction.startswith("sequence") else token_rho
        assert (weight[~real] == 0).all()
        assert (weight[real] <= cap).all() and (weight[real] >= 0).all()
        if correction.endswith("truncate"):
            assert torch.allclose(weight[real], rho[real].clamp(max=cap))
        else:
            assert (weight[real & (rho > cap)] == 0).all()
            assert torch.allclose(weight[real & (rho <= cap)], rho[real & (rho <= cap)])


@given(seed=st.integers(0, 10_000), cap=st.floats(1.0, 10.0))
def test_identity_when_the_sampler_is_the_policy(seed, cap):
    """μ = p_θold: ρ = 1, so every correction with C ≥ 1 gives w = 1 and the loss of no correction, bit for bit."""
    old, _, mask = _batch(seed)
    logp = old + 0.3 * torch.randn_like(old)
    advantages = torch.randn(old.shape[0], dtype=F64)
    plain, _ = grpo_loss(logp, old, None, advantages, mask, eps=0.2, beta=0.0)
    for correction in CORRECTIONS:
        assert torch.equal(behaviour_weight(old, old.clone(), mask, correction, cap), mask.to(F64))
        corrected, _ = grpo_loss(logp, old, None, advantages, mask, eps=0.2, beta=0.0, behaviour_logp=old.clone(),
                                 behaviour_correction=correction, behaviour_cap=cap)
        assert torch.equal(corrected, plain), correction


def test_the_weight_carries_no_gradient():
    """w is a constant of the step: no gradient into p_θold or μ, and ∂L/∂log p_θ is the clip's, scaled by w."""
    old, behaviour, mask = _batch(0)
    old.requires_grad_(True)
    behaviour.requires_grad_(True)
    for correction in CORRECTIONS:
        assert not behaviour_weight(old, behaviour, mask, correction).requires_grad
    logp = old.detach().clone().requires_grad_(True)  # r = 1: no clipping, ∂ℓ_t/∂log p_θ = -w_t Â / |y|
    advantages = torch.randn(old.shape[0], dtype=F64)
    loss, _ = grpo_loss(logp, old.detach(), None, advantages, mask, eps=0.2, beta=0.0, aggregation="seq-sum",
                        behaviour_logp=behaviour, behaviour_correction="token-truncate")
    loss.backward()
    assert behaviour.grad is None
    weight = behaviour_weight(old, behaviour, mask, "token-truncate")
    assert torch.allclose(logp.grad, -weight * advantages[:, None] / mask.shape[0])


@pytest.mark.parametrize("correction", CORRECTIONS)
def test_padding_never_changes_anything(correction):
    """Garbage (inf, NaN, huge) in the padded entries of p_θold and μ changes neither the weight nor the loss."""
    old, behaviour, mask = _batch(3)
    logp = old + 0.3 * torch.randn_like(old)
    advantages = torch.randn(old.shape[0], dtype=F64)
    pad = ~mask.bool()
    assert pad.any()
    dirty_old = torch.where(pad, torch.full_like(old, float("nan")), old)
    dirty_behaviour = torch.where(pad, torch.full_like(old, -1e30), behaviour)
    assert torch.equal(behaviour_weight(dirty_old, dirty_behaviour, mask, correction),
                       behaviour_weight(old, behaviour, mask, correction))
    kwargs = dict(eps=0.2, beta=0.0, behaviour_correction=correction)
    clean, _ = grpo_loss(logp, old, None, advantages, mask, behaviour_logp=behaviour, **kwargs)
    dirty, _ = grpo_loss(logp, dirty_old, None, advantages, mask, behaviour_logp=dirty_behaviour, **kwargs)
    assert torch.equal(clean, dirty)


def test_correcting_changes_the_loss_when_the_sampler_differs():
    old, behaviour, mask = _batch(1, spread=1.5)
    logp, advantages = old + 0.1, torch.randn(old.shape[0], dtype=F64)
    plain, _ = grpo_loss(logp, old, None, advantages, mask, eps=0.2, beta=0.0)
    for correction in CORRECTIONS:
        corrected, _ = grpo_loss(logp, old, None, advantages, mask, eps=0.2, beta=0.0, behaviour_logp=behaviour,
                                 behaviour_correction=correction)
        assert not torch.allclose(corrected, plain), correction


@pytest.mark.parametrize("kwargs, match", [
    (dict(behaviour_correction="token-clip"), "behaviour_correction must be one of"),
    (dict(behaviour_correction="token-mask", behaviour_cap=0.0), "behaviour_cap must be > 0"),
    (dict(behaviour_correction="token-mask", behaviour_cap=0.5), "behaviour_cap must be ≥ 1, got 0.5"),
    (dict(behaviour_correction="token-truncate", behaviour_cap=0.999), "behaviour_cap must be ≥ 1, got 0.999"),
    (dict(behaviour_correction="token-mask", behaviour_cap=float("nan")), "behaviour_cap must be > 0"),
    (dict(behaviour_correction="sequence-mask"), "give behaviour_logp"),
])
def test_bad_arguments_are_named(kwargs, match):
    old, _, mask = _batch(0)
    with pytest.raises(ValueError, match=match):
        grpo_loss(old, old, None, torch.zeros(old.shape[0]), mask, eps=0.2, beta=0.0, **kwargs)


def test_inf_on_a_real_token_of_the_sampler_is_named():
    old, behaviour, mask = _batch(0)
    behaviour[0, 0] = float("inf")
    with pytest.raises(ValueError, match="behaviour_logp holds 1 inf/NaN"):
        behaviour_weight(old, behaviour, mask, "token-mask")


# ----------------------------------------------------------------------------- the sampler's own log-probs


def test_the_sampler_records_what_it_drew_from(tiny):
    """Unfiltered, log μ = log p_θold exactly; with top-p, μ is renormalised over the kept tokens: log μ ≥ log p."""
    model, tokenizer = tiny
    plain = sample(model, tokenizer, ["1+1="], group_size=4, max_new_tokens=5,
                   generator=torch.Generator().manual_seed(0))
    assert torch.equal(plain.sampler_logprobs, plain.logprobs)
    top_p = sample(model, tokenizer, ["1+1="], group_size=4, max_new_tokens=5, top_p=0.5,
                   generator=torch.Generator().manual_seed(0))
    real = top_p.response_mask.bool()
    assert (top_p.sampler_logprobs[real] >= top_p.logprobs[real] - 1e-6).all()
    assert (top_p.sampler_logprobs[~real] == 0).all()


# ----------------------------------------------------------------------------- config, CLI, trainer


@pytest.mark.parametrize("fields, match", [
    ({"behaviour_correction": "tis"}, "GRPOConfig.behaviour_correction must be one of: none, token-truncate"),
    ({"behaviour_correction": "token-mask", "behaviour_cap": 0.0}, "GRPOConfig.behaviour_cap must be > 0.*got 0.0"),
    ({"behaviour_correction": "token-mask", "behaviour_cap": -1.0}, "GRPOConfig.behaviour_cap must be > 0.*got -1.0"),
    ({"behaviour_cap": 2.0}, "GRPOConfig.behaviour_cap=2.0 caps the sampler's importance weight, which is off"),
    ({"sampling_precision": "int8"}, "GRPOConfig.sampling_precision must be one of: same, bf16, fp16"),
])
def test_bad_fields_name_the_field_and_value(fields, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**fields)


def test_cli_flags_map_onto_the_fields():
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, GRPOConfig)
    args = parser.parse_args(["--behaviour-correction", "sequence-mask", "--behaviour-cap", "2.5",
                              "--sampling-precision", "bf16"])
    config = config_from_args(GRPOConfig, args)
    assert (config.behaviour_correction, config.behaviour_cap, config.sampling_precision) == (
        "sequence-mask", 2.5, "bf16")
    assert "token-truncate" in parser.format_help()
    with pytest.raises(SystemExit):
        parser.parse_args(["--behaviour-cap", "none"])


def test_defaults_log_no_sampler_metrics_and_a_mismatch_logs_them(monkeypatch):
    """The default run has no sampler/* metrics; a top-p sampler with a correction logs them, and the trainer hands
    grpo_loss the sampler's log-probs and the config's correction."""
    import minirlhf.trainers.grpo as grpo_trainer

    seen = []

    def spy(*args, **kwargs):
        seen.append((kwargs["behaviour_correction"], kwargs["behaviour_cap"], kwargs["behaviour_logp"]))
        return grpo_loss(*args, **kwargs)

    monkeypatch.setattr(grpo_trainer, "grpo_loss", spy)
    plain = train_grpo(None, GRPOConfig(**TINY))[2]
    assert not any(key.startswith("sampler/") for row in plain for key in row)
    assert seen[-1][0] == "none"
    history = train_grpo(None, GRPOConfig(top_p=0.8, behaviour_correction="token-mask", behaviour_cap=2.0, **TINY))[2]
    row = history[-1]
    assert {"sampler/logp_diff", "sampler/logp_diff_max", "sampler/rho_mean", "sampler/capped_frac"} <= row.keys()
    assert row["sampler/logp_diff"] > 0 and row["sampler/rho_mean"] <= 1  # top-p: μ ≥ p_θold on what it drew
    assert seen[-1][:2] == ("token-mask", 2.0) and seen[-1][2] is not None


def test_half_precision_sampling_recomputes_p_old_at_the_runs_precision():
    """bf16 sampling: log μ comes from bf16 forwards, log p_θold from the run's float32 one, so they differ a little
    on every answer; the run trains and logs the gap."""
    history = train_grpo(None, GRPOConfig(sampling_precision="bf16", behaviour_correction="sequence-truncate",
                                          **TINY))[2]
    row = history[-1]
    assert 0 < row["sampler/logp_diff"] < 0.5 and math.isfinite(row["loss"])


@pytest.mark.skipif(torch.cuda.is_available(), reason="fp16 sampling runs on CUDA")
def test_fp16_sampling_on_cpu_is_refused_before_a_model_is_loaded(monkeypatch, tmp_path):
    """fp16 needs CUDA: the run says so naming the field and what to give instead ('fp32' is no sampling_precision),
    before p_θ is loaded or a step runs (it once failed inside the first rollout, advising 'fp32')."""
    import minirlhf.trainers.online as online

    def never(*args, **kwargs):
        raise AssertionError("the model was loaded before the precision was checked")

    monkeypatch.setattr(online, "setup_policy", never)
    config = GRPOConfig(**{**TINY, "sampling_precision": "fp16", "device": "cpu"})
    with pytest.raises(ValueError, match=r"sampling_precision='fp16' cannot run on cpu .*give 'same' or 'bf16'"):
        train_grpo(None, config)


def test_sequence_rho_mean_of_a_long_answer_is_logged_finite():
    """Σ_t log ρ = 200 over 400 tokens: ρ_i = e^200 overflows float32 (the row was logged inf, stored as null);
    the weight is capped either way, and the metric is now finite."""
    old = torch.full((2, 400), -0.1)
    mask = torch.ones(2, 400)
    stats = behaviour_metrics(old, old - 0.5, mask, "sequence-truncate", 3.0)
    assert math.isfinite(stats["sampler/rho_mean"]) and stats["sampler/capped_frac"] == 1.0
    assert behaviour_weight(old, old - 0.5, mask, "sequence-truncate", 3.0).eq(3.0).all()


@pytest.mark.parametrize("lag", [1, 2])
def test_a_lagging_sampler_samples_from_the_weights_of_lag_steps_before(monkeypatch, lag):
    """sampler_lag = L: step k samples from θ as it was at the start of step max(0, k − L), log p_θold is recomputed
    with the current weights (so it differs from log μ once θ has moved), and the run logs the gap."""
    import minirlhf.trainers.online as online

    sampled_with, started_with = [], []

    def flat(model) -> torch.Tensor:
        return torch.cat([p.detach().flatten().clone() for p in model.parameters()])

    real_sample, real_collect = online.sample, online.OnlineRun.collect

    def spy_sample(model, *args, **kwargs):
        sampled_with.append(flat(model))
        return real_sample(model, *args, **kwargs)

    def spy_collect(self):
        started_with.append(flat(self.model))
        return real_collect(self)

    monkeypatch.setattr(online, "sample", spy_sample)
    monkeypatch.setattr(online.OnlineRun, "collect", spy_collect)
    history = train_grpo(None, GRPOConfig(**(TINY | {"steps": 5, "lr": 1e-2}), sampler_lag=lag))[2]
    assert len(sampled_with) == len(started_with) == 5
    for step in range(5):
        assert torch.equal(sampled_with[step], started_with[max(0, step - lag)]), step
    assert not torch.equal(started_with[lag], started_with[0])  # θ moved, so the lag is a real mismatch
    # step 0: μ and p_θold are both the start (equal up to float rounding: a cached decode against one forward);
    # later, log μ comes from the stale weights and log p_θold from the current ones
    assert history[0]["sampler/logp_diff"] < 1e-5 < history[-1]["sampler/logp_diff"]


@pytest.mark.parametrize("lag", [-1, 9, 1.5])
def test_a_sampler_lag_out_of_range_is_refused(lag):
    with pytest.raises(ValueError, match="GRPOConfig.sampler_lag"):
        GRPOConfig(**TINY, sampler_lag=lag)


def test_a_resume_without_lag_keeps_no_stale_weights(monkeypatch, tmp_path):
    """A checkpoint of a lagging run holds its window of past weights; resumed with sampler_lag = 0 (a warned
    change of settings), the run samples on-policy and keeps none of them in memory (was: one stale copy)."""
    import minirlhf.trainers.online as online

    windows, real_collect = [], online.OnlineRun.collect

    def spy_collect(self):
        windows.append((self.sampler, len(self.past_weights)))
        return real_collect(self)

    out = str(tmp_path / "run")
    train_grpo(None, GRPOConfig(**TINY, sampler_lag=2, save_every=1, out_dir=out))
    monkeypatch.setattr(online.OnlineRun, "collect", spy_collect)
    with pytest.warns(UserWarning, match="sampler_lag: 2 -> 0"):
        train_grpo(None, GRPOConfig(**(TINY | {"steps": 3}), sampler_lag=0, resume=out))
    assert windows == [(None, 0)]


def test_the_lagging_samplers_copy_of_tied_weights_is_one_copy():
    """weights_of, the window's copy of θ: tiny-sft ties its embedding and LM head (two names of one tensor); the
    copy keeps them one tensor, as many numbers as the model has parameters (was: the embedding cloned twice)."""
    from minirlhf.trainers.online import weights_of
    from minirlhf.trainers.run import load_policy

    model, _ = load_policy(GRPOConfig(**TINY))
    copy = weights_of(model)
    distinct = {tensor.data_ptr(): tensor for tensor in copy.values()}
    assert sum(t.numel() for t in distinct.values()) == sum(p.numel() for p in model.parameters())
    assert copy.keys() == model.state_dict().keys()
    model.load_state_dict(copy)  # still loads back
    assert all(torch.equal(copy[name], tensor) for name, tensor in model.state_dict().items())


@pytest.mark.parametrize("method", ["ppo", "reinforce"])
def test_ppo_and_reinforce_log_how_far_a_lagging_sampler_was(method):
    """PPO and REINFORCE have no correction for a sampler μ that is not p_θold, but they sample from it all the
    same (sampler_lag, top-p, bf16): each step logs the gap |log p_θold − log μ| as GRPO does (was: nothing)."""
    from minirlhf.trainers.ppo import PPOConfig, train_ppo
    from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce

    config_cls, train = {"ppo": (PPOConfig, train_ppo), "reinforce": (ReinforceConfig, train_reinforce)}[method]
    config = config_cls(**(TINY | {"steps": 3, "lr": 1e-2}), minibatch_size=8, sampler_lag=1)
    history = [row for row in train(None, config)[2] if "loss" in row]
    assert len(history) == 3
    assert history[0]["sampler/logp_diff"] < 1e-5 < history[-1]["sampler/logp_diff"]


@pytest.mark.parametrize("lag", [1, 2])
def test_a_lagging_sampler_keeps_lag_copies_beside_its_own(monkeypatch, lag):
    """sampler_lag = L: the sampler's weights and the L steps after them, L + 1 copies of θ in all, one per step
    of lag beside the sampler itself (was L + 2: the window also held a copy of the sampler's weights)."""
    import minirlhf.trainers.online as online

    copies, real_collect = [], online.OnlineRun.collect

    def spy_collect(self):
        copies.append(1 + len(self.past_weights))  # the sampler, and the dicts of weights waiting for it
        return real_collect(self)

    monkeypatch.setattr(online.OnlineRun, "collect", spy_collect)
    train_grpo(None, GRPOConfig(**(TINY | {"steps": lag + 3}), sampler_lag=lag))
    assert max(copies) == lag + 1
