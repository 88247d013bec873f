"""REINFORCE with a baseline, and RLOO (REINFORCE leave-one-out, Ahmadian et al., 2024).

The policy gradient (log-derivative trick):   ∇J = E_{y ~ p_θ}[ (R(x, y) - b) · ∇ log p_θ(y|x) ]

Any baseline b that does not depend on y leaves the expectation unchanged and can cut the variance:
- baseline="none":  b = 0 (plain REINFORCE, Williams 1992)
- baseline="ema":   b = an exponential moving average of past rewards (a cheap value estimate)
- baseline="rloo":  b_i = mean of the OTHER G-1 rewards of the same prompt (needs G >= 2)

The KL leash enters through the reward, as in RLOO: R'(x, y) = R(x, y) - β · Σ_t log p_θ(y_t)/p_ref(y_t).
One pass over each batch of fresh samples (REINFORCE is on-policy: no ratio, no clipping).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from minirlhf.losses import kl_k1, masked_mean, masked_sum, reinforce_loss, rloo_advantages
from minirlhf.models import disable_dropout, frozen_copy, load_model
from minirlhf.tasks import Task
from minirlhf.trainers.common import make_history, progress, require_choice, save_run, set_seed
from minirlhf.trainers.online import (
    OnlineConfig,
    collect,
    evaluation,
    experience_metrics,
    minibatches,
    policy_logprobs,
)

BASELINES = ("none", "ema", "rloo")


@dataclass
class ReinforceConfig(OnlineConfig):
    lr: float = 2e-4
    baseline: str = "rloo"  # "none", "ema" (moving average of rewards) or "rloo" (leave-one-out over G)
    ema_decay: float = 0.9  # for baseline="ema": b <- decay·b + (1 - decay)·mean(R)

    def validate(self) -> None:
        super().validate()
        require_choice(self, "baseline", BASELINES)
        if self.baseline == "rloo" and self.group_size < 2:
            raise ValueError(f"ReinforceConfig.group_size must be >= 2 for baseline='rloo', got {self.group_size}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ReinforceConfig.ema_decay must be in [0, 1), got {self.ema_decay}")


def train_reinforce(task: Task, config: ReinforceConfig | None = None, model=None, tokenizer=None, callbacks=()):
    """Train p_θ with REINFORCE (+ baseline) on `task`. Returns (model, tokenizer, history)."""
    config = config or ReinforceConfig()
    generator = set_seed(config.seed)
    rng = random.Random(config.seed)
    if model is None:
        model, tokenizer = load_model(config.model, device=config.device)
    disable_dropout(model)
    ref = frozen_copy(model) if config.beta > 0 else None
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    history = make_history(config, callbacks)
    ema = None

    for step in progress(range(config.steps), config.progress, f"reinforce[{config.baseline}]"):
        metrics = evaluation(task, model, tokenizer) if step % config.eval_every == 0 else {}
        exp = collect(model, tokenizer, ref, task, config, rng, generator)
        metrics |= experience_metrics(exp)

        # R'(x, y) = R(x, y) - β · KL_seq: the reward the policy gradient sees  (B,)
        shaped = exp.rewards
        if exp.ref_logp is not None:
            shaped = shaped - config.beta * masked_sum(kl_k1(exp.old_logp, exp.ref_logp), exp.mask, dim=-1)
        # Â = R' - b
        if config.baseline == "rloo":
            advantages = rloo_advantages(shaped, config.group_size)
        elif config.baseline == "ema":
            ema = shaped.mean() if ema is None else config.ema_decay * ema + (1 - config.ema_decay) * shaped.mean()
            advantages = shaped - ema
        else:
            advantages = shaped

        model.train()
        for rows in minibatches(config.batch_size, config.minibatch_size, generator):
            logp, entropy = policy_logprobs(model, exp, rows, config.temperature)  # (b, N)
            loss = reinforce_loss(logp, advantages[rows], exp.mask[rows])  # -E[Â · log p_θ(y|x)]
            loss.backward()
            grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        model.eval()
        metrics |= {
            "loss": loss.item(),
            "advantage_std": advantages.std().item(),
            "entropy": masked_mean(entropy, exp.mask[rows]).item(),
            "grad_norm": grad_norm.item(),
        }
        history.log(step, **metrics)

    history.log(config.steps, **evaluation(task, model, tokenizer))
    save_run(model, tokenizer, config, history)
    return model, tokenizer, history
