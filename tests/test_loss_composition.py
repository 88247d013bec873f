"""Losses a student can compose: every token-level loss is `aggregate` of its per-token term, `aggregate`'s divisor
is the caller's constant, and `grpo_advantages`' two numbers each do one job. Generated examples (hypothesis)."""

from __future__ import annotations

import inspect

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from test_loss_contract import _public_functions

from minirlhf import losses
from minirlhf.losses import AGGREGATIONS, aggregate, grpo_advantages, masked_sum

F64 = torch.float64
VOCAB = 7  # the distillation loss's next-token distributions


def _inputs(seed: int, B: int, T: int, ragged: bool) -> dict[str, torch.Tensor]:
    """Every tensor a token-level loss takes, (B, T) or (B,), float64, with a mask of 1..T real tokens per row
    (and inf in the padding, which must not matter)."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, T + 1, (B,), generator=g) if ragged else torch.full((B,), T)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F64)
    tensors = {
        "logp": -torch.rand(B, T, generator=g, dtype=F64) * 3,
        "old_logp": -torch.rand(B, T, generator=g, dtype=F64) * 3,
        "ref_logp": -torch.rand(B, T, generator=g, dtype=F64) * 3,
        "values": torch.randn(B, T, generator=g, dtype=F64),
        "old_values": torch.randn(B, T, generator=g, dtype=F64),
        "returns": torch.randn(B, T, generator=g, dtype=F64),
        "logits": torch.randn(B, T, VOCAB, generator=g, dtype=F64) * 2,  # (B, T, V) the student's
        "teacher_logits": torch.randn(B, T, VOCAB, generator=g, dtype=F64) * 2,  # (B, T, V) the teacher's
    }
    padded = {name: torch.where(mask.bool().view(B, T, *[1] * (t.dim() - 2)), t, torch.full_like(t, float("inf")))
              for name, t in tensors.items()}
    return {**padded, "mask": mask, "advantages": torch.randn(B, generator=g, dtype=F64)}


# per-token loss -> (its scalar loss, the aggregations the scalar offers, extra settings drawn per example)
PAIRS = {
    "reinforce_per_token_loss": ("reinforce_loss", AGGREGATIONS),
    "ppo_clip_per_token_loss": ("ppo_clip_loss", ("token-mean",)),
    "value_per_token_loss": ("value_loss", ("token-mean",)),
    "grpo_per_token_loss": ("grpo_loss", AGGREGATIONS),
    "clip_cov_per_token_loss": ("clip_cov_loss", AGGREGATIONS),
    "kl_cov_per_token_loss": ("kl_cov_loss", AGGREGATIONS),
    "generalized_jsd_per_token_loss": ("generalized_jsd_loss", AGGREGATIONS),
}


def test_every_per_token_loss_is_paired_with_its_scalar():
    """A new *_per_token_loss fails here until the property below covers it."""
    per_token = {name for name in _public_functions() if name.endswith("_per_token_loss")}
    assert per_token == set(PAIRS)
    assert all(hasattr(losses, scalar) for scalar, _ in PAIRS.values())


def _settings(name: str, draw_options: dict) -> dict:
    """The non-tensor settings of one loss, from the drawn options."""
    if name == "ppo_clip_per_token_loss":
        return {"eps": 0.2, "eps_high": draw_options["eps_high"]}
    if name == "value_per_token_loss":
        return {"clip": draw_options["value_clip"]}
    if name == "grpo_per_token_loss":
        policy_loss = draw_options["policy_loss"]  # gmpo is a sequence ratio of its own: token level only
        return {"eps": 0.2, "beta": draw_options["beta"], "eps_high": draw_options["eps_high"],
                "importance_sampling_level": "token" if policy_loss == "gmpo" else draw_options["level"],
                "policy_loss": policy_loss}
    if name == "clip_cov_per_token_loss":  # every candidate drawn (n ≥ N): the same tokens in each call
        return {"eps": 0.2, "eps_high": draw_options["eps_high"], "cov_ratio": 1.0, "clip_cov_lb": -1e9}
    if name == "kl_cov_per_token_loss":
        return {"cov_ratio": 0.5}
    if name == "generalized_jsd_per_token_loss":  # both ends (forward and reverse KL) and the JSD between
        return {"beta": {0.0: 0.0, 0.04: 0.5}[draw_options["beta"]] if draw_options["level"] == "token" else 1.0}
    return {}


@pytest.mark.parametrize("name", sorted(PAIRS))
@given(seed=st.integers(0, 2**16), B=st.integers(1, 4), T=st.integers(1, 5), ragged=st.booleans(),
       pick=st.integers(0, 3), eps_high=st.sampled_from([None, 0.28]), value_clip=st.sampled_from([None, 0.2]),
       beta=st.sampled_from([0.0, 0.04]), level=st.sampled_from(["token", "sequence"]),
       policy_loss=st.sampled_from(losses.POLICY_LOSSES))
def test_the_scalar_loss_is_aggregate_of_the_per_token_loss(name, seed, B, T, ragged, pick, eps_high, value_clip,
                                                             beta, level, policy_loss):
    """loss(...) == aggregate(per_token_loss(...), mask, aggregation), value and gradient, to the last bit."""
    scalar_name, aggregations = PAIRS[name]
    per_token_fn, scalar_fn = getattr(losses, name), getattr(losses, scalar_name)
    aggregation = aggregations[pick % len(aggregations)]
    settings = _settings(name, dict(eps_high=eps_high, value_clip=value_clip, beta=beta, level=level,
                                    policy_loss=policy_loss))
    tensors = _inputs(seed, B, T, ragged)
    wanted = set(inspect.signature(per_token_fn).parameters)
    arguments = {k: v for k, v in tensors.items() if k in wanted} | settings
    trained = next(name for name in ("values", "logits", "logp") if name in wanted)

    def run(fn, **extra):
        leaf = arguments[trained].clone().requires_grad_(True)
        out = fn(**arguments | {trained: leaf} | extra)
        out = out[0] if isinstance(out, tuple) else out
        (grad,) = torch.autograd.grad(out, leaf)
        return out.detach(), grad

    per_token, _ = run(lambda **a: per_token_fn(**a).sum())  # the (B, T) term itself is finite everywhere
    assert torch.isfinite(per_token)
    with_aggregation = {"aggregation": aggregation} if len(aggregations) > 1 else {}
    scalar, scalar_grad = run(scalar_fn, **with_aggregation)
    composed, composed_grad = run(lambda **a: aggregate(per_token_fn(**a), tensors["mask"], aggregation))
    assert torch.equal(scalar, composed) and torch.equal(scalar_grad, composed_grad)


@given(seed=st.integers(0, 2**16), B=st.integers(1, 4), T=st.integers(1, 5))
def test_the_bradley_terry_loss_is_the_mean_of_its_per_pair_losses(seed, B, T):
    g = torch.Generator().manual_seed(seed)
    chosen, rejected = torch.randn(B, generator=g, dtype=F64), torch.randn(B, generator=g, dtype=F64)
    per_pair = losses.bradley_terry_per_pair_loss(chosen, rejected)
    assert per_pair.shape == (B,)
    assert torch.equal(losses.bradley_terry_loss(chosen, rejected), per_pair.mean())


@given(seed=st.integers(0, 2**16), B=st.integers(1, 4), T=st.integers(1, 6),
       divisor=st.one_of(st.integers(1, 10**6), st.floats(1e-3, 1e6)))
def test_aggregate_with_a_divisor_is_the_masked_sum_over_it(seed, B, T, divisor):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=F64)
    mask = torch.rand(B, T, generator=g) < 0.7
    assert torch.equal(aggregate(x, mask, "constant", divisor=divisor), masked_sum(x, mask) / divisor)
    assert torch.equal(aggregate(x, mask, "constant", divisor=B * T), aggregate(x, mask, "constant"))


@pytest.mark.parametrize("divisor, match", [
    (0, "divisor must be > 0"), (-2.0, "divisor must be > 0"), (float("inf"), "divisor must be > 0 and finite"),
    (float("nan"), "divisor must be > 0"), (True, "divisor must be > 0"), ("8", "divisor must be > 0"),
])
def test_a_bad_divisor_is_named(divisor, match):
    with pytest.raises(ValueError, match=match):
        aggregate(torch.ones(2, 3), torch.ones(2, 3), "constant", divisor=divisor)


@pytest.mark.parametrize("aggregation", [a for a in AGGREGATIONS if a != "constant"])
def test_a_divisor_belongs_to_the_constant_aggregation_only(aggregation):
    with pytest.raises(ValueError, match=rf"divisor only applies to aggregation='constant', got .*{aggregation}"):
        aggregate(torch.ones(2, 3), torch.ones(2, 3), aggregation, divisor=6)


def test_the_defaults_of_grpo_advantages_are_the_librarys_constants():
    parameters = inspect.signature(grpo_advantages).parameters
    assert parameters["eps"].default == losses.CONSTANT_GROUP_STD
    assert parameters["std_floor"].default == losses.STD_FLOOR


_SCALES = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 0.1, 1.0, 10.0]  # stds, thresholds and floors on every side of each other
_level = st.sampled_from(_SCALES)
_spreads = st.lists(st.sampled_from([0.0, *_SCALES]), min_size=1, max_size=4)  # one per group; 0 = constant


def _grouped_rewards(seed: int, spreads: list[float], G: int) -> torch.Tensor:
    """(len(spreads) · G,) rewards around 0.5, group g spread by spreads[g] (exactly constant when 0)."""
    noise = torch.randn(len(spreads), G, generator=torch.Generator().manual_seed(seed), dtype=F64)
    return (0.5 + noise * torch.tensor(spreads, dtype=F64)[:, None]).reshape(-1)


@given(seed=st.integers(0, 2**16), spreads=_spreads, G=st.integers(2, 5), eps=_level, floor_a=_level,
       floor_b=_level, scale=st.sampled_from(["group", "batch", "none"]))
def test_the_std_floor_never_decides_which_groups_are_constant(seed, spreads, G, eps, floor_a, floor_b, scale):
    """Whatever the floor, the groups set to exactly 0 are those whose std is below ε: the same groups."""
    rewards = _grouped_rewards(seed, spreads, G)
    std = rewards.view(-1, G).std(1)
    for floor in (floor_a, floor_b):
        advantages = grpo_advantages(rewards, G, scale=scale, eps=eps, std_floor=floor).view(-1, G)
        assert torch.equal((advantages == 0).all(1), std < eps)


@given(seed=st.integers(0, 2**16), spreads=_spreads, G=st.integers(2, 5), floor=_level, eps_a=_level,
       eps_b=_level, scale=st.sampled_from(["group", "batch", "none"]))
def test_the_constant_threshold_never_changes_the_divisor(seed, spreads, G, floor, eps_a, eps_b, scale):
    """Whatever ε, a group that is not constant gets (R - mean) / max(std, floor): the same numbers."""
    rewards = _grouped_rewards(seed, spreads, G)
    R = rewards.view(-1, G)
    divisor = {"group": R.std(1, keepdim=True).clamp_min(floor), "batch": rewards.std().clamp_min(floor),
               "none": torch.tensor(1.0, dtype=F64)}[scale]
    expected = (R - R.mean(1, keepdim=True)) / divisor
    a = grpo_advantages(rewards, G, scale=scale, eps=eps_a, std_floor=floor).view(-1, G)
    b = grpo_advantages(rewards, G, scale=scale, eps=eps_b, std_floor=floor).view(-1, G)
    both = R.std(1) >= max(eps_a, eps_b)  # groups neither threshold calls constant
    assert torch.equal(a[both], b[both]) and torch.equal(a[both], expected[both])


@pytest.mark.parametrize("name", ["eps", "std_floor"])
@pytest.mark.parametrize("value", [0.0, -1e-4, float("inf"), float("nan")])
def test_a_bad_threshold_or_floor_is_named(name, value):
    with pytest.raises(ValueError, match=rf"^{name} must be > 0"):
        grpo_advantages(torch.tensor([0.0, 1.0, 1.0, 1.0]), 2, **{name: value})
