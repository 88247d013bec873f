"""The variants of the core losses the field adopted after DeepSeek-R1 (notebook 07): clip-higher (DAPO), the GSPO
sequence ratio, Dr. GRPO's and DAPO's normalisers by name, the dynamic-sampling filter, overlong masking and the soft
overlong punishment, REINFORCE++ advantages, DPO + NLL (RPO) and IPO's two length conventions.

By-hand values, gradcheck in float64 and degenerate inputs first; then cross-checks against TRL 1.16's own code in
float64: `GRPOTrainer._compute_loss` on fixed per-token log-probs (its log-prob forward replaced by ours), the
`DPOTrainer._compute_loss` through the benchmarks' stand-in model, and `trl.rewards.get_soft_overlong_punishment`.
TRL is not a dependency of minirlhf: without it those tests are skipped.
"""

from __future__ import annotations

import copy
import math
import os
import sys
from pathlib import Path

import pytest
import torch
from torch.autograd import gradcheck

from minirlhf.losses import (
    clipped_surrogate,
    dpo_loss,
    gae,
    grpo_advantages,
    grpo_loss,
    informative_groups,
    mask_truncated,
    masked_whiten,
    ppo_clip_loss,
    reinforce_plus_plus_advantages,
    sequence_ratio,
)
from minirlhf.tasks.rewards import soft_overlong_punishment

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE = 1e-10  # float64 throughout: minirlhf and TRL must agree to rounding
EPS, EPS_HIGH = 0.2, 0.28  # DAPO's clip-higher setting
F64 = torch.float64


def _rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def _ragged_mask(lengths: list[int], width: int) -> torch.Tensor:
    return (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).double()


def _req(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.clone().requires_grad_(True) for t in ts)


# ----------------------------------------------------------------------------- clip-higher


RATIOS = [0.7, 0.8, 1.0, 1.2, 1.25, 1.28, 1.4]


@pytest.mark.parametrize(
    "advantage, objective, zero_grad",
    [  # ratio:   0.7    0.8    1.0    1.2    1.25   1.28   1.4
        (+1.0, [0.7, 0.8, 1.0, 1.2, 1.25, 1.28, 1.28], [False] * 6 + [True]),
        (-1.0, [-0.8, -0.8, -1.0, -1.2, -1.25, -1.28, -1.4], [True] + [False] * 6),
    ],
)
def test_clip_higher_table(advantage, objective, zero_grad):
    """ε_low = 0.2, ε_high = 0.28: Â > 0 may push r up to 1.28 (not 1.2) before the gradient stops; Â < 0 is
    still stopped at 0.8. On an edge (0.8 and 1.28 exactly) both terms agree and the gradient is Â."""
    ratio = torch.tensor(RATIOS, dtype=F64, requires_grad=True)
    out = clipped_surrogate(ratio, torch.tensor(advantage, dtype=F64), EPS, EPS_HIGH)
    torch.testing.assert_close(out.detach(), torch.tensor(objective, dtype=F64))
    (grad,) = torch.autograd.grad(out.sum(), ratio)
    torch.testing.assert_close(grad, torch.where(torch.tensor(zero_grad), 0.0, advantage).double())


def test_eps_high_none_is_the_symmetric_clip():
    ratio, adv = _rand(4, 5, seed=1).exp(), _rand(4, 5, seed=2)
    assert torch.equal(clipped_surrogate(ratio, adv, EPS), clipped_surrogate(ratio, adv, EPS, EPS))
    assert torch.equal(clipped_surrogate(ratio, adv, EPS, None), clipped_surrogate(ratio, adv, EPS, EPS))
    mask = _ragged_mask([5, 3, 1, 4], 5)
    logp, old = -_rand(4, 5, seed=3).abs(), -_rand(4, 5, seed=4).abs()
    for loss_fn in (lambda **k: grpo_loss(logp, old, None, adv[:, 0], mask, EPS, 0.0, **k),
                    lambda **k: ppo_clip_loss(logp, old, adv, mask, EPS, **k)):
        (a, stats_a), (b, stats_b) = loss_fn(), loss_fn(eps_high=EPS)
        assert torch.equal(a, b) and stats_a == stats_b


def _edge_logratios() -> tuple[float, float]:
    """log(0.75) and log(1.5): exp gives the clip edges 1 - 0.25 and 1 + 0.5 back exactly (checked)."""
    low, high = math.log(0.75), math.log(1.5)
    assert torch.exp(torch.tensor([low, high], dtype=F64)).tolist() == [0.75, 1.5]
    return low, high


def test_clip_fractions_split_low_and_high_like_trl():
    """TRL's clip_ratio/low_mean counts Â < 0 and r < 1 - ε_low, high_mean Â > 0 and r > 1 + ε_high, over real
    tokens; a ratio exactly on an edge is not clipped, and Â = 0 (a constant group) is never clipped."""
    low_edge, high_edge = _edge_logratios()
    #                  r:  0.5    0.75(edge) 1.5(edge) 2.0    0.5   2.0   pad
    logratio = torch.tensor([[math.log(0.5), low_edge, high_edge, math.log(2.0)],
                             [math.log(0.5), math.log(2.0), 0.0, 0.0]], dtype=F64)
    mask = _ragged_mask([4, 2], 4)
    logp = torch.full((2, 4), -1.0, dtype=F64)
    for adv in ([-1.0, 1.0], [1.0, -1.0], [0.0, 0.0], [-1.0, -1.0]):
        _, stats = grpo_loss(logp + logratio, logp, None, torch.tensor(adv, dtype=F64), mask, 0.25, 0.0,
                             eps_high=0.5)
        low = sum(a < 0 for a in adv) / 6  # r = 0.5 once in each row; the edge r = 0.75 does not count
        high = sum(a > 0 for a in adv) / 6  # r = 2.0 once in each row; the edge r = 1.5 does not count
        assert (stats["clip_frac_low"], stats["clip_frac_high"]) == (pytest.approx(low), pytest.approx(high))
        assert stats["clip_frac"] == pytest.approx(low + high)


def test_gradient_on_the_clip_edges_is_the_unclipped_one():
    """r exactly 1 - ε_low with Â < 0 and exactly 1 + ε_high with Â > 0: ∂L/∂log p_θ = -Â r / |y| (not 0)."""
    low_edge, high_edge = _edge_logratios()
    old = torch.zeros(2, 1, dtype=F64)
    logp = torch.tensor([[low_edge], [high_edge]], dtype=F64, requires_grad=True)
    adv = torch.tensor([-1.0, 1.0], dtype=F64)
    loss, stats = grpo_loss(logp, old, None, adv, torch.ones(2, 1), 0.25, 0.0, eps_high=0.5)
    (grad,) = torch.autograd.grad(loss, logp)
    torch.testing.assert_close(grad, torch.tensor([[0.75], [-1.5]], dtype=F64) / 2)
    assert stats["clip_frac"] == 0.0


def test_ppo_clip_loss_takes_eps_high():
    mask = _ragged_mask([3, 2], 3)
    logp = torch.zeros(2, 3, dtype=F64)
    old = -torch.tensor([[math.log(1.25)] * 3, [math.log(1.25)] * 3], dtype=F64)  # r = 1.25 everywhere
    adv = torch.ones(2, 3, dtype=F64)
    symmetric, stats = ppo_clip_loss(logp, old, adv, mask, EPS)
    higher, stats_higher = ppo_clip_loss(logp, old, adv, mask, EPS, eps_high=EPS_HIGH)
    assert symmetric.item() == pytest.approx(-1.2) and higher.item() == pytest.approx(-1.25)
    assert (stats["clip_frac_high"], stats_higher["clip_frac_high"]) == (1.0, 0.0)


# ----------------------------------------------------------------------------- GSPO


def test_sequence_ratio_by_hand():
    """Row 0: log r = 0.1, 0.3 -> s = e^0.2. Row 1: one token, s = r. Row 2: no real token, s = 1 (not 0/0)."""
    old = torch.zeros(3, 3, dtype=F64)
    logp = torch.tensor([[0.1, 0.3, float("nan")], [-0.5, 7.0, 7.0], [float("inf")] * 3], dtype=F64)
    mask = _ragged_mask([2, 1, 0], 3)
    torch.testing.assert_close(sequence_ratio(logp, old, mask), torch.tensor([math.exp(0.2), math.exp(-0.5), 1.0],
                                                                             dtype=F64))


def test_gspo_loss_by_hand_and_its_gradient():
    """β = 0, "seq-mean": L = -(1/B) Σ_i min(s_i Â_i, clip(s_i) Â_i). Unclipped, ∂L/∂log p_θ(y_i,t) = -Â_i s_i /
    (B |y_i|) on every real token of row i; a clipped row gets 0."""
    mask = _ragged_mask([3, 2, 1], 3)
    old = torch.zeros(3, 3, dtype=F64)
    logp = torch.tensor([[0.1, -0.1, 0.3], [0.5, 0.5, 9.0], [-0.05, 0.0, 0.0]], dtype=F64, requires_grad=True)
    adv = torch.tensor([1.0, 2.0, -1.0], dtype=F64)
    s = torch.tensor([math.exp(0.1), math.exp(0.5), math.exp(-0.05)], dtype=F64)  # row 1: 1.65 > 1.28, clipped
    loss, stats = grpo_loss(logp, old, None, adv, mask, EPS, 0.0, eps_high=EPS_HIGH,
                            importance_sampling_level="sequence")
    expected = -(s[0] * 1.0 + 1.28 * 2.0 + s[2] * -1.0) / 3
    assert loss.item() == pytest.approx(expected.item())
    (grad,) = torch.autograd.grad(loss, logp)
    expected_grad = torch.tensor([[-s[0] / 9] * 3, [0.0] * 3, [s[2] / 3, 0, 0]], dtype=F64) * mask
    torch.testing.assert_close(grad, expected_grad)
    assert stats["clip_frac_high"] == pytest.approx(1 / 3) and stats["clip_frac_low"] == 0.0
    assert stats["ratio_mean"] == pytest.approx(s.mean().item())
    assert stats["ratio_max"] == pytest.approx(s.max().item())


def test_gspo_equals_grpo_when_every_token_has_the_same_ratio():
    mask = _ragged_mask([4, 2, 3], 4)
    logp = -_rand(3, 4, seed=5).abs()
    old = logp - torch.tensor([[0.3], [-0.4], [0.1]], dtype=F64)  # one log-ratio per row
    ref, adv = -_rand(3, 4, seed=6).abs(), _rand(3, seed=7)
    for aggregation in ("seq-mean", "token-mean", "constant"):
        token, _ = grpo_loss(logp, old, ref, adv, mask, EPS, 0.04, aggregation, eps_high=EPS_HIGH)
        sequence, _ = grpo_loss(logp, old, ref, adv, mask, EPS, 0.04, aggregation, eps_high=EPS_HIGH,
                                importance_sampling_level="sequence")
        torch.testing.assert_close(token, sequence)


def test_gspo_counts_clipping_per_sequence_including_empty_rows():
    """At the sequence level TRL's clip_ratio counts sequences, every one of the B (an empty row has s = 1)."""
    mask = _ragged_mask([2, 2, 0, 1], 2)
    old = torch.zeros(4, 2, dtype=F64)
    logp = torch.tensor([[0.5, 0.5], [0.0, 0.0], [0.0, 0.0], [-0.5, 0.0]], dtype=F64)  # s = 1.65, 1, 1, 0.61
    _, stats = grpo_loss(logp, old, None, torch.tensor([1.0, 1.0, 1.0, -1.0], dtype=F64), mask, EPS, 0.0,
                         importance_sampling_level="sequence")
    assert (stats["clip_frac_high"], stats["clip_frac_low"], stats["clip_frac"]) == (0.25, 0.25, 0.5)


def test_gradcheck_new_objectives():
    mask = _ragged_mask([4, 2, 3, 1], 4)
    logp, ref = -_rand(4, 4, seed=1).abs(), -_rand(4, 4, seed=2).abs()
    # token ratios (and their per-row geometric means) at least 0.03 away from the kinks 0.8 and 1.28
    ratio = torch.tensor([0.5, 0.9, 1.0, 1.1, 1.5, 0.7, 1.2, 0.95])[torch.arange(16) % 8].view(4, 4).double()
    old = logp - ratio.log()
    seq = torch.exp((ratio.log() * mask).sum(-1) / mask.sum(-1))
    assert ((seq - 0.8).abs() > 0.03).all() and ((seq - 1.28).abs() > 0.03).all()
    adv = _rand(4, seed=3)
    checks = []
    for level in ("token", "sequence"):
        for aggregation in ("seq-mean", "token-mean", "constant"):
            checks.append(lambda lp, rl, a=aggregation, lv=level: grpo_loss(
                lp, old, rl, adv, mask, EPS, 0.1, a, eps_high=EPS_HIGH, importance_sampling_level=lv)[0])
    checks.append(lambda lp, rl: ppo_clip_loss(lp, old, adv[:, None].expand(4, 4), mask, EPS, eps_high=EPS_HIGH)[0])
    checks.append(lambda lp, rl: sequence_ratio(lp, rl, mask))
    for fn in checks:
        assert gradcheck(fn, _req(logp, ref)), fn
    pairs = _req(*(-_rand(3, seed=s).abs() for s in (8, 9, 10, 11)))
    lengths = (torch.tensor([3, 1, 5]), torch.tensor([2, 4, 1]))
    options = [dict(rpo_alpha=0.5, chosen_lengths=lengths[0]),
               dict(loss_type="ipo", ipo_normalisation="mean", chosen_lengths=lengths[0], rejected_lengths=lengths[1]),
               dict(loss_type="ipo", rpo_alpha=1.0, chosen_lengths=lengths[0])]
    for kw in options:
        assert gradcheck(lambda *x, kw=kw: dpo_loss(*x, beta=0.1, **kw)[0], pairs), kw


# ----------------------------------------------------------------------------- Dr. GRPO and DAPO by name


def test_dr_grpo_is_scale_none_and_the_constant_normaliser():
    """Dr. GRPO: Â_i = R_i - mean(R_group), no std; L = -Σ_i Σ_t J_i,t / (B · T_max), every token weighs the same
    whatever its answer's length. DAPO's token-mean divides by the real tokens instead."""
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 3.0, 1.0], dtype=F64)
    torch.testing.assert_close(grpo_advantages(rewards, 3, scale="none"),
                               torch.tensor([2 / 3, -1 / 3, -1 / 3, -4 / 3, 5 / 3, -1 / 3], dtype=F64))
    mask = _ragged_mask([1, 3], 4)
    logp = torch.zeros(2, 4, dtype=F64, requires_grad=True)
    adv = torch.tensor([1.0, 1.0], dtype=F64)
    for aggregation, weight in (("constant", 1 / 8), ("token-mean", 1 / 4), ("seq-mean", None)):
        loss, _ = grpo_loss(logp, logp.detach(), None, adv, mask, EPS, 0.0, aggregation)
        (grad,) = torch.autograd.grad(loss, logp)
        if weight is None:  # seq-mean: 1/(B |y_i|), the short answer's token weighs 3 times more
            torch.testing.assert_close(grad, -torch.tensor([[1 / 2, 0, 0, 0], [1 / 6] * 3 + [0]], dtype=F64))
        else:
            torch.testing.assert_close(grad, -weight * mask)


# ----------------------------------------------------------------------------- dynamic sampling


def test_informative_groups_by_hand():
    rewards = torch.tensor([1.0, 1.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.5 + 1e-7, 2.0, 2.0 + 1e-3])
    torch.testing.assert_close(informative_groups(rewards, 2), torch.tensor([False, True, False, False, False, True]))
    torch.testing.assert_close(informative_groups(rewards, 3), torch.tensor([False, True, True, True]))
    torch.testing.assert_close(informative_groups(rewards, 12), torch.tensor([True]))
    assert informative_groups(torch.zeros(0), 4).shape == (0,)


@pytest.mark.parametrize("group_size", [2, 4])
def test_informative_groups_are_the_groups_with_nonzero_grpo_advantages(group_size):
    g = torch.Generator().manual_seed(0)
    rewards = (torch.rand(64, generator=g) < 0.7).float()
    rewards[:group_size] = 0.3 + torch.rand(group_size, generator=g) * 1e-6  # float noise: constant
    keep = informative_groups(rewards, group_size)
    for scale in ("group", "batch", "none"):
        nonzero = grpo_advantages(rewards, group_size, scale).view(-1, group_size).ne(0).any(dim=1)
        assert torch.equal(keep, nonzero), scale
    assert not keep[0]


# ----------------------------------------------------------------------------- overlong handling


def test_mask_truncated_zeroes_the_rows_of_truncated_completions():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 0, 0]])
    out = mask_truncated(mask, torch.tensor([True, False, True]))
    assert out.dtype == mask.dtype
    assert out.tolist() == [[1, 1, 0], [0, 0, 0], [1, 0, 0]]
    assert mask_truncated(mask.double(), torch.tensor([False] * 3)).sum() == 0
    assert mask_truncated(torch.ones(0, 5), torch.zeros(0, dtype=torch.bool)).shape == (0, 5)


def test_a_truncated_row_adds_nothing_but_still_counts_in_b():
    """seq-mean and constant divide by B with the masked row counted (as TRL does); its gradient is 0."""
    mask = _ragged_mask([2, 3], 3)
    logp = torch.zeros(2, 3, dtype=F64, requires_grad=True)
    masked = mask_truncated(mask, torch.tensor([True, False]))
    loss, _ = grpo_loss(logp, logp.detach(), None, torch.tensor([1.0, 5.0], dtype=F64), masked, EPS, 0.0)
    assert loss.item() == pytest.approx(-1.0 / 2)
    (grad,) = torch.autograd.grad(loss, logp)
    assert (grad[1] == 0).all()


def test_soft_overlong_punishment_by_hand():
    """L_max = 100, L_cache = 20 (TRL's example): free up to 80 tokens, -0.5 at 90, -1 at 100 and beyond."""
    reward = soft_overlong_punishment(100, 20)
    lengths = [0, 80, 81, 90, 100, 101]
    ids = [[7] * n for n in lengths]
    assert reward(["p"] * 6, ["c"] * 6, completion_ids=ids) == [0.0, 0.0, -0.05, -0.5, -1.0, -1.0]
    assert reward.__name__ == "soft_overlong_punishment_reward"
    hard = soft_overlong_punishment(4, 0)  # no cache: 0 up to L_max, -1 beyond
    assert hard(["p"] * 2, ["c"] * 2, completion_ids=[[1] * 4, [1] * 5]) == [0.0, -1.0]


def test_soft_overlong_punishment_counts_tokens_with_the_tokenizer():
    from minirlhf.models import load_model

    _, tokenizer = load_model("tiny", device="cpu")
    completions = ["12", "12 12 12 12 12", "1"]
    counts = [len(tokenizer(c, add_special_tokens=False)["input_ids"]) for c in completions]
    reward = soft_overlong_punishment(max(counts), 2, tokenizer)
    free = max(counts) - 2
    expected = [0.0 if n <= free else (free - n) / 2 for n in counts]
    assert reward(["1+11="] * 3, completions, answer=["12"] * 3) == expected
    assert expected[1] == -1.0


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: soft_overlong_punishment(0, 0), "max_completion_len"),
        (lambda: soft_overlong_punishment(10, 11), "soft_punish_cache"),
        (lambda: soft_overlong_punishment(10, -1), "soft_punish_cache"),
        (lambda: soft_overlong_punishment(10, 2)(["p"], ["c"]), "tokenizer"),
        (lambda: soft_overlong_punishment(10, 2)(["p"], ["c"], completion_ids=[[1], [2]]), "completion_ids"),
    ],
)
def test_soft_overlong_punishment_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- REINFORCE++


def test_reinforce_plus_plus_by_hand():
    """β = 0.1, γ = 1, rows of 3 and 2 tokens, k1 = 0.5 on every token: r = -0.05 per token, plus R on the last.
    Row 0 (R = 1): returns 0.85, 0.90, 0.95; row 1 (R = 0): -0.10, -0.05; then whitened over the 5 tokens."""
    mask = _ragged_mask([3, 2], 3)
    old = torch.full((2, 3), -1.0, dtype=F64)
    ref = old - 0.5
    ref[1, 2] = float("nan")  # padding may hold anything
    adv = reinforce_plus_plus_advantages(torch.tensor([1.0, 0.0]), mask, old, ref, beta=0.1)
    returns = torch.tensor([0.85, 0.90, 0.95, -0.10, -0.05], dtype=F64)
    expected = (returns - returns.mean()) / returns.std()
    torch.testing.assert_close(adv[mask.bool()].double(), expected, atol=1e-6, rtol=0)
    assert adv[1, 2] == 0


def test_reinforce_plus_plus_discount_and_baseline():
    """γ = 0.5 and no KL: the reward at the last token reaches token t as γ^(|y|-1-t) R. The baseline variant
    subtracts the group mean first: G = 2, rewards (3, 1) -> (1, -1)."""
    mask = _ragged_mask([3, 3], 3)
    rewards = torch.tensor([3.0, 1.0])
    plain = reinforce_plus_plus_advantages(rewards, mask, gamma=0.5)
    discounted = torch.tensor([[0.75, 1.5, 3.0], [0.25, 0.5, 1.0]])
    torch.testing.assert_close(plain, masked_whiten(discounted, mask))
    baseline = reinforce_plus_plus_advantages(rewards, mask, gamma=0.5, group_size=2)
    torch.testing.assert_close(baseline, masked_whiten(torch.tensor([[0.25, 0.5, 1.0], [-0.25, -0.5, -1.0]]), mask))
    # REINFORCE++ is the return-to-go (GAE with V = 0, λ = 1) whitened over the batch
    returns, _ = gae(discounted * (torch.arange(3) == 2), torch.zeros(2, 3), mask, 0.5, 1.0)
    torch.testing.assert_close(returns, discounted)


def test_reinforce_plus_plus_degenerate_batches():
    mask = _ragged_mask([2, 1, 0, 2], 2)
    # every group constant and no KL: the baseline variant leaves nothing, all advantages 0 (not NaN)
    flat = reinforce_plus_plus_advantages(torch.tensor([1.0, 1.0, 0.5, 0.5]), mask, group_size=2)
    assert torch.equal(flat, torch.zeros(4, 2))
    # one reward for all: REINFORCE++ without baseline has the same return everywhere -> 0 after whitening
    assert torch.equal(reinforce_plus_plus_advantages(torch.full((4,), 2.0), mask), torch.zeros(4, 2))
    # an empty row (a truncated completion masked out) gets 0 and does not enter the batch statistics
    adv = reinforce_plus_plus_advantages(torch.tensor([1.0, 0.0, 99.0, 0.0]), mask)
    assert (adv[2] == 0).all()
    same = reinforce_plus_plus_advantages(torch.tensor([1.0, 0.0, -5.0, 0.0]), mask)
    torch.testing.assert_close(adv, same)
    assert reinforce_plus_plus_advantages(torch.zeros(0), torch.zeros(0, 3)).shape == (0, 3)


# ----------------------------------------------------------------------------- DPO + NLL, IPO's two normalisations


def test_rpo_adds_the_nll_per_chosen_token_of_the_batch():
    """Two pairs, |y_w| = 2 and 6, log p_θ(y_w) = -4 and -6: the NLL per chosen token is (4 + 6) / 8 = 1.25,
    and mean_i L_i = DPO + α · 1.25."""
    chosen, rejected = torch.tensor([-4.0, -6.0], dtype=F64), torch.tensor([-5.0, -5.0], dtype=F64)
    ref = torch.tensor([-4.5, -5.5], dtype=F64)
    lengths = torch.tensor([2, 6])
    dpo, r_w, r_l = dpo_loss(chosen, rejected, ref, ref, 0.1)
    rpo, rpo_w, rpo_l = dpo_loss(chosen, rejected, ref, ref, 0.1, rpo_alpha=0.5, chosen_lengths=lengths)
    assert rpo.mean().item() == pytest.approx(dpo.mean().item() + 0.5 * 1.25)
    torch.testing.assert_close(rpo - dpo, 0.5 * -chosen / 4)
    assert torch.equal(rpo_w, r_w) and torch.equal(rpo_l, r_l)
    zero, _, _ = dpo_loss(chosen, rejected, ref, ref, 0.1, rpo_alpha=0.0)
    assert torch.equal(zero, dpo)


def test_ipo_sum_is_the_papers_formula_and_mean_divides_by_length():
    """IPO (Azar et al., Eq. 17): (h - 1/(2β))², h = log [p_θ(y_w) p_ref(y_l) / (p_θ(y_l) p_ref(y_w))].
    h = (-3 - -4) - (-10 - -8) = 3; β = 0.25: (3 - 2)² = 1. Per token (|y_w| = 2, |y_l| = 4): h = 1/2 + 2/4 = 1,
    (1 - 2)² = 1 as well; |y_w| = 1: h = 1.5, 0.25."""
    args = [torch.tensor([v], dtype=F64) for v in (-3.0, -10.0, -4.0, -8.0)]
    summed, _, _ = dpo_loss(*args, 0.25, "ipo")
    assert summed.item() == pytest.approx(1.0)
    explicit, _, _ = dpo_loss(*args, 0.25, "ipo", ipo_normalisation="sum")
    assert torch.equal(explicit, summed)
    mean, _, _ = dpo_loss(*args, 0.25, "ipo", ipo_normalisation="mean", chosen_lengths=torch.tensor([2]),
                          rejected_lengths=torch.tensor([4]))
    assert mean.item() == pytest.approx(1.0)
    short, _, _ = dpo_loss(*args, 0.25, "ipo", ipo_normalisation="mean", chosen_lengths=torch.tensor([1]),
                           rejected_lengths=torch.tensor([4]))
    assert short.item() == pytest.approx(0.25)


# ----------------------------------------------------------------------------- bad input and inf/NaN


def _t(*shape: int) -> torch.Tensor:
    return torch.zeros(*shape)


def _nan(*shape: int) -> torch.Tensor:
    return torch.full(shape, float("nan"))


L2 = torch.tensor([1, 2])


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: clipped_surrogate(_t(3), _t(3), EPS, eps_high=0.0), "eps_high"),
        (lambda: clipped_surrogate(_t(3), _t(3), EPS, eps_high=float("nan")), "eps_high"),
        (lambda: grpo_loss(_t(2, 3), _t(2, 3), None, _t(2), _t(2, 3), EPS, 0.0, eps_high=-0.1), "eps_high"),
        (lambda: ppo_clip_loss(_t(2, 3), _t(2, 3), _t(2, 3), _t(2, 3), EPS, eps_high=0.0), "eps_high"),
        (lambda: grpo_loss(_t(2, 3), _t(2, 3), None, _t(2), _t(2, 3), EPS, 0.0, importance_sampling_level="seq"),
         "importance_sampling_level.*token, sequence"),
        (lambda: grpo_loss(_nan(2, 3), _t(2, 3), None, _t(2), torch.ones(2, 3), EPS, 0.0,
                           importance_sampling_level="sequence"), "logp"),
        (lambda: grpo_loss(_t(2, 3), _nan(2, 3), None, _t(2), torch.ones(2, 3), EPS, 0.0,
                           importance_sampling_level="sequence"), "old_logp"),
        (lambda: grpo_loss(_t(2, 3), _t(2, 3), None, _nan(2), torch.ones(2, 3), EPS, 0.0,
                           importance_sampling_level="sequence"), "advantages"),
        (lambda: sequence_ratio(_nan(2, 3), _t(2, 3), torch.ones(2, 3)), "logp"),
        (lambda: sequence_ratio(_t(2, 3), _nan(2, 3), torch.ones(2, 3)), "old_logp"),
        (lambda: sequence_ratio(_t(2, 3), _t(2, 4), torch.ones(2, 3)), r"old_logp \(2, 4\)"),
        (lambda: informative_groups(torch.tensor([0.0, float("nan")]), 2), "rewards"),
        (lambda: informative_groups(_t(6), 4), "group_size"),
        (lambda: informative_groups(_t(6), 1), "group_size"),
        (lambda: informative_groups(_t(6), 2, eps=0.0), "eps"),
        (lambda: mask_truncated(_t(2, 3), torch.tensor([1, 0])), "bool"),
        (lambda: mask_truncated(_t(2, 3), torch.tensor([True])), r"ended_with_eos \(1,\)"),
        (lambda: reinforce_plus_plus_advantages(torch.tensor([0.0, float("nan")]), torch.ones(2, 3)), "rewards"),
        (lambda: reinforce_plus_plus_advantages(torch.tensor([0.0, float("inf")]), torch.ones(2, 3), group_size=2),
         "rewards"),
        (lambda: reinforce_plus_plus_advantages(_t(3), torch.ones(2, 3)), r"rewards must be \(B,\) = \(2,\)"),
        (lambda: reinforce_plus_plus_advantages(_t(2), torch.ones(2, 3), _nan(2, 3), _t(2, 3), beta=0.1),
         "old_logp"),
        (lambda: reinforce_plus_plus_advantages(_t(2), torch.ones(2, 3), _t(2, 3), _nan(2, 3), beta=0.1),
         "ref_logp"),
        (lambda: reinforce_plus_plus_advantages(_t(2), torch.ones(2, 3), _t(2, 3), None, beta=0.1), "ref_logp"),
        (lambda: reinforce_plus_plus_advantages(_t(2), torch.ones(2, 3), beta=-0.1), "beta"),
        (lambda: reinforce_plus_plus_advantages(_t(2), torch.ones(2, 3), gamma=1.5), "gamma"),
        (lambda: reinforce_plus_plus_advantages(_t(4), torch.ones(4, 3), group_size=3), "group_size"),
        (lambda: reinforce_plus_plus_advantages(_t(2), torch.ones(2, 3), _t(2, 3), _t(2, 4), 0.1),
         r"ref_logp \(2, 4\)"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, rpo_alpha=0.5), "rpo_alpha > 0 needs chosen_lengths"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, rpo_alpha=-0.5, chosen_lengths=L2), "rpo_alpha"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, rpo_alpha=0.5, chosen_lengths=torch.tensor([1, 0])),
         "chosen_lengths must be >= 1"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, rpo_alpha=0.5, chosen_lengths=torch.tensor([1, 2, 3])),
         r"chosen_lengths \(3,\)"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, rpo_alpha=0.5,
                          chosen_lengths=torch.tensor([1.0, float("inf")])), "chosen_lengths"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, "ipo", ipo_normalisation="mean", chosen_lengths=L2),
         "ipo_normalisation='mean' needs rejected_lengths"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, ipo_normalisation="mean", chosen_lengths=L2,
                          rejected_lengths=L2), "ipo_normalisation only applies to loss_type='ipo'"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, "ipo", ipo_normalisation="avg"),
         "ipo_normalisation.*sum, mean"),
        (lambda: dpo_loss(_nan(2), _t(2), _t(2), _t(2), 0.1, rpo_alpha=0.5, chosen_lengths=L2),
         "policy_chosen_logps"),
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, chosen_lengths=torch.tensor([1.0, float("nan")])),
         "chosen_lengths"),  # counts that were given are checked even when nothing uses them
        (lambda: dpo_loss(_t(2), _t(2), _t(2), _t(2), 0.1, rejected_lengths=torch.tensor([1, 2, 3])),
         r"rejected_lengths \(3,\)"),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# ----------------------------------------------------------------------------- TRL's own code


@pytest.fixture(scope="module")
def trl_grpo(tmp_path_factory):
    """A real GRPOTrainer on the tiny model; its per-token log-prob forward is replaced by the tensor under test."""
    pytest.importorskip("trl", reason="TRL is not installed (pip install trl==1.16.0 to run the TRL cross-checks)")
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny", device="cpu")
    args = GRPOConfig(output_dir=str(tmp_path_factory.mktemp("grpo")), per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=6, use_cpu=True, bf16=False, report_to="none", save_strategy="no",
                      disable_tqdm=True, use_bias_correction_kl=False)
    trainer = GRPOTrainer(model=model, reward_funcs=lambda prompts, completions, **kw: [0.0] * len(prompts),
                          args=args, train_dataset=Dataset.from_list([{"prompt": "1+1="}] * 4),
                          processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; we call the loss directly
    trainer.model.train()
    return trainer


def _grpo_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """8 completions of width 6 = max_completion_length: ragged lengths, one empty row (a masked truncated
    completion), log-ratios up to ±0.5 so both clip sides act, two zero advantages (a constant group)."""
    g = torch.Generator().manual_seed(seed)
    B, P, C = 8, 3, 6
    lengths = torch.tensor([6, 1, 4, 0, 6, 3, 2, 5])
    mask = (torch.arange(C)[None, :] < lengths[:, None]).long()
    logp = -torch.rand(B, C, generator=g, dtype=F64) * 2
    old = logp + 0.5 * torch.randn(B, C, generator=g, dtype=F64)
    ref = logp + 0.5 * torch.randn(B, C, generator=g, dtype=F64)
    advantages = torch.randn(B, generator=g, dtype=F64)
    advantages[4:6] = 0.0
    logp, old, ref = (torch.where(mask.bool(), t, torch.zeros_like(t)) for t in (logp, old, ref))
    return {"prompt_ids": torch.randint(2, 50, (B, P), generator=g), "prompt_mask": torch.ones(B, P, dtype=torch.long),
            "completion_ids": torch.randint(2, 50, (B, C), generator=g), "completion_mask": mask,
            "advantages": advantages, "old_per_token_logps": old, "ref_per_token_logps": ref,
            "num_items_in_batch": mask.sum(), "logp": logp}


ZOO_BATCH_SEED = 1  # a batch with Â < 0 on tokens and sequences far above 1 (test_the_trl_batch_reaches_the_zoos_edges)
# TRL's loss_type -> the aggregation of ours that weighs tokens the same way (on one process)
TRL_AGGREGATIONS = {"grpo": "seq-mean", "bnpo": "token-mean", "dapo": "token-mean", "dr_grpo": "constant",
                    "cispo": "token-mean", "sapo": "seq-mean"}


def trl_grpo_differences(trainer, loss_type: str, level: str, eps_high: float | None, beta: float,
                         delta: float | None = None, eps: float = EPS, seed: int = 0, **zoo) -> dict[str, float]:
    """max |minirlhf - TRL| of the loss, its gradient w.r.t. every per-token log-prob and the three clip
    fractions, for TRL's loss_type against the aggregation of the same name; ``zoo`` (policy_loss and its
    parameters) goes to grpo_loss, ``delta`` (the two-sided clip) to TRL."""
    aggregation = TRL_AGGREGATIONS[loss_type]
    batch = _grpo_batch(seed)
    mask = batch["completion_mask"]
    trainer.loss_type, trainer.importance_sampling_level, trainer.beta = loss_type, level, beta
    trainer.epsilon_low, trainer.epsilon_high = eps, eps if eps_high is None else eps_high
    trainer.args.delta = delta
    trainer.max_completion_length = mask.shape[1]
    trl_logp = batch["logp"].clone().requires_grad_(True)
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (trl_logp, torch.zeros_like(trl_logp), None)
    trainer._metrics["train"].clear()
    trl_loss = trainer._compute_loss(trainer.model, batch)
    (trl_grad,) = torch.autograd.grad(trl_loss, trl_logp)
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    ours_logp = batch["logp"].clone().requires_grad_(True)
    if loss_type == "cispo":  # TRL's epsilon_high is CISPO's cap ε_max itself
        eps_high = trainer.epsilon_high - 1
    loss, stats = grpo_loss(ours_logp, batch["old_per_token_logps"], batch["ref_per_token_logps"],
                            batch["advantages"], mask, eps, beta, aggregation, eps_high=eps_high,
                            importance_sampling_level=level, **zoo)
    (grad,) = torch.autograd.grad(loss, ours_logp)
    trainer.args.delta = None
    differences = {"loss": abs(loss.item() - trl_loss.item()), "gradient": (grad - trl_grad).abs().max().item()}
    if loss_type in ("cispo", "sapo"):  # TRL logs no clip_ratio for these
        return differences
    for ours, theirs in (("clip_frac_low", "low_mean"), ("clip_frac_high", "high_mean"), ("clip_frac", "region_mean")):
        differences[ours] = abs(stats[ours] - metrics[f"clip_ratio/{theirs}"])
    if beta > 0:
        differences["kl"] = abs(stats["kl"] - metrics["kl"])
    return differences


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("eps_high, beta", [(None, 0.0), (EPS_HIGH, 0.0), (EPS_HIGH, 0.04)])
def test_grpo_loss_matches_trl(trl_grpo, loss_type, level, eps_high, beta):
    """TRL's epsilon_high, importance_sampling_level and loss_type grpo/bnpo/dapo/dr_grpo against eps_high,
    importance_sampling_level and aggregation seq-mean/token-mean/token-mean/constant: loss, gradient, clip
    fractions (and k3 KL) agree in float64. DAPO's normaliser, the active tokens of the global batch, is
    token-mean on one process; Dr. GRPO's B · max_completion_length is "constant" at T = max_completion_length."""
    differences = trl_grpo_differences(trl_grpo, loss_type, level, eps_high, beta)
    assert max(differences.values()) <= TOLERANCE, differences


@pytest.mark.parametrize("level", ["token", "sequence"])
@pytest.mark.parametrize("policy_loss, loss_type, options", [
    # TRL's delta (INTELLECT-2's two-sided clip) is dual-clip with c = δ whenever δ ≥ 1 + ε_high
    ("dual-clip", "grpo", dict(eps_high=EPS_HIGH, delta=3.0, dual_clip_c=3.0)),
    ("dual-clip", "dapo", dict(eps_high=None, delta=1.25, dual_clip_c=1.25)),
    # TRL's cispo caps the weight above only, at epsilon_high = ε_max: ours with ε = 1 (no lower cap)
    ("cispo", "cispo", dict(eps=1.0, eps_high=5.0)),
    ("cispo", "cispo", dict(eps=1.0, eps_high=1.28)),
    # TRL makes τ in float32 (torch.where of two Python floats), which moves its default τ_neg = 1.05 by 4e-8:
    # temperatures exact in float32 keep this float64 comparison down to rounding
    ("sapo", "sapo", dict(eps_high=None, tau_pos=1.0, tau_neg=1.25)),
    ("sapo", "sapo", dict(eps_high=None, tau_pos=2.0, tau_neg=0.5)),
])
@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_ratio_zoo_matches_trl(trl_grpo, policy_loss, loss_type, options, level, beta):
    """The ratio zoo against TRL 1.16's loss_type cispo and sapo and its delta, at both importance-sampling
    levels, loss and gradient (and, for dual-clip, the clip fractions) in float64."""
    options = dict(options)
    eps_high, delta, eps = options.pop("eps_high"), options.pop("delta", None), options.pop("eps", EPS)
    if "tau_pos" in options:
        trl_grpo.args.sapo_temperature_pos, trl_grpo.args.sapo_temperature_neg = options["tau_pos"], options["tau_neg"]
    try:
        differences = trl_grpo_differences(trl_grpo, loss_type, level, eps_high, beta, delta=delta, eps=eps,
                                           seed=ZOO_BATCH_SEED, policy_loss=policy_loss, **options)
    finally:
        trl_grpo.args.sapo_temperature_pos, trl_grpo.args.sapo_temperature_neg = 1.0, 1.05
    assert max(differences.values()) <= TOLERANCE, differences


def test_the_trl_batch_reaches_the_zoos_edges():
    """The batch the zoo rows run on reaches past dual-clip's floor c = 1.25 (Â < 0, r > c, at both levels) and
    past CISPO's cap 1.28 on both signs of Â, so those rows would catch a floor or a cap left out."""
    batch = _grpo_batch(ZOO_BATCH_SEED)
    mask = batch["completion_mask"]
    ratio = torch.exp(batch["logp"] - batch["old_per_token_logps"])
    negative = batch["advantages"] < 0
    assert (mask.bool() & negative[:, None] & (ratio > 1.25)).any()
    assert (negative & (sequence_ratio(batch["logp"], batch["old_per_token_logps"], mask) > 1.25)).any()
    for sign in (negative, ~negative):
        assert (mask.bool() & sign[:, None] & (ratio > 1.28)).any()


def test_the_trl_batch_exercises_both_clip_sides(trl_grpo):
    batch = _grpo_batch()
    args = (batch["logp"], batch["old_per_token_logps"], None, batch["advantages"], batch["completion_mask"], EPS, 0.0)
    _, stats = grpo_loss(*args, eps_high=EPS_HIGH)
    _, seq_stats = grpo_loss(*args, eps_high=EPS_HIGH, importance_sampling_level="sequence")
    assert stats["clip_frac_low"] > 0 and stats["clip_frac_high"] > 0
    assert seq_stats["clip_frac"] > 0


@pytest.fixture(scope="module")
def trl_dpo(tmp_path_factory):
    """A real DPOTrainer on the tiny model, reading log p_ref from the batch; its model is replaced by the
    benchmarks' stand-in that returns the per-token log-probs under test."""
    pytest.importorskip("trl", reason="TRL is not installed (pip install trl==1.16.0 to run the TRL cross-checks)")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import DPOConfig, DPOTrainer

    from minirlhf.models import load_model

    sys.path.insert(0, str(ROOT / "benchmarks"))
    from _trl_common import FixedLogProbModel

    model, tokenizer = load_model("tiny", device="cpu")
    args = DPOConfig(output_dir=str(tmp_path_factory.mktemp("dpo")), per_device_train_batch_size=4, use_cpu=True,
                     bf16=False, report_to="none", save_strategy="no", disable_tqdm=True, max_length=32, beta=0.3)
    trainer = DPOTrainer(model=model, ref_model=copy.deepcopy(model), processing_class=tokenizer, args=args,
                         train_dataset=Dataset.from_list([{"prompt": "The film", "chosen": " was great",
                                                           "rejected": " was dull"}] * 4))
    trainer.precompute_ref_logps = True
    trainer.model.train()
    return trainer, FixedLogProbModel


def _dpo_batch(B: int = 5, L: int = 9, seed: int = 0) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """[chosen; rejected] rows (2B, L): a 1-2 token prompt then 1-6 completion tokens, and per-token log-probs
    (2B, L-1) for the label at column t+1."""
    g = torch.Generator().manual_seed(seed)
    prompt = torch.randint(1, 3, (2 * B,), generator=g)
    end = prompt + torch.randint(1, L - 2, (2 * B,), generator=g)
    cols = torch.arange(L)[None, :]
    batch = {"input_ids": torch.randint(2, 50, (2 * B, L), generator=g),
             "attention_mask": (cols < end[:, None]).long(),
             "completion_mask": ((cols >= prompt[:, None]) & (cols < end[:, None])).long()}
    token_logps = -torch.rand(2 * B, L - 1, generator=g, dtype=F64) * 2 * batch["completion_mask"][:, 1:]
    sums = token_logps.sum(-1)
    batch["ref_chosen_logps"] = sums[:B] + 0.5 * torch.randn(B, generator=g, dtype=F64)
    batch["ref_rejected_logps"] = sums[B:] + 0.5 * torch.randn(B, generator=g, dtype=F64)
    return batch, token_logps


def trl_dpo_differences(trl_dpo, loss_types: list[str], loss_weights: list[float], **options) -> dict[str, float]:
    trainer, stand_in = trl_dpo
    batch, token_logps = _dpo_batch()
    trainer.loss_types, trainer.loss_weights = loss_types, loss_weights
    trl_logps = token_logps.clone().requires_grad_(True)
    trl_loss = trainer._compute_loss(stand_in(trl_logps), batch, return_outputs=False)
    (trl_grad,) = torch.autograd.grad(trl_loss, trl_logps)
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    ours_logps = token_logps.clone().requires_grad_(True)
    seq, lengths = (ours_logps * batch["completion_mask"][:, 1:]).sum(-1), batch["completion_mask"].sum(-1)
    B = len(seq) // 2
    losses, r_w, r_l = dpo_loss(seq[:B], seq[B:], batch["ref_chosen_logps"], batch["ref_rejected_logps"],
                                trainer.beta, chosen_lengths=lengths[:B], rejected_lengths=lengths[B:], **options)
    (grad,) = torch.autograd.grad(losses.mean(), ours_logps)
    return {"loss": abs(losses.mean().item() - trl_loss.item()), "gradient": (grad - trl_grad).abs().max().item(),
            "rewards/chosen": abs(r_w.mean().item() - metrics["rewards/chosen"]),
            "rewards/rejected": abs(r_l.mean().item() - metrics["rewards/rejected"])}


@pytest.mark.parametrize("alpha", [0.5, 2.0])
def test_rpo_matches_trl_sigmoid_plus_sft(trl_dpo, alpha):
    """TRL 1.16 has no rpo_alpha any more: RPO is loss_type=["sigmoid", "sft"], loss_weights=[1, α], its "sft"
    term the mean NLL over every chosen completion token of the batch."""
    differences = trl_dpo_differences(trl_dpo, ["sigmoid", "sft"], [1.0, alpha], rpo_alpha=alpha)
    assert max(differences.values()) <= TOLERANCE, differences


def test_ipo_mean_matches_trl_ipo_and_sum_does_not(trl_dpo):
    """TRL's ipo divides each log-ratio by its completion's token count: our ipo_normalisation="mean". The
    default "sum" (the paper's) differs from it whenever the answers are longer than one token."""
    differences = trl_dpo_differences(trl_dpo, ["ipo"], [1.0], loss_type="ipo", ipo_normalisation="mean")
    assert max(differences.values()) <= TOLERANCE, differences
    summed = trl_dpo_differences(trl_dpo, ["ipo"], [1.0], loss_type="ipo")
    assert summed["loss"] > 1e-3


def test_soft_overlong_punishment_matches_trl():
    pytest.importorskip("trl", reason="TRL is not installed (pip install trl==1.16.0 to run the TRL cross-checks)")
    from trl.rewards import get_soft_overlong_punishment

    ids = [[5] * n for n in range(0, 14)]
    for max_len, cache in ((10, 4), (10, 0), (10, 10), (12, 5)):
        theirs = get_soft_overlong_punishment(max_len, cache)(completion_ids=ids)
        ours = soft_overlong_punishment(max_len, cache)(["p"] * len(ids), ["c"] * len(ids), completion_ids=ids)
        assert ours == theirs, (max_len, cache)
