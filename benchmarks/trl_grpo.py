"""minirlhf vs TRL on a full GRPO step: completions per second, and a correctness cross-check.

A step = sample G completions for each prompt + score them + reference log-probs + one gradient update. Same
model (the shipped arithmetic SFT checkpoint "tiny-sft", the task's p_ref), same task (the arithmetic prompts of
the train split and `minirlhf.tasks.arithmetic.correctness_reward`, which has TRL's reward-function signature),
same settings: 16 prompts x G = 8 completions per step, at most 5 new tokens, temperature 1.0 (no top-k / top-p),
β = 0.04 with the k3 KL estimator, ε = 0.2, advantages scaled by the group std, one update per batch
(minirlhf epochs=1 / TRL num_iterations=1), per-sequence mean aggregation (minirlhf "seq-mean" = TRL
loss_type="grpo"), AdamW lr 2e-4 constant, grad-norm clip 1.0, dropout off, float32. TRL settings that differ
from its defaults: `bf16=False, use_cpu=True, report_to="none"`, `gradient_checkpointing=False`,
`disable_dropout=True`, `use_bias_correction_kl=False` (TRL multiplies the KL term by the importance ratio by
default; minirlhf's GRPO loss, like the paper, does not), `loss_type="grpo"`, `lr_scheduler_type="constant"`.

Generation differs by design: TRL calls `transformers` `generate()` (the regular, non-vLLM path on CPU), minirlhf
its own KV-cache loop (`minirlhf.sampling.sample`), which runs each prompt once and repeats its cache for the G
completions. Both stop at EOS and mask everything after it. The same prompt sharing is minirlhf's in the reference
and policy forwards (`response_logprobs(..., prompt_length=P)`); TRL runs every prompt G times in all three.

Timing as in trl_dpo.py: step end to step end, interleaved rounds in one process, medians, wall and CPU time.

Cross-check (also run by tests/test_benchmarks_trl.py), all against TRL's own code:
- advantages: `GRPOTrainer._generate_and_score_completions` with a reward function that returns fixed rewards,
  against `losses.grpo_advantages` (scale = group, batch, none);
- loss and its gradient: `GRPOTrainer._compute_loss` on fixed log-prob tensors (a stand-in model; off-policy
  old log-probs so that clipping is active) against `losses.grpo_loss`, for the aggregation pairs
  grpo = seq-mean, bnpo = token-mean, dapo = token-mean, dr_grpo = constant, and for the ratio zoo: TRL's
  loss_type cispo and sapo and its delta against policy_loss cispo, sapo and dual-clip, and its entropy bonus
  (`entropy_coef`) against `losses.entropy_bonus` (TRL takes the token mean whatever the loss type: equal to
  minirlhf's at token-mean, a difference by definition at seq-mean);
- the sampler's importance weight (three policies): TRL's vLLM importance-sampling correction, computed by its own
  `_generate_and_score_completions` from fixed completions and sampler log-probs (its generation replaced), in
  each vllm_importance_sampling_mode, against `losses.behaviour_weight`; then `_compute_loss` with that weight
  against `grpo_loss(behaviour_correction=...)`, loss and gradient;
- the same model and a TRL-sampled batch (real forward passes): loss and parameter gradients.
Differences by definition (std + 1e-4 vs max(std, 1e-4), the ratio-weighted KL, position ids of left-padded
prompts) are reported with their size, not hidden.

    pip install trl==1.16.0          # only for this script; not a dependency of minirlhf
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trl_grpo.py             # ~2 min on a busy 2-core machine
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trl_grpo.py --quick     # smoke test
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trl_grpo.py --check-only

Writes results/trl_grpo.json and prints the markdown tables.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import random
import sys
import tempfile
from pathlib import Path

import torch
from _bench import fmt, markdown_table
from _trl_common import (
    FixedLogProbModel,
    PhaseTimer,
    StepClock,
    add_run_arguments,
    check_row,
    grad_diff,
    interleaved_rounds,
    max_abs_diff,
    median,
    minirlhf_callback,
    parse_run_args,
    phase_table,
    report_checks,
    speed_line,
    speed_summary,
    summarize_steps,
    trl_callback,
    write_results,
)

from minirlhf.logprobs import response_logprobs
from minirlhf.losses import behaviour_weight, entropy_bonus, grpo_advantages, grpo_loss
from minirlhf.models import disable_dropout, load_model
from minirlhf.tasks import arithmetic
from minirlhf.trainers.grpo import GRPOConfig as MiniGRPOConfig
from minirlhf.trainers.grpo import train_grpo

MODEL = "tiny-sft"
RESULTS = Path(__file__).resolve().parent / "results" / "trl_grpo.json"
# minirlhf aggregation <-> TRL loss_type with the same token weighting
AGGREGATION_PAIRS = [("grpo", "seq-mean"), ("bnpo", "token-mean"), ("dapo", "token-mean"), ("dr_grpo", "constant")]


@dataclasses.dataclass
class Settings:
    prompts_per_step: int = 16
    group_size: int = 8
    max_new_tokens: int = arithmetic.MAX_NEW_TOKENS
    temperature: float = 1.0
    beta: float = 0.04
    eps: float = 0.2
    lr: float = 2e-4
    aggregation: str = "seq-mean"
    loss_type: str = "grpo"

    @property
    def batch_size(self) -> int:
        return self.prompts_per_step * self.group_size


def trl_config(output_dir: str, steps: int, s: Settings, seed: int):
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=s.batch_size,
        num_generations=s.group_size, max_completion_length=s.max_new_tokens, temperature=s.temperature,
        top_p=1.0, top_k=0, beta=s.beta, epsilon=s.eps, loss_type=s.loss_type, scale_rewards="group",
        num_iterations=1, use_bias_correction_kl=False, mask_truncated_completions=False, disable_dropout=True,
        bf16=False, use_cpu=True, report_to="none", gradient_checkpointing=False,
        learning_rate=s.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", weight_decay=0.0,
        max_grad_norm=1.0, save_strategy="no", logging_steps=10**6, disable_tqdm=True, seed=seed,
        dataloader_num_workers=0, log_completions=False,
    )


def prompt_dataset(n: int, seed: int):
    """A datasets.Dataset with a "prompt" column of n train-split prompts (what minirlhf samples from)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": arithmetic.train_prompts(n, random.Random(seed))})


# ----------------------------------------------------------------------------------------------- cross-check


class FixedReward:
    """A TRL reward function that returns preset rewards (so TRL's advantage code runs on rewards we choose)."""

    __name__ = "fixed_reward"

    def __init__(self) -> None:
        self.values: list[float] | None = None

    def __call__(self, prompts, completions, **kwargs):
        if self.values is None:
            return arithmetic.correctness_reward(prompts, completions)
        assert len(self.values) == len(completions)
        return list(self.values)


def _trainer(model, tokenizer, s: Settings, reward, tmp: str):
    from trl import GRPOTrainer

    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=trl_config(tmp, 1, s, seed=0),
                          train_dataset=prompt_dataset(64, 0), processing_class=tokenizer)
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop; we call the loss directly
    trainer.model.train()
    return trainer


def check_advantages(trainer, reward: FixedReward, prompts: list[str], group_size: int, seed: int = 0) -> list[dict]:
    """TRL's advantages (computed inside `_generate_and_score_completions`) on preset rewards vs grpo_advantages."""
    g = torch.Generator().manual_seed(seed)
    n = len(prompts) * group_size
    rewards = torch.randn(n, generator=g)
    rewards[group_size: 2 * group_size] = 0.7  # a constant group: nothing to learn, advantages exactly 0
    rewards[2 * group_size: 3 * group_size] = (torch.rand(group_size, generator=g) < 0.5).float()  # 0/1 rewards
    rewards[2 * group_size] = 0.0
    rewards[2 * group_size + 1] = 1.0  # not constant
    reward.values = rewards.tolist()
    inputs = [{"prompt": p} for p in prompts for _ in range(group_size)]
    rows = []
    for scale in ("group", "batch", "none"):
        trainer.scale_rewards = scale
        trl_adv = trainer._generate_and_score_completions(copy.deepcopy(inputs))["advantages"]
        ours = grpo_advantages(rewards, group_size, scale=scale)
        setting = f"preset rewards, {len(prompts)} groups of {group_size} (one constant), scale_rewards={scale}"
        if scale == "none":
            rows.append(check_row("advantages", setting, max_abs_diff(ours, trl_adv)))
            continue
        grouped = rewards.view(-1, group_size)
        std = grouped.std(dim=1, keepdim=True).expand_as(grouped).reshape(-1) if scale == "group" else rewards.std()
        rows.append(check_row(
            "advantages", setting, max_abs_diff(ours, trl_adv), same_definition=False,
            note="TRL: (R - mean) / (std + 1e-4); minirlhf: (R - mean) / max(std, 1e-4), and 0 for a group with "
                 "std < 1e-4 (std: sample std, Bessel-corrected, in both)",
        ))
        # the same numbers once the eps convention is converted: minirlhf x std / (std + 1e-4)
        converted = ours * std / (std + 1e-4)
        rows.append(check_row("advantages, eps convention converted", setting, max_abs_diff(converted, trl_adv),
                              note="minirlhf · std/(std + 1e-4) equals TRL"))
    trainer.scale_rewards = "group"
    reward.values = None
    return rows


def check_loss_fixed_tensors(trainer, s: Settings, seed: int = 0) -> list[dict]:
    """TRL's `_compute_loss` on fixed per-token log-probs against `grpo_loss`, loss and gradient, per aggregation."""
    g = torch.Generator().manual_seed(seed)
    B, P, C = 2 * s.group_size, 4, s.max_new_tokens  # two groups; completion width = max_completion_length
    lengths = torch.randint(1, C + 1, (B,), generator=g)
    lengths[0] = C
    mask = (torch.arange(C)[None, :] < lengths[:, None]).long()  # right-padded completions
    logp = -torch.rand(B, C, generator=g) * 2
    old = logp + 0.3 * torch.randn(B, C, generator=g)  # off-policy: ratios away from 1, clipping active
    ref = logp + 0.5 * torch.randn(B, C, generator=g)
    advantages = torch.randn(B, generator=g)
    logp, old, ref = (torch.where(mask.bool(), t, torch.zeros_like(t)) for t in (logp, old, ref))
    batch = {
        "prompt_ids": torch.randint(2, 50, (B, P), generator=g), "prompt_mask": torch.ones(B, P, dtype=torch.long),
        "completion_ids": torch.randint(2, 50, (B, C), generator=g), "completion_mask": mask,
        "advantages": advantages, "old_per_token_logps": old, "ref_per_token_logps": ref,
        "num_items_in_batch": mask.sum(),
    }
    rows = []
    for loss_type, aggregation in AGGREGATION_PAIRS:
        for bias_correction in (False, True):
            if bias_correction and loss_type != "grpo":
                continue
            trainer.loss_type, trainer.args.use_bias_correction_kl = loss_type, bias_correction
            trainer.max_completion_length = C
            trl_logp = logp.clone().requires_grad_(True)
            full = torch.cat([torch.zeros(B, P - 1), trl_logp], dim=1)  # (B, P + C - 1), label = next token
            loss_trl = trainer._compute_loss(FixedLogProbModel(full), batch)
            loss_trl.backward()
            our_logp = logp.clone().requires_grad_(True)
            loss, _ = grpo_loss(our_logp, old, ref, advantages, mask, eps=s.eps, beta=s.beta, aggregation=aggregation)
            loss.backward()
            setting = (f"fixed log-prob tensors, loss_type={loss_type} vs aggregation={aggregation}, β={s.beta}, "
                       f"ε={s.eps}, k3, use_bias_correction_kl={bias_correction}")
            note = "" if not bias_correction else (
                "TRL's default multiplies k3 by the importance ratio r_t (DeepSeek-V3.2); minirlhf adds β·k3 as in "
                "the GRPO paper. Equal on-policy (r = 1) in value, not in gradient")
            same = not bias_correction
            rows.append(check_row("GRPO loss", setting, max_abs_diff(loss.detach(), loss_trl.detach()), same, note))
            rows.append(check_row("∂loss/∂ per-token log-probs", setting,
                                  max_abs_diff(our_logp.grad, trl_logp.grad), same, note))
    trainer.loss_type, trainer.args.use_bias_correction_kl = s.loss_type, False
    rows += check_ratio_zoo(trainer, batch, logp, old, ref, advantages, mask, s)
    rows += check_entropy_bonus(trainer, batch, logp, old, ref, advantages, mask, s, g)
    return rows


ENTROPY_COEF = 0.05  # c_H of the entropy-bonus rows


def check_entropy_bonus(trainer, batch, logp, old, ref, advantages, mask, s: Settings, g) -> list[dict]:
    """TRL's entropy bonus (`entropy_coef`, not adaptive) against grpo_loss + entropy_bonus on fixed log-probs and
    fixed per-token entropies: the loss and its gradient in both. TRL's bonus is the token mean of H whatever the
    loss type; minirlhf aggregates it like the loss, so the two agree at token-mean (bnpo) and differ at seq-mean
    (grpo) by definition."""
    entropy = torch.where(mask.bool(), 2 * torch.rand(logp.shape, generator=g), torch.zeros_like(logp))
    trainer.entropy_coef, trainer._entropy_bonus_enabled = ENTROPY_COEF, True
    rows = []
    for loss_type, aggregation in (("bnpo", "token-mean"), ("grpo", "seq-mean")):
        trainer.loss_type = loss_type
        trl_logp, trl_entropy = logp.clone().requires_grad_(True), entropy.clone().requires_grad_(True)
        pad = torch.zeros(logp.shape[0], batch["prompt_ids"].shape[1] - 1)
        loss_trl = trainer._compute_loss(FixedLogProbModel(torch.cat([pad, trl_logp], dim=1),
                                                           torch.cat([pad, trl_entropy], dim=1)), batch)
        loss_trl.backward()
        our_logp, our_entropy = logp.clone().requires_grad_(True), entropy.clone().requires_grad_(True)
        loss, _ = grpo_loss(our_logp, old, ref, advantages, mask, eps=s.eps, beta=s.beta, aggregation=aggregation)
        loss = loss + entropy_bonus(our_entropy, mask, ENTROPY_COEF, aggregation)
        loss.backward()
        setting = (f"fixed log-prob and entropy tensors, entropy_coef={ENTROPY_COEF}, loss_type={loss_type} vs "
                   f"aggregation={aggregation}, β={s.beta}")
        same = aggregation == "token-mean"
        note = "" if same else ("TRL's bonus is the token mean of H for every loss type; minirlhf aggregates it like "
                                "the loss (verl's choice), here the per-sequence mean")
        rows += [check_row("GRPO loss + entropy bonus", setting, max_abs_diff(loss.detach(), loss_trl.detach()),
                           same, note),
                 check_row("∂loss/∂ per-token log-probs, entropy bonus", setting,
                           max_abs_diff(our_logp.grad, trl_logp.grad)),
                 check_row("∂loss/∂ per-token entropy", setting, max_abs_diff(our_entropy.grad, trl_entropy.grad),
                           same, note)]
    trainer.entropy_coef, trainer._entropy_bonus_enabled, trainer.loss_type = 0.0, False, s.loss_type
    return rows


# the ratio zoo: (TRL's setting, minirlhf's grpo_loss options); TRL's cispo caps above only, at epsilon_high = ε_max
# (ε = 1: no lower cap here); its delta is dual-clip's c (the same function for c ≥ 1 + ε_high); its SAPO
# temperatures are made in float32, so the row uses ones exact in float32
RATIO_ZOO = [
    (dict(loss_type="cispo", epsilon_low=1.0, epsilon_high=5.0), dict(policy_loss="cispo", eps=1.0, eps_high=4.0,
                                                                      aggregation="token-mean")),
    (dict(loss_type="sapo", sapo_temperature_pos=1.0, sapo_temperature_neg=1.25),
     dict(policy_loss="sapo", tau_pos=1.0, tau_neg=1.25, aggregation="seq-mean")),
    (dict(loss_type="grpo", delta=1.25), dict(policy_loss="dual-clip", dual_clip_c=1.25, aggregation="seq-mean")),
]


def check_ratio_zoo(trainer, batch, logp, old, ref, advantages, mask, s: Settings) -> list[dict]:
    """TRL's cispo, sapo and delta (dual-clip) against grpo_loss's policy_loss on the same fixed tensors."""
    rows = []
    for trl_settings, ours in RATIO_ZOO:
        ours = dict(ours)
        trainer.loss_type = trl_settings["loss_type"]
        trainer.epsilon_low = trl_settings.get("epsilon_low", s.eps)
        trainer.epsilon_high = trl_settings.get("epsilon_high", s.eps)
        for name in ("delta", "sapo_temperature_pos", "sapo_temperature_neg"):
            setattr(trainer.args, name, trl_settings.get(name, getattr(trainer.args, name)))
        trl_logp = logp.clone().requires_grad_(True)
        full = torch.cat([torch.zeros(logp.shape[0], batch["prompt_ids"].shape[1] - 1), trl_logp], dim=1)
        loss_trl = trainer._compute_loss(FixedLogProbModel(full), batch)
        loss_trl.backward()
        our_logp = logp.clone().requires_grad_(True)
        eps, aggregation = ours.pop("eps", s.eps), ours.pop("aggregation")
        loss, _ = grpo_loss(our_logp, old, ref, advantages, mask, eps=eps, beta=s.beta, aggregation=aggregation,
                            **ours)
        loss.backward()
        setting = (f"fixed log-prob tensors, {', '.join(f'{k}={v}' for k, v in trl_settings.items())} vs "
                   f"{', '.join(f'{k}={v}' for k, v in ours.items())}, aggregation={aggregation}, β={s.beta}")
        rows.append(check_row("GRPO loss, ratio zoo", setting, max_abs_diff(loss.detach(), loss_trl.detach())))
        rows.append(check_row("∂loss/∂ per-token log-probs, ratio zoo", setting,
                              max_abs_diff(our_logp.grad, trl_logp.grad)))
    trainer.loss_type, trainer.epsilon_low, trainer.epsilon_high = s.loss_type, s.eps, s.eps
    trainer.args.delta = None
    return rows


# TRL's vllm_importance_sampling_mode -> minirlhf's behaviour_correction
BEHAVIOUR_MODES = [("token_truncate", "token-truncate"), ("token_mask", "token-mask"),
                   ("sequence_truncate", "sequence-truncate"), ("sequence_mask", "sequence-mask")]
BEHAVIOUR_CAP = 3.0  # TRL's default vllm_importance_sampling_clip_max


def trl_behaviour_weight(trainer, mode: str, prompt_ids: torch.Tensor, completions: list[list[int]],
                         old: torch.Tensor, sampler: list[list[float]]) -> dict:
    """TRL's own `_generate_and_score_completions` with use_vllm on: its generation replaced by the fixed
    `completions` and sampler log-probs, its old-log-prob forward by `old` (B, C); returns its batch, which holds the
    importance_sampling_ratio it computed."""
    texts = [trainer.processing_class.decode(ids) for ids in completions]

    def generate(prompts):
        return prompt_ids.tolist(), completions, None, texts, sampler, {}, None, None

    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    trainer.vllm_importance_sampling_mode, trainer.vllm_importance_sampling_clip_max = mode, BEHAVIOUR_CAP
    trainer._generate = generate
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (old, None, None)
    try:
        return trainer._generate_and_score_completions([{"prompt": "1+1="}] * len(completions))
    finally:
        del trainer._generate, trainer._get_per_token_logps_and_entropies  # back to the class's methods
        trainer.use_vllm = False


def check_behaviour_correction(trainer, s: Settings, seed: int = 0) -> list[dict]:
    """The sampler's importance weight p_θold/μ, capped at C = 3 in TRL's four modes: TRL's weight against
    behaviour_weight (on real tokens), then TRL's loss with it against grpo_loss(behaviour_correction=...)."""
    g = torch.Generator().manual_seed(seed)
    B, P, C = 2 * s.group_size, 4, s.max_new_tokens
    lengths = torch.randint(1, C + 1, (B,), generator=g)
    lengths[0] = C
    mask = (torch.arange(C)[None, :] < lengths[:, None]).long()
    completions = [torch.randint(2, 50, (int(n),), generator=g).tolist() for n in lengths]
    prompt_ids = torch.randint(2, 50, (B, P), generator=g)
    logp = -torch.rand(B, C, generator=g) * 2
    old = logp + 0.3 * torch.randn(B, C, generator=g)
    sampler = old + torch.randn(B, C, generator=g)  # μ far enough from p_θold that C = 3 acts on several
    logp, old, sampler = (torch.where(mask.bool(), t, torch.zeros_like(t)) for t in (logp, old, sampler))
    sampler_lists = [row[: int(n)].tolist() for row, n in zip(sampler, lengths)]
    rows = []
    for trl_mode, ours in BEHAVIOUR_MODES:
        batch = trl_behaviour_weight(trainer, trl_mode, prompt_ids, completions, old, sampler_lists)
        trl_weight = batch["importance_sampling_ratio"].expand(B, C)
        weight = behaviour_weight(old, sampler, mask, ours, BEHAVIOUR_CAP)
        log_rho = (old - sampler) * mask  # (B, C); per answer, summed
        capped = (log_rho.sum(-1) if ours.startswith("sequence") else log_rho[mask.bool()]) > math.log(BEHAVIOUR_CAP)
        unit = "answers" if ours.startswith("sequence") else "tokens"
        setting = (f"fixed log-prob tensors, vllm_importance_sampling_mode={trl_mode} vs behaviour_correction={ours}, "
                   f"C={BEHAVIOUR_CAP}, {int(capped.sum())} {unit} with ρ > C")
        rows.append(check_row("sampler importance weight p_θold/μ", setting, max_abs_diff(weight * mask,
                                                                                           trl_weight * mask)))
        batch["ref_per_token_logps"] = logp + 0.5 * torch.randn(B, C, generator=g)  # β > 0: the KL term unweighted
        trainer.use_vllm = True
        trl_logp = logp.clone().requires_grad_(True)
        loss_trl = trainer._compute_loss(FixedLogProbModel(torch.cat([torch.zeros(B, P - 1), trl_logp], dim=1)), batch)
        trainer.use_vllm = False
        loss_trl.backward()
        our_logp = logp.clone().requires_grad_(True)
        loss, _ = grpo_loss(our_logp, old, batch["ref_per_token_logps"], batch["advantages"], mask, eps=s.eps,
                            beta=s.beta, aggregation=s.aggregation, behaviour_logp=sampler, behaviour_correction=ours,
                            behaviour_cap=BEHAVIOUR_CAP)
        loss.backward()
        setting = f"{setting}, loss_type=grpo vs aggregation=seq-mean, β={s.beta}, ε={s.eps}"
        rows.append(check_row("GRPO loss, sampler correction", setting, max_abs_diff(loss.detach(), loss_trl.detach())))
        rows.append(check_row("∂loss/∂ per-token log-probs, sampler correction", setting,
                              max_abs_diff(our_logp.grad, trl_logp.grad)))
    return rows


def check_same_model(trainer, policy_ours, prompts_same_length, prompts_mixed, s: Settings) -> list[dict]:
    """A batch sampled and scored by TRL (`_generate_and_score_completions`: completions, rewards, advantages,
    reference log-probs); then TRL's `_compute_loss` and minirlhf's response_logprobs + grpo_loss on it."""
    rows = []
    inputs = [{"prompt": p} for p in prompts_same_length for _ in range(s.group_size)]
    torch.manual_seed(1)
    batch = trainer._generate_and_score_completions(inputs)
    P = batch["prompt_ids"].shape[1]
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    attention = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    response = torch.cat([torch.zeros_like(batch["prompt_mask"]), batch["completion_mask"]], dim=1)
    mask = batch["completion_mask"]

    trainer.model.zero_grad()
    loss_trl = trainer._compute_loss(trainer.model, batch)  # on-policy: TRL uses old = logp.detach()
    loss_trl.backward()
    policy_ours.zero_grad()
    logp = response_logprobs(policy_ours, ids, attention, response, s.temperature)[:, P:]
    with torch.no_grad():
        ref_ours = response_logprobs(trainer.ref_model, ids, attention, response, s.temperature)[:, P:]
    loss, _ = grpo_loss(logp, logp.detach(), batch["ref_per_token_logps"], batch["advantages"], mask,
                        eps=s.eps, beta=s.beta, aggregation=s.aggregation)
    loss.backward()
    setting = (f"same model (perturbed tiny-sft vs reference) and TRL-sampled batch, {len(prompts_same_length)} "
               f"prompts of equal token length x G={s.group_size}")
    rows += [
        check_row("per-token log p_ref on the completion", setting,
                  max_abs_diff(ref_ours * mask, batch["ref_per_token_logps"] * mask)),
        check_row("GRPO loss (loss_type=grpo vs seq-mean, k3, β=0.04)", setting,
                  max_abs_diff(loss.detach(), loss_trl.detach())),
        check_row("gradient of every parameter", setting,
                  grad_diff(list(policy_ours.parameters()), list(trainer.model.parameters()))),
    ]

    # Left-padded prompts of different lengths: TRL scores them with position ids 0, 1, 2, ... counted from the
    # first (padding) column; transformers' generate() (TRL's sampler) and minirlhf count positions over real
    # tokens only. Not a loss difference: the model sees different inputs.
    inputs = [{"prompt": p} for p in prompts_mixed for _ in range(2)]
    mixed = trainer._generate_and_score_completions(inputs)
    P = mixed["prompt_ids"].shape[1]
    C = mixed["completion_ids"].shape[1]
    ids = torch.cat([mixed["prompt_ids"], mixed["completion_ids"]], dim=1)
    attention = torch.cat([mixed["prompt_mask"], mixed["completion_mask"]], dim=1)
    response = torch.cat([torch.zeros_like(mixed["prompt_mask"]), mixed["completion_mask"]], dim=1)
    with torch.no_grad():
        trl_logp, _, _ = trainer._get_per_token_logps_and_entropies(trainer.ref_model, ids, attention, C)
        ours = response_logprobs(trainer.ref_model, ids, attention, response)[:, P:]
    m = mixed["completion_mask"].bool()
    padded = mixed["prompt_mask"].eq(0).any(-1)
    rows.append(check_row(
        "per-token log-probs, rows WITHOUT left padding", "left-padded batch of prompts with 4-6 tokens",
        max_abs_diff(ours[~padded][m[~padded]], trl_logp[~padded][m[~padded]]),
    ))
    rows.append(check_row(
        "per-token log-probs, rows WITH left padding", "left-padded batch of prompts with 4-6 tokens",
        max_abs_diff(ours[padded][m[padded]], trl_logp[padded][m[padded]]), same_definition=False,
        note="TRL's scoring forward passes no position_ids, so GPT-2's absolute positions start at the first PAD "
             "column (generate() counts them over real tokens); minirlhf counts over real tokens in both",
    ))
    return rows


def cross_check(s: Settings | None = None) -> list[dict]:
    s = s or Settings(prompts_per_step=4, group_size=4)
    torch.manual_seed(0)
    policy, tokenizer = load_model(MODEL, device="cpu")
    disable_dropout(policy)
    with torch.no_grad():  # move p_θ away from p_ref (TRL loads p_ref from the same folder), so that k3 is not 0
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    policy_ours = copy.deepcopy(policy)
    reward = FixedReward()
    length = {p: len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in arithmetic.train_prompts(
        400, random.Random(0))}
    same_length = [p for p, n in length.items() if n == 6][: s.prompts_per_step]
    mixed = [next(p for p, n in length.items() if n == k) for k in (4, 5, 6, 6)]
    with tempfile.TemporaryDirectory() as tmp:
        trainer = _trainer(policy, tokenizer, s, reward, tmp)
        rows = check_advantages(trainer, reward, same_length, s.group_size)
        rows += check_loss_fixed_tensors(trainer, s)
        rows += check_behaviour_correction(trainer, s)
        rows += check_same_model(trainer, policy_ours, same_length, mixed, s)
    return rows


# ----------------------------------------------------------------------------------------------- throughput


def run_minirlhf(s: Settings, steps: int, warmup: int, seed: int, timer: PhaseTimer | None = None) -> dict:
    """`train_grpo` itself, timed step by step through its callback."""
    import minirlhf.trainers.online as online

    model, tokenizer = load_model(MODEL, device="cpu")
    clock = StepClock()
    config = MiniGRPOConfig(
        model=MODEL, steps=steps, prompts_per_step=s.prompts_per_step, group_size=s.group_size,
        max_new_tokens=s.max_new_tokens, temperature=s.temperature, beta=s.beta, eps=s.eps, lr=s.lr,
        aggregation=s.aggregation, scale="group", epochs=1, eval_every=0, progress=False, device="cpu",
        seed=seed,
    )

    def train():
        return train_grpo(arithmetic.task(), config, model=model, tokenizer=tokenizer,
                          callbacks=[minirlhf_callback(clock, timer.step_end if timer else None)])

    if timer is None:
        _, _, history = train()
    else:
        timer.watch(model)  # p_ref is a deep copy made inside train_grpo: it inherits the hooks
        timer.patch_common()
        timer.wrap(online, "sample", "generation")
        timer.wrap(online, "call_reward", "reward")
        _, _, history = timer.run(train)
    lengths = [row["response_length"] for row in history if "response_length" in row]
    return {"steps": clock.steps(warmup), "completion_length": lengths[max(1, warmup):]}


def run_trl(s: Settings, steps: int, warmup: int, seed: int, timer: PhaseTimer | None = None) -> dict:
    """TRL's GRPOTrainer.train on the same model and task, timed step by step through a TrainerCallback."""
    from trl import GRPOTrainer

    model, tokenizer = load_model(MODEL, device="cpu")
    clock, lengths, holder = StepClock(), [], {}

    def on_step() -> None:  # TRL's metrics are cleared at each log, so read the step's mean length right away
        lengths.append(holder["trainer"]._metrics["train"]["completions/mean_length"][-1])
        if timer is not None:
            timer.step_end()

    with tempfile.TemporaryDirectory() as tmp:
        trainer = GRPOTrainer(
            model=model, reward_funcs=arithmetic.correctness_reward, args=trl_config(tmp, steps, s, seed),
            train_dataset=prompt_dataset(steps * s.prompts_per_step * 4, seed), processing_class=tokenizer,
            callbacks=[trl_callback(clock, on_step)],
        )
        holder["trainer"] = trainer
        if timer is None:
            trainer.train()
        else:
            timer.watch(trainer.model, trainer.ref_model)
            timer.patch_common()
            timer.wrap(trainer, "_generate", "generation")
            timer.wrap(trainer, "_calculate_rewards", "reward")
            timer.run(trainer.train)
    return {"steps": clock.steps(warmup), "completion_length": lengths[max(1, warmup):]}


def benchmark(s: Settings, rounds: int, steps: int, warmup: int) -> dict:
    measured = interleaved_rounds(
        rounds, {name: lambda seed, run=run: run(s, steps, warmup, seed=seed)
                 for name, run in (("minirlhf", run_minirlhf), ("trl", run_trl))},
        timed_steps=steps - max(1, warmup),
        describe=lambda out: f", completion length {median(out['completion_length']):.2f}",
    )
    results = {}
    for name, data in measured["per_library"].items():
        results[name] = summarize_steps(data["steps"], s.batch_size) | {
            "completion_length_mean": sum(data["completion_length"]) / len(data["completion_length"]),
            "raw_steps": data["steps"],
        }
    return speed_summary(results, measured)


def profile(s: Settings, steps: int, warmup: int) -> dict:
    """One run of each library with the CPU time of a step split by phase (see `PhaseTimer`)."""
    timers = {"minirlhf": PhaseTimer(warmup, steps), "trl": PhaseTimer(warmup, steps)}
    run_minirlhf(s, steps, warmup, seed=0, timer=timers["minirlhf"])
    run_trl(s, steps, warmup, seed=0, timer=timers["trl"])
    return {"phases": {k: t.result for k, t in timers.items()}, "phase_table": phase_table(timers)}


def throughput_table(bench: dict, threads: int) -> str:
    rows = []
    base = bench["libraries"]["trl"]
    for name, x in bench["libraries"].items():
        rows.append([
            name, threads, x["steps_timed"], fmt(x["completion_length_mean"], 2), fmt(x["per_s_wall"], 1),
            fmt(x["step_s_wall"] * 1000, 0), fmt(x["per_s_cpu"], 1), fmt(x["step_s_cpu"] * 1000, 0),
            fmt(base["step_s_wall"] / x["step_s_wall"], 2), fmt(base["step_s_cpu"] / x["step_s_cpu"], 2),
        ])
    return markdown_table(
        ["library", "threads", "steps timed", "mean completion tokens", "completions/s (wall)", "step ms (wall)",
         "completions/s (CPU time)", "step ms (CPU time)", "speed vs TRL (wall)", "speed vs TRL (CPU time)"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(parser, RESULTS, "instead of the throughput rounds: where a step's CPU time goes, by phase")
    parser.add_argument("--prompts-per-step", type=int, default=16)
    parser.add_argument("--group-size", type=int, default=8)
    args, threads = parse_run_args(parser, argv)
    s = Settings(prompts_per_step=args.prompts_per_step, group_size=args.group_size)

    checks = cross_check()
    bad = report_checks("GRPO", checks, args)
    if args.check_only:
        return 1 if bad else 0

    if args.profile:
        prof = profile(s, args.steps, args.warmup)
        print(f"\n### GRPO step: CPU time by phase ({threads} thread(s), steps {args.warmup + 1}-{args.steps})\n")
        print(prof["phase_table"])
        return 1 if bad else 0

    bench = benchmark(s, args.rounds, args.steps, args.warmup)
    print(f"\n### GRPO step throughput ({s.prompts_per_step} prompts x G={s.group_size} = {s.batch_size} "
          f"completions/step, {args.rounds} interleaved rounds x {args.steps - args.warmup} timed steps, medians)\n")
    print(throughput_table(bench, threads))
    print(speed_line(bench))
    settings = {k: v for k, v in vars(args).items() if k != "out"} | dataclasses.asdict(s) | {"model": MODEL}
    write_results(args.out or RESULTS, threads, settings, checks, bench)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
