"""The pure functions keep the losses' contract at their edges: a loss of finite inputs never returns inf or NaN
(it returns a finite value, or refuses naming the log-ratio that overflows), GAE refuses a non-finite reward or value
on a real token (padding may hold anything), whitening has a positive floor (a constant whitens to 0), and the pair
accuracy of no pairs is refused rather than NaN."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirlhf import losses as L

FUZZ = settings(max_examples=150, deadline=None)
extreme = st.one_of(st.floats(-1e4, 1e4), st.sampled_from([-3e38, -1e30, -300.0, -89.0, 89.0, 300.0, 1e30, 3e38]))


def _tensor(values, shape):
    return torch.tensor(values, dtype=torch.float32).reshape(shape)


def _finite_or_refused(call) -> None:
    try:
        out = call()
    except ValueError as err:
        assert "overflows float32" in str(err) and "reaches" in str(err)
        return
    loss = out[0] if isinstance(out, tuple) else out
    assert torch.isfinite(loss).all(), f"a loss of finite inputs came out {loss}"


@FUZZ
@given(st.lists(extreme, min_size=6, max_size=6), st.lists(extreme, min_size=6, max_size=6),
       st.lists(st.floats(-5, 5), min_size=2, max_size=2), st.sampled_from(["grpo", "ppo"]))
def test_a_clipped_loss_of_finite_log_probs_is_finite_or_names_the_log_ratio(logp, old_logp, advantages, which):
    logp, old_logp = _tensor(logp, (2, 3)).clamp(max=0), _tensor(old_logp, (2, 3)).clamp(max=0)
    mask, adv = torch.ones(2, 3), torch.tensor(advantages)
    if which == "grpo":
        _finite_or_refused(lambda: L.grpo_loss(logp, old_logp, None, adv, mask, eps=0.2, beta=0.0))
    else:
        _finite_or_refused(lambda: L.ppo_clip_loss(logp, old_logp, adv, mask, eps=0.2))


@FUZZ
@given(st.lists(extreme, min_size=8, max_size=8), st.sampled_from(["sigmoid", "ipo", "hinge"]))
def test_a_preference_loss_of_finite_scores_is_finite_or_names_the_difference(values, loss_type):
    pc, pr, rc, rr = (torch.tensor(values[i:i + 2]) for i in range(0, 8, 2))
    _finite_or_refused(lambda: L.dpo_loss(pc, pr, rc, rr, beta=0.1, loss_type=loss_type))
    _finite_or_refused(lambda: L.bradley_terry_loss(pc, pr))


@FUZZ
@given(st.integers(0, 5), st.integers(0, 5), st.sampled_from([math.nan, math.inf, -math.inf]),
       st.sampled_from(["rewards", "values"]))
def test_gae_refuses_a_non_finite_value_on_a_real_token_only(length, at, bad, where):
    mask = (torch.arange(6) < length).float()[None]  # (1, 6): `length` real tokens
    rewards, values = torch.zeros(1, 6), torch.zeros(1, 6)
    (rewards if where == "rewards" else values)[0, at] = bad
    if at < length:
        with pytest.raises(ValueError, match=rf"{where} holds 1 inf/NaN value\(s\) on real tokens, first at index "
                                             rf"\(0, {at}\)"):
            L.gae(rewards, values, mask, 1.0, 0.95)
    else:
        advantages, returns = L.gae(rewards, values, mask, 1.0, 0.95)
        assert torch.isfinite(advantages).all() and torch.isfinite(returns).all()


def test_gae_of_an_empty_batch_is_empty():
    advantages, returns = L.gae(torch.zeros(0, 4), torch.zeros(0, 4), torch.zeros(0, 4), 1.0, 0.95)
    assert advantages.shape == returns.shape == (0, 4)


@pytest.mark.parametrize("eps", [0.0, -1e-8, math.nan, math.inf])
def test_whitening_needs_a_positive_floor(eps):
    with pytest.raises(ValueError, match="eps must be > 0"):
        L.masked_whiten(torch.ones(2, 3), torch.ones(2, 3), eps=eps)


@FUZZ
@given(st.floats(-1e6, 1e6), st.integers(1, 6))
def test_a_constant_whitens_to_zero(value, n):
    assert torch.equal(L.masked_whiten(torch.full((1, n), value), torch.ones(1, n)), torch.zeros(1, n))


def test_the_pair_accuracy_of_no_pairs_is_refused():
    with pytest.raises(ValueError, match="pair_accuracy of 0 pairs is undefined"):
        L.pair_accuracy(torch.zeros(0), torch.zeros(0))
