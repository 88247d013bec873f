"""SimPO, ORPO and KTO: properties of minirlhf.losses' versions, and cross-checks against TRL 1.16's own code.

The TRL checks build real trainers on the shipped tiny model (CPOTrainer with loss_type="simpo" and cpo_alpha=0,
ORPOTrainer, KTOTrainer) and call their loss code on log-probs we choose: `cpo_loss`, `odds_ratio_loss`, and, for
KTO, whose loss lives inside `_compute_loss`, that method with a stand-in model returning fixed per-token
log-probs. TRL is not a dependency of minirlhf: without it those tests are skipped.
"""

from __future__ import annotations

import copy
import math
import os

import pytest
import torch
from torch.autograd import gradcheck

from minirlhf.data import PreferencePair, UnpairedExample, unpaired_examples
from minirlhf.logprobs import logprobs_from_logits, response_lengths, sequence_logprobs
from minirlhf.losses import dpo_loss, kto_loss, masked_mean, orpo_loss, simpo_loss

TOLERANCE = 1e-6  # float64 throughout: minirlhf and TRL must agree to rounding
FLOAT32_TOLERANCE = 1e-5  # ORPOTrainer.odds_ratio_loss casts its inputs to float32


def _rand(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _pair_batch(B: int = 6, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """(B,) summed log-probs of chosen and rejected answers and their token counts (1..7)."""
    g = torch.Generator().manual_seed(seed)
    chosen_len = torch.randint(1, 8, (B,), generator=g)
    rejected_len = torch.randint(1, 8, (B,), generator=g)
    chosen = -torch.rand(B, generator=g, dtype=torch.float64) * 3 * chosen_len
    rejected = -torch.rand(B, generator=g, dtype=torch.float64) * 3 * rejected_len
    return chosen, rejected, chosen_len, rejected_len


# ----------------------------------------------------------------------------- SimPO


def test_simpo_by_hand_and_at_the_target_margin():
    """β = 2, γ = 1: r(y_w) = 2 · (-3/3) = -2, r(y_l) = 2 · (-8/4) = -4, gap 2, loss -log σ(2 - 1) = 0.313262.
    A gap of exactly γ gives log 2, as DPO's loss does at a gap of 0."""
    losses, r_w, r_l = simpo_loss(torch.tensor([-3.0]), torch.tensor([-8.0]), torch.tensor([3]), torch.tensor([4]),
                                  beta=2.0, gamma=1.0)
    assert (r_w.item(), r_l.item()) == (-2.0, -4.0)
    assert losses.item() == pytest.approx(-math.log(torch.sigmoid(torch.tensor(1.0)).item()))
    at_margin, _, _ = simpo_loss(torch.tensor([-3.0]), torch.tensor([-8.0]), torch.tensor([3]), torch.tensor([4]),
                                 beta=2.0, gamma=2.0)
    assert at_margin.item() == pytest.approx(math.log(2))


def test_simpo_is_dpo_without_reference_when_lengths_agree():
    """γ = 0 and |y_w| = |y_l| = ℓ: SimPO is DPO with log p_ref = 0 and β/ℓ in place of β."""
    chosen, rejected, _, _ = _pair_batch()
    length = torch.full_like(chosen, 5)
    simpo, _, _ = simpo_loss(chosen, rejected, length, length, beta=2.0, gamma=0.0)
    dpo, _, _ = dpo_loss(chosen, rejected, torch.zeros_like(chosen), torch.zeros_like(chosen), beta=2.0 / 5)
    torch.testing.assert_close(simpo, dpo)


def test_simpo_ignores_length_and_margin_raises_the_loss():
    """Repeating an answer twice (log-prob and length both doubled) changes nothing; a larger γ asks for a larger
    gap, so the loss grows with γ for every pair."""
    chosen, rejected, chosen_len, rejected_len = _pair_batch()
    once, _, _ = simpo_loss(chosen, rejected, chosen_len, rejected_len, beta=2.0, gamma=0.5)
    twice, _, _ = simpo_loss(2 * chosen, rejected, 2 * chosen_len, rejected_len, beta=2.0, gamma=0.5)
    torch.testing.assert_close(once, twice)
    wider, _, _ = simpo_loss(chosen, rejected, chosen_len, rejected_len, beta=2.0, gamma=1.5)
    assert (wider > once).all()


# ----------------------------------------------------------------------------- ORPO


def test_orpo_equal_answers_leave_only_sft_plus_lambda_log2():
    """Same average log-prob for y_w and y_l: the odds ratio is 1, L_OR = log 2, and L = L_SFT + λ log 2."""
    chosen = torch.tensor([-2.0, -6.0], dtype=torch.float64)  # averages -1 and -2
    rejected = torch.tensor([-4.0, -2.0], dtype=torch.float64)  # the same averages over other lengths
    losses, lo_w, lo_l = orpo_loss(chosen, rejected, torch.tensor([2, 3]), torch.tensor([4, 1]), lam=0.1)
    torch.testing.assert_close(lo_w, lo_l)
    torch.testing.assert_close(losses, torch.tensor([1.0, 2.0], dtype=torch.float64) + 0.1 * math.log(2))


def test_orpo_log_odds_by_hand():
    """P = 1/2 has odds 1 (log odds 0); P = 0.8 has odds 4; P = 0.1 has odds 1/9."""
    probs = torch.tensor([0.5, 0.8, 0.1], dtype=torch.float64)
    _, lo_w, lo_l = orpo_loss(probs.log(), probs.log(), torch.ones(3), torch.ones(3), lam=1.0)
    torch.testing.assert_close(lo_w, torch.tensor([0.0, math.log(4), -math.log(9)], dtype=torch.float64))
    torch.testing.assert_close(lo_l, lo_w)


def test_orpo_lambda_zero_is_sft_on_the_chosen_answer():
    chosen, rejected, chosen_len, rejected_len = _pair_batch()
    chosen, rejected = chosen.requires_grad_(True), rejected.requires_grad_(True)
    losses, _, _ = orpo_loss(chosen, rejected, chosen_len, rejected_len, lam=0.0)
    torch.testing.assert_close(losses, -chosen.detach() / chosen_len)
    grad_w, grad_l = torch.autograd.grad(losses.sum(), (chosen, rejected))
    torch.testing.assert_close(grad_w, -1.0 / chosen_len.double())
    assert (grad_l == 0).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_orpo_stays_finite_near_probability_one_and_zero(dtype):
    """Average log-probs from -1e-9 (P ≈ 1) to -60 (P ≈ 1e-26): finite losses and gradients, and the log odds
    agree with the float64 formula log P - log(1 - P) evaluated with math.log1p / math.expm1."""
    avg = torch.tensor([-1e-9, -1e-4, -0.5, -0.8, -5.0, -60.0], dtype=dtype)
    chosen = avg.clone().requires_grad_(True)
    rejected = avg.flip(0).clone().requires_grad_(True)
    ones = torch.ones(6)
    losses, lo_w, _ = orpo_loss(chosen, rejected, ones, ones, lam=0.1)
    grads = torch.autograd.grad(losses.sum(), (chosen, rejected))
    assert torch.isfinite(losses).all() and all(torch.isfinite(g).all() for g in grads)
    expected = [a - math.log(-math.expm1(a)) for a in avg.double().tolist()]
    torch.testing.assert_close(lo_w.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- KTO


def _kto_inputs(B: int = 8, M: int = 8, seed: int = 0, kl_shift: float = 0.5):
    policy, ref = -_rand(B, seed=seed).abs() * 5, -_rand(B, seed=seed + 1).abs() * 5
    desirable = torch.arange(B) % 3 != 0
    policy_kl = -_rand(M, seed=seed + 2).abs() * 5
    ref_kl = policy_kl - kl_shift + 0.1 * _rand(M, seed=seed + 3)
    return policy, ref, desirable, policy_kl, ref_kl


def test_kto_by_hand():
    """β = 1, z_ref = max(0, mean(0.5, 1.5)) = 1. Desirable r = 3: 1 - σ(2); undesirable r = 3: 1 - σ(-2)."""
    losses, rewards, z_ref = kto_loss(
        torch.tensor([3.0, 3.0]), torch.zeros(2), torch.tensor([True, False]),
        torch.tensor([0.5, 1.5]), torch.zeros(2), beta=1.0,
    )
    assert z_ref.item() == 1.0
    torch.testing.assert_close(losses, 1 - torch.sigmoid(torch.tensor([2.0, -2.0])))
    torch.testing.assert_close(rewards, torch.tensor([3.0, 3.0]))


def test_kto_symmetry_and_reference_point():
    """With λ_D = λ_U, a desirable answer d above z_ref loses as much as an undesirable one d below it, and one
    exactly at z_ref loses λ/2 whatever its label."""
    z = 0.7
    kl = (torch.tensor([z], dtype=torch.float64), torch.zeros(1, dtype=torch.float64))
    d = torch.tensor([0.3, 2.0, -1.0], dtype=torch.float64)
    up, _, _ = kto_loss(z + d, torch.zeros(3), torch.ones(3, dtype=torch.bool), *kl, beta=0.5)
    down, _, _ = kto_loss(z - d, torch.zeros(3), torch.zeros(3, dtype=torch.bool), *kl, beta=0.5)
    torch.testing.assert_close(up, down)
    at_z, _, _ = kto_loss(torch.full((2,), z, dtype=torch.float64), torch.zeros(2), torch.tensor([True, False]), *kl,
                          beta=0.5, desirable_weight=2.0, undesirable_weight=0.6)
    torch.testing.assert_close(at_z, torch.tensor([1.0, 0.3], dtype=torch.float64))


def test_kto_reference_point_is_clamped_and_detached():
    policy, ref, desirable, policy_kl, ref_kl = _kto_inputs(kl_shift=-1.0)  # p_θ below p_ref on mismatched pairs
    policy_kl.requires_grad_(True)
    policy.requires_grad_(True)
    losses, _, z_ref = kto_loss(policy, ref, desirable, policy_kl, ref_kl, beta=0.1)
    assert z_ref.item() == 0.0  # a KL cannot be negative: the negative estimate is clamped
    losses.sum().backward()
    assert policy_kl.grad is None and policy.grad is not None


def test_kto_weights_scale_each_class():
    policy, ref, desirable, policy_kl, ref_kl = _kto_inputs()
    base, _, _ = kto_loss(policy, ref, desirable, policy_kl, ref_kl, beta=0.1)
    weighted, _, _ = kto_loss(policy, ref, desirable, policy_kl, ref_kl, beta=0.1, desirable_weight=1.5,
                              undesirable_weight=0.25)
    torch.testing.assert_close(weighted, base * torch.where(desirable, 1.5, 0.25).double())



def test_gradcheck_zoo_losses():
    """Analytic gradients of all three losses against finite differences (float64)."""
    chosen, rejected, chosen_len, rejected_len = _pair_batch(B=4, seed=2)
    policy, ref, desirable, policy_kl, ref_kl = _kto_inputs(B=4, M=3)
    chosen, rejected, policy = (t.clone().requires_grad_(True) for t in (chosen, rejected, policy))
    assert gradcheck(lambda c, r: simpo_loss(c, r, chosen_len, rejected_len, 2.0, 0.5)[0], (chosen, rejected))
    assert gradcheck(lambda c, r: orpo_loss(c, r, chosen_len, rejected_len, 0.3)[0], (chosen, rejected))
    assert gradcheck(lambda p: kto_loss(p, ref, desirable, policy_kl, ref_kl, 0.7, 1.2, 0.8)[0], (policy,))

# ----------------------------------------------------------------------------- bad input, data, lengths


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: simpo_loss(torch.zeros(2), torch.zeros(2), torch.tensor([1, 0]), torch.ones(2), 2.0, 0.5),
         "chosen_lengths must be >= 1"),
        (lambda: simpo_loss(torch.zeros(2), torch.zeros(3), torch.ones(2), torch.ones(2), 2.0, 0.5), "shape mismatch"),
        (lambda: simpo_loss(torch.zeros(2), torch.zeros(2), torch.ones(2), torch.ones(2), 2.0, -0.1), "gamma"),
        (lambda: orpo_loss(torch.tensor([-1.0, 0.0]), torch.tensor([-1.0, -1.0]), torch.ones(2), torch.ones(2), 0.1),
         r"policy_chosen_logps / its lengths \(average log-probs\) must be < 0, got 0.0"),
        (lambda: orpo_loss(-torch.ones(2), -torch.ones(2), torch.ones(2), torch.ones(2), -0.1), "lam"),
        (lambda: kto_loss(torch.zeros(2), torch.zeros(2), torch.ones(2), torch.zeros(2), torch.zeros(2), 0.1),
         "desirable must be a bool tensor"),
        (lambda: kto_loss(torch.zeros(2), torch.zeros(2), torch.ones(2, dtype=torch.bool), torch.zeros(0),
                          torch.zeros(0), 0.1), "M >= 1"),
        (lambda: kto_loss(torch.zeros(2), torch.zeros(2), torch.ones(2, dtype=torch.bool), torch.zeros(2),
                          torch.zeros(2), 0.1, undesirable_weight=0.0), "undesirable_weight"),
    ],
)
def test_bad_input_names_the_problem(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_unpaired_examples_split_each_pair():
    pairs = [PreferencePair("x1", " good", " bad"), PreferencePair("x2", " yes", " no")]
    assert unpaired_examples(pairs) == [
        UnpairedExample("x1", " good", True), UnpairedExample("x1", " bad", False),
        UnpairedExample("x2", " yes", True), UnpairedExample("x2", " no", False),
    ]
    with pytest.raises(ValueError, match="no preference pairs"):
        unpaired_examples([])


def test_response_lengths_turn_sums_into_average_logprobs():
    logp = _rand(3, 5, seed=4)
    mask = (torch.arange(5)[None, :] < torch.tensor([[5], [2], [1]])).long()
    torch.testing.assert_close(response_lengths(mask), torch.tensor([5, 2, 1]))
    torch.testing.assert_close(sequence_logprobs(logp, mask) / response_lengths(mask), masked_mean(logp, mask, dim=-1))


# ----------------------------------------------------------------------------- TRL's own definitions


def _trl_args(config_class, tmp_path, **kwargs):
    return config_class(
        output_dir=str(tmp_path), per_device_train_batch_size=4, use_cpu=True, bf16=False, report_to="none",
        save_strategy="no", disable_tqdm=True, max_length=32, **kwargs,
    )


@pytest.fixture(scope="module")
def trl_trainers(tmp_path_factory):
    """Real CPO (SimPO), ORPO and KTO trainers of TRL on copies of the tiny model and a four-row data set."""
    pytest.importorskip("trl", reason="TRL is not installed (pip install trl==1.16.0 to run the TRL cross-checks)")
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from trl import KTOConfig, KTOTrainer
    from trl.experimental.cpo import CPOConfig, CPOTrainer
    from trl.experimental.orpo import ORPOConfig, ORPOTrainer

    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny", device="cpu")
    pairs = Dataset.from_list([{"prompt": "The film", "chosen": " was great", "rejected": " was dull"}] * 4)
    unpaired = Dataset.from_list([{"prompt": "The film", "completion": " was great", "label": True},
                                  {"prompt": "A book", "completion": " so dull", "label": False}] * 2)
    tmp = tmp_path_factory.mktemp("trl")
    simpo = CPOTrainer(
        model=copy.deepcopy(model), processing_class=tokenizer, train_dataset=pairs,
        args=_trl_args(CPOConfig, tmp / "simpo", loss_type="simpo", cpo_alpha=0.0, beta=2.0, simpo_gamma=0.8),
    )
    orpo = ORPOTrainer(model=copy.deepcopy(model), processing_class=tokenizer, train_dataset=pairs,
                       args=_trl_args(ORPOConfig, tmp / "orpo", beta=0.25))
    kto = KTOTrainer(
        model=copy.deepcopy(model), ref_model=copy.deepcopy(model), processing_class=tokenizer,
        train_dataset=unpaired,
        args=_trl_args(KTOConfig, tmp / "kto", beta=0.3, desirable_weight=1.5, undesirable_weight=0.7),
    )
    return {"simpo": simpo, "orpo": orpo, "kto": kto}


def test_simpo_matches_trl_cpo_simpo(trl_trainers):
    """CPOTrainer(loss_type="simpo", cpo_alpha=0): its loss is losses.mean() of `cpo_loss` on average log-probs."""
    trainer = trl_trainers["simpo"]
    assert (trainer.loss_type, trainer.cpo_alpha, trainer.alpha) == ("simpo", 0.0, 0.0)
    chosen, rejected, chosen_len, rejected_len = _pair_batch()
    ours_w, ours_l = chosen.clone().requires_grad_(True), rejected.clone().requires_grad_(True)
    trl_w, trl_l = chosen.clone().requires_grad_(True), rejected.clone().requires_grad_(True)
    losses, r_w, r_l = simpo_loss(ours_w, ours_l, chosen_len, rejected_len, trainer.beta, trainer.simpo_gamma)
    trl_losses, trl_r_w, trl_r_l = trainer.cpo_loss(trl_w / chosen_len, trl_l / rejected_len)
    for ours, theirs in ((losses, trl_losses), (r_w, trl_r_w), (r_l, trl_r_l)):
        torch.testing.assert_close(ours, theirs, atol=TOLERANCE, rtol=0)
    ours_grads = torch.autograd.grad(losses.mean(), (ours_w, ours_l))
    trl_grads = torch.autograd.grad(trl_losses.mean(), (trl_w, trl_l))
    for ours, theirs in zip(ours_grads, trl_grads):
        torch.testing.assert_close(ours, theirs, atol=TOLERANCE, rtol=0)


def test_average_logprob_counts_the_same_tokens_as_trl(trl_trainers):
    """TRL averages over the labels that are not -100 (after the shift); minirlhf divides the sum over the
    response mask by `response_lengths`: the same |y| and the same average."""
    trainer = trl_trainers["simpo"]
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 9, 11, generator=g, dtype=torch.float64)
    input_ids = torch.randint(0, 11, (4, 9), generator=g)
    response_mask = torch.zeros(4, 9, dtype=torch.long)
    for row, (start, end) in enumerate([(2, 9), (3, 5), (1, 2), (4, 8)]):
        response_mask[row, start:end] = 1
    labels = input_ids.masked_fill(response_mask == 0, -100)
    trl_avg = trainer.get_batch_logps(logits, labels, average_log_prob=True)
    logp = torch.zeros(4, 9, dtype=torch.float64)  # position t scores token t given tokens < t, as in logprobs.py
    logp[:, 1:] = logprobs_from_logits(logits[:, :-1], input_ids[:, 1:])
    ours = sequence_logprobs(logp, response_mask) / response_lengths(response_mask)
    torch.testing.assert_close(ours, trl_avg, atol=TOLERANCE, rtol=0)


def test_orpo_odds_ratio_matches_trl(trl_trainers):
    """ORPOTrainer's `odds_ratio_loss` returns λ log σ(log odds ratio) per pair (subtracted from its NLL) and the
    mean log odds ratio. Our per-pair loss minus our L_SFT = -(1/|y_w|) log p_θ(y_w|x) is minus TRL's term."""
    trainer = trl_trainers["orpo"]
    chosen, rejected, chosen_len, rejected_len = _pair_batch(seed=1)
    chosen[0], rejected[1] = -1e-7 * chosen_len[0], -40.0 * rejected_len[1]  # near P = 1 and P = 0
    ours_w, ours_l = chosen.clone().requires_grad_(True), rejected.clone().requires_grad_(True)
    trl_w, trl_l = chosen.clone().requires_grad_(True), rejected.clone().requires_grad_(True)
    losses, lo_w, lo_l = orpo_loss(ours_w, ours_l, chosen_len, rejected_len, trainer.beta)
    odds_term = losses - (-ours_w / chosen_len)  # λ L_OR
    trl_term, trl_r_w, trl_r_l, _, trl_log_odds = trainer.odds_ratio_loss(trl_w / chosen_len, trl_l / rejected_len)
    torch.testing.assert_close(odds_term.float(), -trl_term, atol=FLOAT32_TOLERANCE, rtol=0)
    assert (lo_w - lo_l).mean().item() == pytest.approx(trl_log_odds.item(), abs=FLOAT32_TOLERANCE)
    # TRL's logged rewards are λ times the average log-probs; ours are log odds: the same order, so the same accuracy
    assert torch.equal(trl_r_w > trl_r_l, lo_w > lo_l)
    ours_grads = torch.autograd.grad(odds_term.sum(), (ours_w, ours_l))
    trl_grads = torch.autograd.grad(-trl_term.sum(), (trl_w, trl_l))
    for ours, theirs in zip(ours_grads, trl_grads):
        torch.testing.assert_close(ours, theirs, atol=FLOAT32_TOLERANCE, rtol=0)


class _FixedLogProbs(torch.nn.Module):
    """Stands in for a TRL model with its fused LM head: for the batch whose input_ids equal `ids[k]`, returns
    log_probs[k] (B, L-1) wherever the label is not -100, and zero entropy and mean logits."""

    def __init__(self, ids: list[torch.Tensor], log_probs: list[torch.Tensor]):
        super().__init__()
        self.ids, self.log_probs = ids, log_probs

    def forward(self, input_ids=None, labels=None, fused_lm_head=False, **kwargs):
        from trl.trainer.utils import FusedCausalLMOutput

        assert fused_lm_head
        (k,) = [k for k, ids in enumerate(self.ids) if ids.shape == input_ids.shape and torch.equal(ids, input_ids)]
        valid = labels[:, 1:] != -100
        log_probs = torch.where(valid, self.log_probs[k], torch.zeros_like(self.log_probs[k]))
        zeros = torch.zeros_like(log_probs).detach()
        return FusedCausalLMOutput(loss=-log_probs.sum(), log_probs=log_probs, entropy=zeros, mean_logits=zeros,
                                   is_top1=torch.zeros_like(valid), label_mask=valid)


def _kto_batch(B: int, T: int, seed: int) -> dict[str, torch.Tensor]:
    """Prompt + completion rows (B, T) and their mismatched KL rows (B, T + 1), random ids and lengths."""
    g = torch.Generator().manual_seed(seed)
    batch = {"label": torch.arange(B) % 3 != 0}
    for prefix, width in (("", T), ("KL_", T + 1)):
        prompt_len = torch.randint(1, 3, (B,), generator=g)
        end = prompt_len + torch.randint(1, width - 2, (B,), generator=g)
        cols = torch.arange(width)[None, :]
        batch[f"{prefix}input_ids"] = torch.randint(2, 50, (B, width), generator=g)
        batch[f"{prefix}attention_mask"] = (cols < end[:, None]).long()
        batch[f"{prefix}completion_mask"] = ((cols >= prompt_len[:, None]) & (cols < end[:, None])).long()
    return batch


@pytest.mark.parametrize("kl_shift", [0.4, -0.4])  # z_ref > 0, and a negative estimate clamped to z_ref = 0
def test_kto_matches_trl(trl_trainers, kl_shift):
    """KTOTrainer._compute_loss on fixed per-token log-probs against losses.kto_loss on their sums: batch loss,
    its gradient w.r.t. every per-token log-prob, z_ref (TRL's logged `kl`) and the mean implicit rewards."""
    trainer = trl_trainers["kto"]
    assert (trainer.loss_type, trainer.calculate_KL) == ("kto", True)
    B, T = 6, 9
    batch = _kto_batch(B, T, seed=5)
    token_logps = -torch.rand(B, T - 1, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    kl_token_logps = -torch.rand(B, T, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    mask, kl_mask = batch["completion_mask"][:, 1:], batch["KL_completion_mask"][:, 1:]
    batch["ref_logps"] = (token_logps * mask).sum(-1) + _rand(B, seed=8)
    batch["ref_KL_logps"] = (kl_token_logps * kl_mask).sum(-1) - kl_shift

    trainer.precompute_ref_logps = True  # TRL then reads log p_ref from the batch
    trainer.model.train()
    trl_logps = token_logps.clone().requires_grad_(True)
    stand_in = _FixedLogProbs([batch["input_ids"], batch["KL_input_ids"]], [trl_logps, kl_token_logps])
    trl_loss = trainer._compute_loss(stand_in, batch, return_outputs=False)
    (trl_grad,) = torch.autograd.grad(trl_loss, trl_logps)
    metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}

    ours_logps = token_logps.clone().requires_grad_(True)
    losses, rewards, z_ref = kto_loss(
        (ours_logps * mask).sum(-1), batch["ref_logps"], batch["label"], (kl_token_logps * kl_mask).sum(-1),
        batch["ref_KL_logps"], trainer.beta, trainer.desirable_weight, trainer.undesirable_weight,
    )
    (our_grad,) = torch.autograd.grad(losses.mean(), ours_logps)
    assert losses.mean().item() == pytest.approx(trl_loss.item(), abs=TOLERANCE)
    torch.testing.assert_close(our_grad, trl_grad, atol=TOLERANCE, rtol=0)
    assert z_ref.item() == pytest.approx(metrics["kl"], abs=TOLERANCE)
    assert (z_ref.item() == 0.0) == (kl_shift < 0)
    assert rewards[batch["label"]].mean().item() == pytest.approx(metrics["rewards/chosen"], abs=TOLERANCE)
    assert rewards[~batch["label"]].mean().item() == pytest.approx(metrics["rewards/rejected"], abs=TOLERANCE)

