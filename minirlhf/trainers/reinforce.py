"""REINFORCE with a baseline, and RLOO (REINFORCE leave-one-out, Ahmadian et al., 2024).

The policy gradient (log-derivative trick):   ∇J = E_{y ~ p_θ}[ (R(x, y) - b) · ∇ log p_θ(y|x) ]

Any baseline b that does not depend on y leaves the expectation unchanged and can cut the variance:
- baseline="none":  b = 0 (plain REINFORCE, Williams 1992)
- baseline="ema":   b = an exponential moving average of past rewards (a cheap value estimate)
- baseline="rloo":  b_i = mean of the OTHER G-1 rewards of the same prompt (needs G >= 2)
- baseline="reinforce++" (Hu, 2025): per-token advantages, the return-to-go of the k1-shaped per-token reward,
  standardised over every real token of the batch (`losses.reinforce_plus_plus_advantages`); the loss is their
  token mean. "reinforce++-baseline" subtracts the group's mean reward first (needs G >= 2). These are
  REINFORCE++'s advantages with a REINFORCE step: the paper and OpenRLHF put them through PPO's clipped loss, with
  epochs and minibatches over each batch, which this trainer does not.

The KL leash enters through the reward, as in RLOO: R'(x, y) = R(x, y) - β · Σ_t log p_θ(y_t)/p_ref(y_t) (for
REINFORCE++ per token: r_t = -β log p_θold(y_t)/p_ref(y_t), plus R at the last token).
One pass over each batch of fresh samples (REINFORCE is on-policy: no ratio, no clipping).
"""

from __future__ import annotations

from dataclasses import dataclass

from minirlhf.diagnostics import zero_std_groups
from minirlhf.losses import (
    behaviour_metrics,
    check_ema_decay,
    check_group_size,
    ema_baseline,
    kl_shaped_rewards,
    masked_mean,
    reinforce_loss,
    reinforce_plus_plus_advantages,
    rloo_advantages,
)
from minirlhf.tasks import Task
from minirlhf.trainers.config import choice, require
from minirlhf.trainers.online import (
    OnlineConfig,
    diagnose,
    experience_metrics,
    online_run,
    policy_logprobs,
)

BASELINES = ("none", "ema", "rloo", "reinforce++", "reinforce++-baseline")
PER_TOKEN_BASELINES = ("reinforce++", "reinforce++-baseline")  # Â_i,t per token, standardised over the batch


@dataclass
class ReinforceConfig(OnlineConfig):
    lr: float = 2e-4
    beta: float = 0.04
    # b in Â = R - b: "none" (b = 0), "ema" (moving average of rewards), "rloo" (mean of the other G - 1 rewards);
    # "reinforce++": k1 KL in the per-token reward, return-to-go, standardised over the batch ("reinforce++-baseline":
    # the group's mean reward subtracted first)
    baseline: str = choice("rloo", BASELINES)
    ema_decay: float = 0.9  # for baseline="ema": b <- decay·b + (1 - decay)·mean(R)

    def validate(self) -> None:
        super().validate()
        if self.baseline in ("rloo", "reinforce++-baseline"):
            require(self, check_group_size, "group_size")
        require(self, check_ema_decay, "ema_decay")


def train_reinforce(
    task: Task | None = None, config: ReinforceConfig | None = None, model=None, tokenizer=None, callbacks=()
):
    """Train p_θ with REINFORCE (+ baseline) on `task`. Returns (model, tokenizer, history)."""
    # The set-up CleanRL writes at the top of each script lives in one place, `online.online_run`: the task
    # (config.task when none is given), device and processes, seeds, p_θ and p_ref, AdamW, the held-out evaluation
    # and the checkpoints. `run.collect()` samples a batch (gathered whole: the advantages see every row), and
    # `run.minibatches(exp)` hands this process its own rows of it.
    run = online_run(task, config or ReinforceConfig(), model, tokenizer, callbacks)
    config = run.config
    ema = run.loop_state.get("ema")  # the moving-average baseline b (baseline="ema")
    # REINFORCE++'s advantages are per token, averaged over the real tokens; the others sum over a sequence
    aggregation = "token-mean" if config.baseline in PER_TOKEN_BASELINES else "seq-sum"

    for step in run.steps(f"reinforce[{config.baseline}]"):
        metrics = run.evaluate(step)
        exp = run.collect()
        metrics |= experience_metrics(exp)
        if config.samples_off_policy:  # μ is not p_θold (no correction here): how far it was, as GRPO logs it
            metrics |= behaviour_metrics(exp.old_logp, exp.behaviour_logp, exp.mask, "none")
        if config.group_size > 1:  # the share of groups whose G rewards are all equal (as GRPO logs it)
            metrics["zero_std_groups"] = zero_std_groups(exp.rewards, config.group_size)
        if config.baseline in PER_TOKEN_BASELINES:
            # REINFORCE++: Â_i,t from the k1-shaped per-token rewards, standardised over the batch  (B, N)
            advantages = reinforce_plus_plus_advantages(
                exp.rewards, exp.mask, exp.old_logp, exp.ref_logp, beta=run.beta,
                group_size=config.group_size if config.baseline == "reinforce++-baseline" else None,
            )
        else:
            # R'(x, y) = R(x, y) - β · KL_seq: the reward the policy gradient sees  (B,)
            shaped = kl_shaped_rewards(exp.rewards, exp.old_logp, exp.ref_logp, exp.mask, run.beta)
            # Â = R' - b
            if config.baseline == "rloo":
                advantages = rloo_advantages(shaped, config.group_size)  # b_i = mean of the other G - 1 rewards
            elif config.baseline == "ema":
                ema = ema_baseline(ema, shaped, config.ema_decay)
                advantages = shaped - ema
            else:
                advantages = shaped
        # their std over the batch (over its real tokens for REINFORCE++)
        metrics["advantage_std"] = advantages[exp.mask.bool()].std().item() \
            if advantages.dim() == 2 else advantages.std().item()

        run.model.train()
        if config.debug:
            metrics |= diagnose(run.model, exp, config,
                                group_advantages=advantages if config.baseline == "rloo" else None)
        for rows in run.minibatches(exp):  # one optimizer step each
            for micro in run.micro_batches(rows):  # gradient accumulation: one forward and backward each
                with run.autocast():
                    logp, entropy = policy_logprobs(run.train_model, exp, micro, config.temperature)  # (b, N)
                # -E[Â · log p_θ(y|x)]; REINFORCE++: -mean over real tokens of Â_i,t log p_θ(y_t|..)
                loss = reinforce_loss(logp, advantages[micro], exp.mask[micro], aggregation)
                run.backward(loss, over=exp.mask[micro], of=exp.mask[rows], aggregation=aggregation)
                run.add(entropy=masked_mean(entropy.detach(), exp.mask[micro]))
            loss, grad_norm = run.step()
            run.add(loss=loss, grad_norm=grad_norm)
        run.model.eval()
        run.log(step, metrics, ema=ema)

    run.finish()
    return run.model, run.tokenizer, run.history
