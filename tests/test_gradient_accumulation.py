"""Gradient accumulation: k micro-batches, each weighted by its share of the step's batch, make the same update as
the one large batch, for every trainer and every way a loss aggregates its tokens.

The runs step with plain SGD, θ ← θ - η g, in place of AdamW: a difference of weights is then a difference of
gradients. Adam divides each gradient by its own running scale, so a weight whose exact gradient is 0 (the key
bias of attention: softmax ignores a shift shared by a row's scores) moves by ~η on rounding noise alone, in
either run. A normaliser that weighs the micro-batches unequally (the mean of their own token means) moves the
weights apart; a uniform error (the sum of k means, k times too large) is clipped away by max_grad_norm, so the
gradient norm before clipping and the logged loss, which see the scale, are compared too.
"""

from __future__ import annotations

import pytest
import torch

from minirlhf.data import PreferencePair, load_preference_pairs
from minirlhf.models import disable_dropout, load_model
from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.kto import KTOConfig, train_kto
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.reward_model import RewardModel, RewardModelConfig, train_reward_model
from minirlhf.trainers.sft import SFTConfig, train_sft

QUIET = dict(seed=0, device="cpu", eval_every=0, progress=False, lr=0.5)  # SGD's η: steps of norm ≤ 0.5
# one batch of fresh samples (a second would be sampled from weights that differ by rounding), two epochs of two
# minibatches of 8: four optimizer steps, each of k micro-batches
ONLINE = dict(QUIET, steps=1, prompts_per_step=4, group_size=4, max_new_tokens=6, minibatch_size=8)
PREFERENCE = dict(QUIET, steps=2, batch_size=8)


def _pairs() -> list[PreferencePair]:
    return load_preference_pairs("sentiment")[:64]  # a few pairs: DPO's precomputed p_ref scores every one


def _policy(name: str = "tiny-sft"):
    model, tokenizer = load_model(name, device="cpu")
    return disable_dropout(model), tokenizer  # SFT and the reward model train with dropout: off, to compare


def _reward_model():
    return disable_dropout(RewardModel.from_pretrained_lm("tiny", device="cpu"))


RUNS = {
    "grpo-token-mean": lambda k: train_grpo(arithmetic.task(), GRPOConfig(
        **ONLINE, epochs=2, aggregation="token-mean", gradient_accumulation_steps=k), *_policy()),
    "grpo-seq-mean": lambda k: train_grpo(arithmetic.task(), GRPOConfig(
        **ONLINE, epochs=2, beta=0.04, aggregation="seq-mean", gradient_accumulation_steps=k), *_policy()),
    "grpo-constant": lambda k: train_grpo(arithmetic.task(), GRPOConfig(
        **ONLINE, epochs=2, scale="none", aggregation="constant", gradient_accumulation_steps=k), *_policy()),
    "reinforce-rloo": lambda k: train_reinforce(arithmetic.task(), ReinforceConfig(
        **ONLINE, gradient_accumulation_steps=k), *_policy()),
    "reinforce++": lambda k: train_reinforce(arithmetic.task(), ReinforceConfig(
        **ONLINE, baseline="reinforce++", gradient_accumulation_steps=k), *_policy()),
    "ppo": lambda k: train_ppo(arithmetic.task(), PPOConfig(
        **(ONLINE | dict(group_size=1, prompts_per_step=16)), epochs=2, gradient_accumulation_steps=k), *_policy()),
    "sft": lambda k: train_sft(arithmetic.sft_data(), SFTConfig(
        **QUIET, steps=2, batch_size=8, gradient_accumulation_steps=k), *_policy("tiny")),
    "dpo": lambda k: train_dpo(_pairs(), DPOConfig(
        **PREFERENCE, gradient_accumulation_steps=k), *_policy("tiny")),
    "dpo-rpo-precomputed": lambda k: train_dpo(_pairs(), DPOConfig(
        **PREFERENCE, rpo_alpha=0.5, precompute_ref=True, gradient_accumulation_steps=k), *_policy("tiny")),
    "kto": lambda k: train_kto(_pairs(), KTOConfig(
        **PREFERENCE, gradient_accumulation_steps=k), *_policy("tiny")),
    "reward-model": lambda k: train_reward_model(_pairs(), RewardModelConfig(
        **PREFERENCE, gradient_accumulation_steps=k), _reward_model()),
}


PREFERENCE_RUNS = ("sft", "dpo", "dpo-rpo-precomputed", "kto")  # these start from the base model "tiny"


def _weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


@pytest.fixture
def sgd(monkeypatch):
    """The trainers' AdamW replaced by plain SGD at the same learning rate."""
    monkeypatch.setattr(torch.optim, "AdamW", lambda params, lr, **_: torch.optim.SGD(params, lr=lr))


@pytest.mark.parametrize("name", RUNS)
def test_accumulated_micro_batches_make_the_large_batch_update(name, sgd):
    torch.set_num_threads(1)
    whole, _, whole_history = RUNS[name](1)
    accumulated, _, accumulated_history = RUNS[name](4)
    # the same batches were drawn (the accumulation consumes no random numbers)
    assert [r.get("reward") for r in whole_history] == [r.get("reward") for r in accumulated_history]
    for key in ("grad_norm", "loss"):  # they see the scale of the summed gradient, which Adam's step hides
        _, expected = whole_history.column(key)
        _, got = accumulated_history.column(key)
        assert got == pytest.approx(expected, rel=1e-5, abs=1e-6), key
    start = _weights(_reward_model() if name == "reward-model" else _policy("tiny" if name in PREFERENCE_RUNS
                                                                            else "tiny-sft")[0])
    one, many = _weights(whole), _weights(accumulated)
    moved = max((one[n] - start[n]).abs().max().item() for n in start)
    assert moved > 1e-5  # the update did move the weights
    # float32 sums in another order differ in the last bits: the tolerance is relative to the largest step (a wrong
    # normaliser is off by a share of the update, 1e-2 or more; CI has seen 3e-5 from the order alone)
    apart = max((many[n] - one[n]).abs().max().item() for n in one)
    assert apart < 1e-3 * moved, f"{name}: the accumulated update differs from the large batch's by {apart:.2e}"


@pytest.mark.parametrize(("make", "message"), [
    (lambda: SFTConfig(batch_size=6, gradient_accumulation_steps=4),
     r"SFTConfig\.gradient_accumulation_steps \(4\) must divide batch_size \(6\)"),
    (lambda: GRPOConfig(prompts_per_step=3, group_size=2, gradient_accumulation_steps=4),
     r"GRPOConfig\.gradient_accumulation_steps \(4\) must divide prompts_per_step x group_size \(6\)"),
    (lambda: PPOConfig(minibatch_size=16, gradient_accumulation_steps=3),
     r"PPOConfig\.gradient_accumulation_steps \(3\) must divide minibatch_size \(16\)"),
    (lambda: DPOConfig(batch_size=10, gradient_accumulation_steps=4),
     r"DPOConfig\.gradient_accumulation_steps \(4\) must divide batch_size \(10\)"),
    (lambda: KTOConfig(gradient_accumulation_steps=0), r"KTOConfig\.gradient_accumulation_steps must be > 0"),
])
def test_micro_batches_that_would_not_be_equal_are_refused_naming_the_field(make, message):
    with pytest.raises(ValueError, match=message):
        make()
