"""Entropy control (minirlhf.losses.entropy): the entropy bonus, Clip-Cov and KL-Cov against verl's code as written
(TRL has no covariance losses; its entropy bonus is cross-checked in benchmarks/trl_grpo.py), their properties
(coefficient 0, the share acted on, no gradient through Clip-Cov's tokens, KL-Cov's penalty on its tokens only,
padding), the config's checks, the command line, and the trainer (logs, resume bit-identical).
"""

from __future__ import annotations

import argparse

import pytest
import torch

import minirlhf.trainers.grpo as grpo_trainer
from minirlhf.cli import add_config_arguments, config_from_args
from minirlhf.logprobs import entropy_from_logits, response_logprobs
from minirlhf.losses import (
    clip_cov_per_token_loss,
    clip_cov_selection,
    clipped_surrogate,
    covariance_share,
    entropy_bonus,
    grpo_loss,
    kl_cov_per_token_loss,
    kl_cov_selection,
    token_covariance,
)
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo

F64 = torch.float64
EPS, EPS_HIGH = 0.2, 0.28
TINY = dict(steps=2, prompts_per_step=2, group_size=4, max_new_tokens=4, eval_every=0, progress=False)


def _batch(seed: int = 0, B: int = 8, T: int = 7):
    """Off-policy log-probs (ratios away from 1, so the clip and |log r| act), advantages large enough that many
    covariances fall in Clip-Cov's default (1, 5), right-padded rows of 1..T tokens, garbage on padding."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    lengths[0] = T
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F64)
    logp = -4 * torch.rand(B, T, generator=g, dtype=F64)
    old = logp + 0.3 * torch.randn(B, T, generator=g, dtype=F64)
    advantages = 2 * torch.randn(B, generator=g, dtype=F64)
    padding = ~mask.bool()
    logp, old = logp.masked_fill(padding, float("nan")), old.masked_fill(padding, float("inf"))
    return logp, old, advantages, mask


# ----------------------------------------------------------------------------- verl's code as written


def verl_clip_cov(old_log_prob, log_prob, advantages, response_mask, cliprange_low, cliprange_high,
                  clip_cov_ratio, clip_cov_lb, clip_cov_ub):
    """verl's compute_policy_loss_clip_cov (volcengine/verl b178a3cd, verl/trainer/ppo/core_algos.py,
    policy_loss.loss_mode="clip_cov"), its metrics and rollout weights left out, token-mean; advantages (B, T).
    Its draw is torch.randperm on torch's global generator."""
    ratio = torch.exp(log_prob - old_log_prob)
    pg_losses1 = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1 - cliprange_low, 1 + cliprange_high)
    clip_by_origin = (pg_losses2 > pg_losses1) & (response_mask > 0)
    mean_adv = (advantages * response_mask).sum() / response_mask.sum()
    mean_logp = (log_prob.detach() * response_mask).sum() / response_mask.sum()
    cov_all = (advantages - mean_adv) * (log_prob - mean_logp)
    cov_all[response_mask == 0] = -torch.inf
    cov_all[clip_by_origin] = -torch.inf
    clip_num = max(int(clip_cov_ratio * response_mask.sum().item()), 1)
    top_k_idx = torch.nonzero((cov_all < clip_cov_ub) & (cov_all > clip_cov_lb) & (response_mask > 0))
    if len(top_k_idx) > 0:
        top_k_idx = top_k_idx[torch.randperm(len(top_k_idx))[: min(clip_num, len(top_k_idx))]]
    corr = torch.ones_like(advantages)
    corr[top_k_idx[:, 0], top_k_idx[:, 1]] = 0
    pg_losses = torch.maximum(pg_losses1, pg_losses2) * corr
    return (pg_losses * response_mask).sum() / response_mask.sum()


def verl_kl_cov(old_log_prob, log_prob, advantages, response_mask, kl_cov_ratio, ppo_kl_coef):
    """verl's compute_policy_loss_kl_cov (same commit, loss_mode="kl_cov"), metrics left out, token-mean."""
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    pg_losses = -advantages * ratio
    pg_losses_kl = -advantages * ratio + ppo_kl_coef * negative_approx_kl.abs()
    valid = response_mask > 0
    valid_idx = torch.nonzero(valid.reshape(-1), as_tuple=True)[0]
    adv, logp = advantages[valid].detach().reshape(-1), log_prob[valid].detach().reshape(-1)
    cov = (adv - adv.mean()) * (logp - logp.mean())
    large = valid_idx[torch.topk(cov, max(1, int(len(cov) * kl_cov_ratio)), largest=True).indices]
    T = advantages.shape[1]
    pg_losses[large // T, large % T] = pg_losses_kl[large // T, large % T]
    return (pg_losses * response_mask).sum() / response_mask.sum()


def _clean(logp, old, mask):
    """verl multiplies padding by the mask: give it finite padding."""
    keep = mask.bool()
    return torch.where(keep, logp, torch.zeros_like(logp)), torch.where(keep, old, torch.zeros_like(old))


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cov_ratio, lb, ub", [(0.1, 1.0, 5.0), (0.05, 0.2, 3.0), (2e-4, 1.0, 5.0)])
def test_clip_cov_matches_verl(seed, cov_ratio, lb, ub):
    """grpo_loss(policy_loss="clip-cov", "token-mean") against verl's clip_cov: the same tokens drawn (both call
    torch.randperm once on the global generator, over the candidates in row-major order), loss and gradient to
    1e-6 (float64: they agree to ~1e-16)."""
    logp, old, advantages, mask = _batch(seed)
    logp, old = _clean(logp, old, mask)
    ours_logp, verl_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    torch.manual_seed(seed)
    loss, stats = grpo_loss(ours_logp, old, None, advantages, mask, EPS, 0.0, "token-mean", eps_high=EPS_HIGH,
                            policy_loss="clip-cov", cov_ratio=cov_ratio, clip_cov_lb=lb, clip_cov_ub=ub)
    torch.manual_seed(seed)
    verl = verl_clip_cov(old, verl_logp, advantages[:, None] * mask, mask, EPS, EPS_HIGH, cov_ratio, lb, ub)
    assert abs(loss.item() - verl.item()) <= 1e-6
    assert (torch.autograd.grad(loss, ours_logp)[0] - torch.autograd.grad(verl, verl_logp)[0]).abs().max() <= 1e-6
    assert stats["cov_frac"] > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cov_ratio, coef", [(0.1, 1.0), (0.3, 0.5), (2e-4, 1.0)])
def test_kl_cov_matches_verl(seed, cov_ratio, coef):
    """grpo_loss(policy_loss="kl-cov", "token-mean") against verl's kl_cov: loss and gradient to 1e-6."""
    logp, old, advantages, mask = _batch(seed)
    logp, old = _clean(logp, old, mask)
    ours_logp, verl_logp = logp.clone().requires_grad_(True), logp.clone().requires_grad_(True)
    loss, stats = grpo_loss(ours_logp, old, None, advantages, mask, EPS, 0.0, "token-mean", policy_loss="kl-cov",
                            cov_ratio=cov_ratio, kl_cov_coef=coef)
    verl = verl_kl_cov(old, verl_logp, advantages[:, None] * mask, mask, cov_ratio, coef)
    assert abs(loss.item() - verl.item()) <= 1e-6
    assert (torch.autograd.grad(loss, ours_logp)[0] - torch.autograd.grad(verl, verl_logp)[0]).abs().max() <= 1e-6
    assert stats["cov_frac"] == max(int(cov_ratio * mask.sum().item()), 1) / mask.sum().item()
    assert stats["clip_frac"] == 0.0  # KL-Cov has no clip


def verl_entropy_loss(entropy, response_mask):
    """verl's agg_loss of the entropy, "seq-mean-token-mean" (the actor subtracts entropy_coeff times it)."""
    per_row = (entropy * response_mask).sum(-1) / (response_mask.sum(-1) + 1e-8)
    return per_row.sum() / (response_mask.sum(-1) > 0).sum()


def test_entropy_bonus_matches_verl_and_trl_definitions():
    """seq-mean: verl's agg_loss (its 1e-8 moves it by ~1e-9); token-mean: TRL's (H·M).sum() / M.sum()."""
    _, _, _, mask = _batch(3)
    entropy = torch.rand(mask.shape, generator=torch.Generator().manual_seed(3), dtype=F64)
    assert abs(entropy_bonus(entropy, mask, 0.01, "seq-mean").item()
               + 0.01 * verl_entropy_loss(entropy, mask).item()) <= 1e-6
    trl = (entropy * mask).sum() / mask.sum().clamp(min=1.0)
    assert entropy_bonus(entropy, mask, 0.01, "token-mean").item() == pytest.approx(-0.01 * trl.item(), abs=1e-12)


# ----------------------------------------------------------------------------- properties


def test_entropy_bonus_of_coefficient_zero_is_exactly_zero_with_no_gradient():
    _, _, _, mask = _batch()
    entropy = torch.rand(mask.shape, dtype=F64, requires_grad=True)
    bonus = entropy_bonus(entropy, mask, 0.0)
    assert bonus.item() == 0.0
    assert torch.autograd.grad(bonus, entropy)[0].abs().max().item() == 0.0


def test_entropy_bonus_step_raises_the_entropy():
    """A gradient step on -c·H of real logits raises H: the bonus pushes towards spread."""
    logits = torch.randn(6, 5, 11, generator=torch.Generator().manual_seed(0), dtype=F64) * 3
    logits.requires_grad_(True)
    mask = torch.ones(6, 5, dtype=F64)
    before = entropy_from_logits(logits).mean().item()
    (grad,) = torch.autograd.grad(entropy_bonus(entropy_from_logits(logits), mask, 1.0), logits)
    after = entropy_from_logits(logits.detach() - 0.5 * grad).mean().item()
    assert after > before


def test_response_logprobs_gives_the_entropy_a_gradient_only_when_asked(tiny):
    model, tokenizer = tiny
    ids = torch.tensor([tokenizer("The film was good and")["input_ids"]])
    attention = torch.ones_like(ids)
    response = torch.zeros_like(ids)
    response[:, 2:] = 1
    _, measured = response_logprobs(model, ids, attention, response, return_entropy=True)
    logp, entropy = response_logprobs(model, ids, attention, response, return_entropy=True, entropy_grad=True)
    assert measured.grad_fn is None and entropy.grad_fn is not None
    torch.testing.assert_close(entropy.detach(), measured)
    (entropy * response).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


@pytest.mark.parametrize("cov_ratio", [0.05, 0.2, 0.5])
def test_the_share_acted_on_is_the_ratio(cov_ratio):
    """With every token a candidate (bounds wide, no clip active), Clip-Cov draws max(⌊r N⌋, 1) tokens; KL-Cov
    penalises that many, the ones of largest covariance."""
    logp, old, advantages, mask = _batch(1)
    old = logp.clone()  # on-policy: r = 1, PPO's clip never active
    N = int(mask.sum())
    n = max(int(cov_ratio * N), 1)
    drawn = clip_cov_selection(logp, old, advantages, mask, EPS, cov_ratio=cov_ratio, clip_cov_lb=-1e9,
                               clip_cov_ub=1e9, generator=torch.Generator().manual_seed(0))
    largest = kl_cov_selection(logp, advantages, mask, cov_ratio=cov_ratio)
    assert int(drawn.sum()) == int(largest.sum()) == n
    cov = token_covariance(logp, advantages, mask)
    assert cov[largest].min() >= cov[mask.bool() & ~largest].max()
    assert covariance_share("kl-cov", logp, old, advantages, mask, EPS, cov_ratio=cov_ratio) == n / N
    assert covariance_share("clip-cov", logp, old, advantages, mask, EPS, cov_ratio=cov_ratio, clip_cov_lb=-1e9,
                            clip_cov_ub=1e9) == n / N


def test_clip_cov_draws_only_unclipped_tokens_inside_the_bounds_and_cuts_their_gradient():
    logp, old, advantages, mask = _batch(2)
    x = logp.clone().requires_grad_(True)
    loss = clip_cov_per_token_loss(x, old, advantages, mask, EPS, EPS_HIGH, cov_ratio=0.2,
                                   generator=torch.Generator().manual_seed(0))
    drawn = clip_cov_selection(logp, old, advantages, mask, EPS, EPS_HIGH, cov_ratio=0.2,
                               generator=torch.Generator().manual_seed(0))  # the same seed draws the same tokens
    assert drawn.any() and not (drawn & ~mask.bool()).any()
    clean_logp, clean_old = _clean(logp, old, mask)
    A = advantages[:, None].expand_as(mask)
    ratio = torch.exp(clean_logp - clean_old)
    cov = token_covariance(clean_logp, advantages, mask)
    assert ((cov[drawn] > 1) & (cov[drawn] < 5)).all()
    assert (torch.clamp(ratio, 1 - EPS, 1 + EPS_HIGH) * A >= ratio * A)[drawn].all()  # PPO's clip not active there
    (grad,) = torch.autograd.grad(loss.sum(), x)
    assert (loss[drawn] == 0).all() and (grad[drawn] == 0).all() and (grad[~mask.bool()] == 0).all()
    y = clean_logp.clone().requires_grad_(True)
    ppo = -clipped_surrogate(torch.exp(y - clean_old), A, EPS, EPS_HIGH)  # PPO's ℓ_t everywhere else
    (ppo_grad,) = torch.autograd.grad((ppo * mask).sum(), y)
    keep = mask.bool() & ~drawn
    torch.testing.assert_close(loss[keep], ppo[keep].detach())
    torch.testing.assert_close(grad[keep], ppo_grad[keep])


def test_kl_cov_adds_the_penalty_on_its_tokens_only():
    logp, old, advantages, mask = _batch(4)
    loss = kl_cov_per_token_loss(logp, old, advantages, mask, cov_ratio=0.2, kl_cov_coef=0.7)
    chosen = kl_cov_selection(logp, advantages, mask, cov_ratio=0.2)
    clean_logp, clean_old = _clean(logp, old, mask)
    plain = -torch.exp(clean_logp - clean_old) * advantages[:, None]  # -r Â, no clip
    extra = (loss - plain) * mask
    torch.testing.assert_close(extra[chosen], 0.7 * (clean_logp - clean_old).abs()[chosen])
    assert (extra[~chosen] == 0).all() and chosen.any()


def test_kl_cov_on_policy_is_the_plain_policy_gradient():
    """r = 1: |log r| = 0 with gradient 0, so KL-Cov's first update of a batch is REINFORCE's -r Â."""
    logp, _, advantages, mask = _batch(5)
    logp, _ = _clean(logp, logp, mask)
    x = logp.clone().requires_grad_(True)
    loss = kl_cov_per_token_loss(x, logp, advantages, mask, cov_ratio=0.3)
    chosen = kl_cov_selection(logp, advantages, mask, cov_ratio=0.3)
    (grad,) = torch.autograd.grad(loss.sum(), x)
    torch.testing.assert_close(grad, -advantages[:, None] * mask)
    assert chosen.any()


@pytest.mark.parametrize("policy_loss", ["clip-cov", "kl-cov"])
@pytest.mark.parametrize("aggregation", ["token-mean", "seq-mean", "seq-sum"])
def test_padding_never_changes_a_result(policy_loss, aggregation):
    """Three more padding columns of garbage: the same loss, gradient on the real tokens, tokens acted on (Clip-Cov
    draws the same ones from the same seed) and logs."""
    logp, old, advantages, mask = _batch(6)
    wide = [torch.cat([t, torch.full((t.shape[0], 3), fill, dtype=F64)], dim=1)
            for t, fill in ((logp, float("nan")), (old, 7.0), (mask, 0.0))]
    results = []
    for lp, o, m in ((logp, old, mask), tuple(wide)):
        x = lp.clone().requires_grad_(True)
        options = dict(cov_ratio=0.2, clip_cov_lb=0.5, generator=torch.Generator().manual_seed(0)) \
            if policy_loss == "clip-cov" else dict(cov_ratio=0.2)
        loss, stats = grpo_loss(x, o, None, advantages, m, EPS, 0.0, aggregation, policy_loss=policy_loss,
                                **options)
        (grad,) = torch.autograd.grad(loss, x)
        results.append((loss.detach(), grad[:, : mask.shape[1]], stats))
    torch.testing.assert_close(results[0][0], results[1][0])
    torch.testing.assert_close(results[0][1], results[1][1])
    assert results[0][2] == pytest.approx(results[1][2], rel=1e-12)  # the logs: sums in another order
    assert results[0][2]["cov_frac"] == results[1][2]["cov_frac"] > 0


def test_entropy_bonus_ignores_padding():
    _, _, _, mask = _batch(7)
    entropy = torch.rand(mask.shape, dtype=F64).masked_fill(~mask.bool(), float("nan"))
    wide_entropy = torch.cat([entropy, torch.full((entropy.shape[0], 2), float("inf"), dtype=F64)], dim=1)
    wide_mask = torch.cat([mask, torch.zeros(mask.shape[0], 2, dtype=F64)], dim=1)
    for aggregation in ("token-mean", "seq-mean", "seq-sum"):
        assert entropy_bonus(entropy, mask, 0.1, aggregation).item() == pytest.approx(
            entropy_bonus(wide_entropy, wide_mask, 0.1, aggregation).item(), abs=1e-12)


# ----------------------------------------------------------------------------- checks of the inputs


@pytest.mark.parametrize("call, match", [
    (lambda lp, o, a, m: clip_cov_per_token_loss(lp, o, a, m, EPS, cov_ratio=0.0), r"cov_ratio must lie in \(0.0"),
    (lambda lp, o, a, m: clip_cov_per_token_loss(lp, o, a, m, EPS, cov_ratio=1.5), "cov_ratio must lie in"),
    (lambda lp, o, a, m: clip_cov_per_token_loss(lp, o, a, m, EPS, clip_cov_lb=5.0, clip_cov_ub=1.0),
     "clip_cov_lb must be below clip_cov_ub"),
    (lambda lp, o, a, m: clip_cov_per_token_loss(lp, o, a, m, EPS, clip_cov_ub=float("inf")), "clip_cov_ub must be"),
    (lambda lp, o, a, m: kl_cov_per_token_loss(lp, o, a, m, kl_cov_coef=0.0), "kl_cov_coef must be > 0"),
    (lambda lp, o, a, m: kl_cov_per_token_loss(lp, o[:, :3], a, m), "shape mismatch"),
    (lambda lp, o, a, m: entropy_bonus(lp.exp(), m, -0.1), "coef must be >= 0"),
    (lambda lp, o, a, m: grpo_loss(lp, o, None, a, m, EPS, 0.0, policy_loss="kl-cov",
                                   importance_sampling_level="sequence"), "token-level by construction"),
])
def test_bad_inputs_name_the_argument(call, match):
    logp, old, advantages, mask = _batch()
    with pytest.raises(ValueError, match=match):
        call(logp, old, advantages, mask)


def test_inf_on_a_real_token_is_refused():
    logp, old, advantages, mask = _batch()
    logp[0, 0] = float("inf")
    with pytest.raises(ValueError, match="logp holds 1 inf/NaN"):
        kl_cov_per_token_loss(logp, old, advantages, mask)


# ----------------------------------------------------------------------------- the config and the command line


@pytest.mark.parametrize("fields, match", [
    ({"entropy_coef": -0.01}, "GRPOConfig.entropy_coef must be >= 0"),
    ({"policy_loss": "clip-cov", "cov_ratio": 0.0}, r"GRPOConfig.cov_ratio must lie in \(0.0, 1.0\]"),
    ({"policy_loss": "clip-cov", "clip_cov_lb": 6.0}, "GRPOConfig.clip_cov_lb must be below clip_cov_ub"),
    ({"policy_loss": "kl-cov", "kl_cov_coef": -1.0}, "GRPOConfig.kl_cov_coef must be > 0"),
    ({"policy_loss": "kl-cov", "importance_sampling_level": "sequence"}, "GRPOConfig.policy_loss='kl-cov' chooses"),
    ({"policy_loss": "kl-cov", "eps_high": 0.28}, "GRPOConfig.eps_high=0.28 sets the clip, which policy_loss="),
    ({"cov_ratio": 0.1}, "GRPOConfig.cov_ratio=0.1 is a setting of policy_loss='clip-cov' or 'kl-cov', not of"),
    ({"policy_loss": "kl-cov", "clip_cov_ub": 9.0}, "GRPOConfig.clip_cov_ub=9.0 is a setting of policy_loss="
                                                     "'clip-cov', not of 'kl-cov'"),
    ({"policy_loss": "clip-cov", "kl_cov_coef": 2.0}, "GRPOConfig.kl_cov_coef=2.0 is a setting of policy_loss="
                                                       "'kl-cov'"),
])
def test_bad_entropy_fields_name_the_field_and_value(fields, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**fields)


def test_defaults_leave_entropy_control_off():
    config = GRPOConfig()
    assert config.entropy_coef == 0.0 and config.policy_loss == "clip" and PPOConfig().entropy_coef == 0.0
    with pytest.raises(ValueError, match="PPOConfig.entropy_coef must be >= 0"):
        PPOConfig(entropy_coef=-1.0)


def _parse(argv):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, GRPOConfig)
    return config_from_args(GRPOConfig, parser.parse_args(argv))


def test_cli_flags_reach_the_config_and_help_explains_them(capsys):
    config = _parse(["--policy-loss", "clip-cov", "--cov-ratio", "0.05", "--clip-cov-lb", "0.5", "--clip-cov-ub",
                     "4", "--entropy-coef", "0.01"])
    assert (config.policy_loss, config.cov_ratio, config.clip_cov_lb, config.clip_cov_ub, config.entropy_coef) == (
        "clip-cov", 0.05, 0.5, 4.0, 0.01)
    config = _parse(["--policy-loss", "kl-cov", "--cov-ratio", "0.02", "--kl-cov-coef", "0.5"])
    assert (config.policy_loss, config.cov_ratio, config.kl_cov_coef) == ("kl-cov", 0.02, 0.5)
    with pytest.raises(SystemExit):
        _parse(["--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for flag in ("--entropy-coef", "--cov-ratio", "--clip-cov-lb", "--clip-cov-ub", "--kl-cov-coef"):
        assert flag in shown
    assert "clip|dual-clip|cispo|sapo|gmpo|clip-cov|kl-cov" in shown


def test_cli_refuses_a_bad_value_in_one_line_naming_it(capsys):
    from minirlhf.__main__ import main

    with pytest.raises(SystemExit):
        main(["grpo", "--policy-loss", "kl-cov", "--kl-cov-coef", "0"])
    err = capsys.readouterr().err
    assert "GRPOConfig.kl_cov_coef must be > 0" in err and len(err.strip().splitlines()) == 1


# ----------------------------------------------------------------------------- the trainer


@pytest.mark.parametrize("policy_loss, fields", [("clip-cov", dict(cov_ratio=0.3, clip_cov_lb=0.01)),
                                                 ("kl-cov", dict(cov_ratio=0.3))])
def test_trainer_passes_the_options_and_logs_the_share_acted_on(monkeypatch, policy_loss, fields):
    seen = []

    def recording_grpo_loss(*args, **kwargs):
        seen.append({k: kwargs[k] for k in ("policy_loss", "cov_ratio", "clip_cov_lb", "kl_cov_coef")})
        return grpo_loss_of_the_trainer(*args, **kwargs)

    grpo_loss_of_the_trainer = grpo_trainer.grpo_loss
    monkeypatch.setattr(grpo_trainer, "grpo_loss", recording_grpo_loss)
    history = train_grpo(None, GRPOConfig(policy_loss=policy_loss, epochs=2, **fields, **TINY))[2]
    assert seen and all(call == {"policy_loss": policy_loss, "cov_ratio": 0.3, "kl_cov_coef": 1.0,
                                 "clip_cov_lb": fields.get("clip_cov_lb", 1.0)} for call in seen)
    shares = [row["cov_frac"] for row in history if "loss" in row]
    assert shares and all(0 <= share <= 1 for share in shares)
    assert policy_loss == "clip-cov" or all(share > 0 for share in shares)  # KL-Cov always acts on ≥ 1 token


@pytest.mark.parametrize("config_cls, train, shape", [
    (GRPOConfig, train_grpo, dict(epochs=2)),
    (PPOConfig, train_ppo, dict(epochs=2, group_size=1, prompts_per_step=4, minibatch_size=None)),
])
def test_entropy_coef_changes_the_update_and_zero_does_not(config_cls, train, shape):
    """c_H > 0 moves p_θ elsewhere than c_H = 0 from the same seed; c_H = 0 is the default run, to the bit."""
    runs = {}
    for coef in (None, 0.0, 0.5):
        fields = {} if coef is None else {"entropy_coef": coef}
        model = train(None, config_cls(seed=3, **{**TINY, **shape}, **fields))[0]
        runs[coef] = [p.detach().clone() for p in model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(runs[None], runs[0.0]))
    assert not all(torch.equal(a, b) for a, b in zip(runs[0.0], runs[0.5]))
