"""GRPO (Shao et al., 2024): PPO's clipped objective with the value function replaced by group statistics.

For each prompt x, sample a group {y_1..y_G} ~ p_θold(·|x), score R_i = R(x, y_i), and set

    Â_i = (R_i - mean(R_1..R_G)) / std(R_1..R_G)                      (the group is the baseline)
    J(θ) = E[ min(r_t Â_i, clip(r_t, 1-ε, 1+ε) Â_i) - β · k3_t ],     r_t = p_θ(y_t|..) / p_θold(y_t|..)

then take `epochs` passes of minibatch gradient steps on L = -J. Two models in memory (p_θ, p_ref), one
when β = 0: the reference copy is not even made.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from minirlhf.losses import AGGREGATIONS, GRPO_SCALES, grpo_advantages, grpo_loss, masked_mean
from minirlhf.models import disable_dropout, frozen_copy, load_model
from minirlhf.tasks import Task
from minirlhf.trainers.common import (
    make_history,
    progress,
    require_choice,
    require_positive,
    save_run,
    set_seed,
)
from minirlhf.trainers.online import (
    OnlineConfig,
    collect,
    evaluation,
    experience_metrics,
    minibatches,
    policy_logprobs,
)


@dataclass
class GRPOConfig(OnlineConfig):
    steps: int = 200
    eval_every: int = 25
    lr: float = 3e-4
    prompts_per_step: int = 32  # x group_size 8 = 256 completions per step
    beta: float = 0.0  # no KL leash by default (as DAPO / Dr. GRPO); 0.04 is the GRPO paper's value
    eps: float = 0.2  # ε: clip range of the ratio r_t(θ)
    epochs: int = 1  # μ: optimisation passes over each batch of samples (1 = strictly on-policy)
    scale: str = "group"  # advantage scaling: "group" std (GRPO), "batch" std, or "none" (Dr. GRPO)
    aggregation: str = "token-mean"  # token weighting, see losses.aggregate ("seq-mean" = GRPO paper)

    def validate(self) -> None:
        super().validate()
        require_positive(self, "eps", "epochs")
        require_choice(self, "scale", GRPO_SCALES)
        require_choice(self, "aggregation", AGGREGATIONS)
        if self.group_size < 2:
            raise ValueError(
                f"GRPOConfig.group_size must be >= 2 (a group of one has no baseline), got {self.group_size}"
            )


def train_grpo(task: Task, config: GRPOConfig | None = None, model=None, tokenizer=None, callbacks=()):
    """Train p_θ with GRPO on `task`. Returns (model, tokenizer, history)."""
    config = config or GRPOConfig()
    generator = set_seed(config.seed)
    rng = random.Random(config.seed)
    if model is None:
        model, tokenizer = load_model(config.model, device=config.device)
    disable_dropout(model)
    ref = frozen_copy(model) if config.beta > 0 else None  # β = 0: no reference model at all
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    history = make_history(config, callbacks)

    for step in progress(range(config.steps), config.progress, "grpo"):
        metrics = {}
        if step % config.eval_every == 0:
            metrics |= evaluation(task, model, tokenizer)

        # 1. sample a group of G completions per prompt from p_θold and score them
        exp = collect(model, tokenizer, ref, task, config, rng, generator)
        # 2. group-normalised advantages Â_i, one per completion (B,)
        advantages = grpo_advantages(exp.rewards, config.group_size, scale=config.scale)
        groups = exp.rewards.view(-1, config.group_size)
        metrics |= experience_metrics(exp)
        metrics["zero_std_groups"] = (groups.std(-1) < 1e-6).float().mean().item()

        # 3. μ epochs of minibatch steps on the clipped objective with β·k3 KL
        model.train()
        for _ in range(config.epochs):
            for rows in minibatches(config.batch_size, config.minibatch_size, generator):
                logp, entropy = policy_logprobs(model, exp, rows, config.temperature)  # (b, N)
                ref_logp = exp.ref_logp[rows] if exp.ref_logp is not None else None
                loss, stats = grpo_loss(
                    logp, exp.old_logp[rows], ref_logp, advantages[rows], exp.mask[rows],
                    eps=config.eps, beta=config.beta, aggregation=config.aggregation,
                )
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
        model.eval()
        metrics |= {
            "loss": loss.item(),
            "clip_frac": stats["clip_frac"],
            "kl": stats.get("kl", 0.0),
            "entropy": masked_mean(entropy, exp.mask[rows]).item(),
            "grad_norm": grad_norm.item(),
        }
        history.log(step, **metrics)

    history.log(config.steps, **evaluation(task, model, tokenizer))  # the final policy, after the last update
    save_run(model, tokenizer, config, history)
    return model, tokenizer, history
