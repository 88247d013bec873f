"""A short property/fuzz pass, bounded in time: the preference loader on arbitrary bytes, and the losses on
arbitrary finite inputs (finite outputs and gradients, and the invariances their equations promise)."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirlhf.data import PreferencePair, load_preference_pairs
from minirlhf.losses import (
    DPO_LOSS_TYPES,
    GRPO_SCALES,
    bradley_terry_loss,
    dpo_loss,
    gae,
    grpo_advantages,
    grpo_loss,
    kl_k3,
    masked_whiten,
    ppo_clip_loss,
    reinforce_loss,
    rloo_advantages,
    value_loss,
)

FAST = settings(max_examples=40, deadline=2000)  # ~1-2 s per property on one CPU thread

# ----------------------------------------------------------------------------- the preference loader

FIELDS = st.sampled_from(["prompt", "chosen", "rejected", "other"])
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(FIELDS | st.text(max_size=4), inner, max_size=4),
    max_leaves=8,
)
LINES = st.one_of(
    st.binary(max_size=40),  # anything, including invalid UTF-8 and stray newlines
    st.text(max_size=40).map(str.encode),
    JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    st.fixed_dictionaries({"prompt": st.text(max_size=8), "chosen": st.text(max_size=8),
                           "rejected": st.text(max_size=8)}).map(lambda v: json.dumps(v).encode()),
)


@FAST
@given(lines=st.lists(LINES, max_size=6), skip_invalid=st.booleans())
def test_loader_parses_or_names_file_and_line(lines, skip_invalid):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "fuzz.jsonl"
        path.write_bytes(b"\n".join(lines))
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # skip_invalid reports skipped rows with a warning
                pairs = load_preference_pairs(path, skip_invalid=skip_invalid)
        except ValueError as err:
            message = str(err)
            assert str(path) in message, message
            assert ", line " in message or "is empty" in message or "no valid preference pair" in message, message
        else:
            assert pairs and all(isinstance(p, PreferencePair) for p in pairs)


# ----------------------------------------------------------------------------- the losses


def _finite(*tensors: torch.Tensor) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


@st.composite
def batches(draw):
    """A ragged batch of B sequences (lengths >= 1) in G-groups, with finite values and rewards of any scale and
    log-probs in [-30, 0], the range a sampled token can have (|log ratio| <= 30; beyond ~88 a float32 exp(log
    ratio) overflows, which no real batch reaches)."""
    group_size, groups = draw(st.integers(2, 4)), draw(st.integers(1, 3))
    B, T = group_size * groups, draw(st.integers(1, 5))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    scale = draw(st.sampled_from([1e-3, 1.0, 10.0]))
    lengths = torch.randint(1, T + 1, (B,), generator=g)
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    logp, old_logp, ref_logp = (-torch.rand(B, T, generator=g) * 30 for _ in range(3))
    return {
        "group_size": group_size, "mask": mask, "logp": logp.requires_grad_(), "old_logp": old_logp,
        "ref_logp": ref_logp,
        "rewards": torch.randn(B, generator=g) * 10 * scale, "values": torch.randn(B, T, generator=g) * 10,
        "advantages": torch.randn(B, T, generator=g) * 10 * scale,
    }


@FAST
@given(b=batches(), scale=st.sampled_from(GRPO_SCALES), beta=st.sampled_from([0.0, 0.04, 1.0]))
def test_policy_losses_are_finite_with_finite_gradients(b, scale, beta):
    advantages = grpo_advantages(b["rewards"], b["group_size"], scale=scale)
    losses = [
        grpo_loss(b["logp"], b["old_logp"], b["ref_logp"] if beta else None, advantages, b["mask"], 0.2, beta)[0],
        ppo_clip_loss(b["logp"], b["old_logp"], b["advantages"], b["mask"], 0.2)[0],
        reinforce_loss(b["logp"], rloo_advantages(b["rewards"], b["group_size"]), b["mask"]),
        kl_k3(b["logp"], b["ref_logp"]).mean(),
    ]
    for loss in losses:
        (grad,) = torch.autograd.grad(loss, b["logp"])
        assert _finite(loss, grad)
    advantages, returns = gae(b["advantages"], b["values"], b["mask"], gamma=1.0, lam=0.95)
    values = b["values"].clone().requires_grad_()
    v_loss = value_loss(values, b["values"], returns, b["mask"], clip=0.2)
    assert _finite(advantages, returns, v_loss, torch.autograd.grad(v_loss, values)[0])
    assert _finite(masked_whiten(b["advantages"], b["mask"]))


@FAST
@given(b=batches(), shift=st.floats(-50, 50), per_group=st.lists(st.floats(-50, 50), min_size=3, max_size=3))
def test_advantages_ignore_what_their_baselines_remove(b, shift, per_group):
    """Adding one constant to every reward changes no advantage; a constant per group changes neither the
    leave-one-out nor the group-normalised ones."""
    rewards, G = b["rewards"].double(), b["group_size"]
    group_shift = torch.tensor(per_group[: len(rewards) // G], dtype=torch.float64).repeat_interleave(G)
    for scale in GRPO_SCALES:
        torch.testing.assert_close(grpo_advantages(rewards + shift, G, scale), grpo_advantages(rewards, G, scale))
    for scale in ("group", "none"):
        torch.testing.assert_close(grpo_advantages(rewards + group_shift, G, scale), grpo_advantages(rewards, G, scale))
    torch.testing.assert_close(rloo_advantages(rewards + group_shift, G), rloo_advantages(rewards, G))


@FAST
@given(
    logps=st.lists(st.floats(-200, 0), min_size=4, max_size=4),
    shift=st.floats(-50, 50),
    beta=st.floats(0.01, 5.0),
    loss_type=st.sampled_from(DPO_LOSS_TYPES),
)
def test_dpo_and_bradley_terry_depend_only_on_differences(logps, shift, beta, loss_type):
    """DPO sees only β[(log p_θ - log p_ref)(y_w) - (log p_θ - log p_ref)(y_l)]: shifting a sequence's policy and
    reference log-probs together, or both policy log-probs together, changes nothing. Bradley-Terry sees only
    RM(y_w) - RM(y_l)."""
    chosen, rejected, ref_chosen, ref_rejected = (torch.tensor([v], dtype=torch.float64) for v in logps)
    base = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, beta, loss_type)[0]
    assert _finite(base)
    same_sequence = dpo_loss(chosen + shift, rejected, ref_chosen + shift, ref_rejected, beta, loss_type)[0]
    both_policy = dpo_loss(chosen + shift, rejected + shift, ref_chosen, ref_rejected, beta, loss_type)[0]
    torch.testing.assert_close(same_sequence, base)
    torch.testing.assert_close(both_policy, base)
    bt = bradley_terry_loss(chosen, rejected)
    torch.testing.assert_close(bradley_terry_loss(chosen + shift, rejected + shift), bt)
