"""GRPO since R1 (issue 25) on the configs, the loops and the CLI: clip-higher, GSPO, dynamic sampling, overlong
handling, REINFORCE++, RPO/IPO normalisation, the recipes, per-reward logging and KL to p_ref at evaluation."""

from __future__ import annotations

import pytest
import torch

from minirlhf.losses import dpo_loss
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.preference import DPOConfig, preference_loss

TINY = dict(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=4, eval_every=0, progress=False)


def test_grpo_logs_both_clip_sides_at_token_and_sequence_level():
    for level in ("token", "sequence"):
        config = GRPOConfig(eps_high=0.28, importance_sampling_level=level, epochs=2, **TINY)
        history = train_grpo(None, config)[2]
        assert {"clip_frac", "clip_frac_low", "clip_frac_high"} <= history[-1].keys()
        row = history[-1]
        assert row["clip_frac_low"] + row["clip_frac_high"] == pytest.approx(row["clip_frac"])


def test_ppo_takes_eps_high_and_logs_both_clip_sides():
    history = train_ppo(None, PPOConfig(eps_high=0.28, epochs=2, minibatch_size=None, **TINY))[2]
    assert {"clip_frac_low", "clip_frac_high"} <= history[-1].keys()


@pytest.mark.parametrize("config_cls, field, value", [
    (GRPOConfig, "eps_high", 0.0), (GRPOConfig, "importance_sampling_level", "word"), (PPOConfig, "eps_high", -1.0),
])
def test_bad_r1_grpo_fields_name_the_field(config_cls, field, value):
    with pytest.raises(ValueError, match=f"{config_cls.__name__}.{field}"):
        config_cls(**{field: value})


def test_preference_loss_passes_token_counts_rpo_and_ipo_normalisation():
    g = torch.Generator().manual_seed(0)
    chosen, rejected, ref_chosen, ref_rejected = (-torch.rand(4, generator=g) * 10 for _ in range(4))
    lengths = torch.tensor([3.0, 5.0, 2.0, 7.0]), torch.tensor([4.0, 1.0, 6.0, 2.0])
    for fields in ({"rpo_alpha": 0.5}, {"loss_type": "ipo", "ipo_normalisation": "mean"}):
        config = DPOConfig(**fields)
        got = preference_loss(config, chosen, rejected, ref_chosen, ref_rejected, *lengths)[0]
        plain = preference_loss(DPOConfig(loss_type=config.loss_type), chosen, rejected, ref_chosen, ref_rejected,
                                *lengths)[0]
        want = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, config.beta, config.loss_type,
                        chosen_lengths=lengths[0], rejected_lengths=lengths[1],
                        ipo_normalisation=config.ipo_normalisation, rpo_alpha=config.rpo_alpha)[0]
        assert torch.allclose(got, want) and not torch.allclose(got, plain)


@pytest.mark.parametrize("fields", [{"loss_type": "simpo", "rpo_alpha": 0.5}, {"loss_type": "kto", "rpo_alpha": 1.0},
                                    {"loss_type": "sigmoid", "ipo_normalisation": "mean"},
                                    {"ipo_normalisation": "max"}, {"rpo_alpha": -1.0}])
def test_dpo_options_outside_their_losses_are_refused(fields):
    with pytest.raises(ValueError, match="DPOConfig"):
        DPOConfig(**fields)
