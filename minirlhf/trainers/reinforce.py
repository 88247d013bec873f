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

from minirlhf.distributed import setup_runtime
from minirlhf.losses import (
    check_ema_decay,
    check_group_size,
    ema_baseline,
    kl_shaped_rewards,
    masked_mean,
    reinforce_loss,
    rloo_advantages,
)
from minirlhf.tasks import Task
from minirlhf.trainers.common import Run, choice, held_out_metrics, make_optimizer, require, set_seed
from minirlhf.trainers.online import (
    OnlineConfig,
    collect,
    diagnose,
    experience_metrics,
    minibatches,
    policy_logprobs,
    setup_policy,
)

BASELINES = ("none", "ema", "rloo")


@dataclass
class ReinforceConfig(OnlineConfig):
    lr: float = 2e-4
    beta: float = 0.04
    # b in Â = R - b: "none" (b = 0), "ema" (moving average of rewards) or "rloo" (mean of the other G - 1 rewards)
    baseline: str = choice("rloo", BASELINES)
    ema_decay: float = 0.9  # for baseline="ema": b <- decay·b + (1 - decay)·mean(R)

    def validate(self) -> None:
        super().validate()
        if self.baseline == "rloo":
            require(self, check_group_size, "group_size")
        require(self, check_ema_decay, "ema_decay")


def train_reinforce(task: Task, config: ReinforceConfig | None = None, model=None, tokenizer=None, callbacks=()):
    """Train p_θ with REINFORCE (+ baseline) on `task`. Returns (model, tokenizer, history)."""
    config = config or ReinforceConfig()
    runtime, config = setup_runtime(config)  # device, precision, this process's share (minirlhf.distributed)
    generator = set_seed(config.seed)
    rng = random.Random(config.seed)
    model, tokenizer, ref = setup_policy(config, model, tokenizer, task)  # ref: None when β = 0
    optimizer = make_optimizer(model.parameters(), config.lr)
    train_model = runtime.prepare(model)  # what the update runs through: DDP-wrapped under several processes
    evaluate = (lambda: held_out_metrics(task.evaluate, model, tokenizer)) if task.evaluate else None
    run = Run(config, runtime, optimizer, model.parameters(), {"prompts": rng, "sampling": generator}, evaluate,
              callbacks, model=model)
    ema = run.loop_state.get("ema")  # the moving-average baseline b (baseline="ema")

    for step in run.steps(f"reinforce[{config.baseline}]"):
        metrics = run.evaluate(step)
        exp = collect(model, tokenizer, ref, task, config, rng, generator, runtime)
        metrics |= experience_metrics(exp)
        # R'(x, y) = R(x, y) - β · KL_seq: the reward the policy gradient sees, over the global batch  (B,)
        shaped = runtime.gather(kl_shaped_rewards(exp.rewards, exp.old_logp, exp.ref_logp, exp.mask, config.beta))
        # Â = R' - b
        if config.baseline == "rloo":
            advantages = rloo_advantages(shaped, config.group_size)  # b_i = mean of the other G - 1 rewards
        elif config.baseline == "ema":
            ema = ema_baseline(ema, shaped, config.ema_decay)
            advantages = shaped - ema
        else:
            advantages = shaped
        advantages = runtime.local(advantages)  # this process's rows
        metrics["advantage_std"] = advantages.std().item()

        model.train()
        if config.debug:
            metrics |= diagnose(model, exp, config, group_advantages=advantages if config.baseline == "rloo" else None)
        for rows in minibatches(config.batch_size, config.minibatch_size, generator, runtime):
            with runtime.autocast():
                logp, entropy = policy_logprobs(train_model, exp, rows, config.temperature)  # (b, N)
            loss = reinforce_loss(logp, advantages[rows], exp.mask[rows])  # -E[Â · log p_θ(y|x)]
            loss, grad_norm = run.update(loss)
            run.add(loss=loss, grad_norm=grad_norm, entropy=masked_mean(entropy.detach(), exp.mask[rows]))
        model.eval()
        run.log(step, metrics, ema=ema)

    run.finish(model, tokenizer)
    return model, tokenizer, run.history
