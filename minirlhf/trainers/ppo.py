"""PPO for language models (Schulman et al., 2017; the RLHF recipe of Ouyang et al., 2022).

Four models in the lecture's picture: the policy p_θ, a frozen reference p_ref, the reward R(x, y) (here the
task's verifier) and the value function V(s_t). As in most implementations, V is the policy itself with a
scalar head (`models.ValueHead`) on its last hidden state: one forward pass gives both log p_θ and V.

Each step:
1. sample y ~ p_θold(·|x) for a batch of prompts, score R(x, y), and record log p_θold, log p_ref and V_old;
2. turn the one reward per sequence into a reward per token, with the KL leash spread over the tokens:

       r_t = -β · k1_t + [t = last token] · R(x, y),      k1_t = log p_θold(y_t|..) - log p_ref(y_t|..)

   so that Σ_t r_t = R(x, y) - β Σ_t log p_θold/p_ref: the return of the episode is the RLHF objective's
   reward minus β times the sampled estimate of KL(p_θ || p_ref);
3. estimate per-token advantages with GAE (Schulman et al., 2016) on the state values V(s_t):

       δ_t = r_t + γ V(s_{t+1}) - V(s_t),      Â_t = Σ_l (γλ)^l δ_{t+l},      R_t = Â_t + V(s_t)  (V's target)

4. `epochs` passes of minibatch steps on  L = L_clip(θ) + c_V · L_V  (- c_H · H with an entropy bonus):

       L_clip = -E_t[ min(r_t(θ) Â_t, clip(r_t(θ), 1-ε, 1+ε) Â_t) ],   r_t(θ) = p_θ(y_t|..) / p_θold(y_t|..)
       L_V    = ½ E_t[ max((V(s_t) - R_t)², (V_old + clip(V - V_old, -c, c) - R_t)²) ]

Why Â_t is a fine stand-in for the true advantage (Spinning Up, "GAE"): with the exact V^π, E[δ_t | s_t, y_t]
= Q(s_t, y_t) - V(s_t) = A(s_t, y_t). Any discounted sum of future δ's telescopes into a return minus V(s_t):
λ = 1 gives Σ_l γ^l r_{t+l} - V(s_t) (unbiased, high variance); λ = 0 gives δ_t (low variance, biased when V
is wrong). λ in between trades the two. γ = 1 is natural here: episodes are a handful of tokens long.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from minirlhf.logprobs import forward_logits, logprobs_on_response
from minirlhf.losses import (
    behaviour_metrics,
    check_gae,
    entropy_bonus,
    explained_variance,
    gae,
    kl_k1,
    kl_k3,
    masked_mean,
    masked_whiten,
    ppo_clip_loss,
    token_rewards,
    value_loss,
)
from minirlhf.tasks import Task
from minirlhf.trainers.config import require, require_non_negative, require_positive
from minirlhf.trainers.online import (
    Experience,
    OnlineConfig,
    diagnose,
    experience_metrics,
    online_run,
)


@dataclass
class PPOConfig(OnlineConfig):
    lr: float = 3e-5  # for p_θ and the value head; on arithmetic 1e-4 moves p_θ 5x further per batch, 3e-4 diverges
    prompts_per_step: int = 64  # one completion per prompt: V is the baseline, no group is needed
    group_size: int = 1  # G: completions per prompt (PPO works with 1)
    beta: float = 0.05  # β: per-token KL penalty -β·k1_t folded into the reward; 0 drops p_ref
    minibatch_size: int | None = 16
    eps: float = 0.2  # ε: clip range of the ratio r_t(θ), its lower side 1 - ε
    eps_high: float | None = None  # ε_high: the upper side 1 + ε_high (DAPO's clip-higher); None = ε
    epochs: int = 4  # passes over each batch of samples
    gamma: float = 1.0  # γ: discount across the tokens of one response
    lam: float = 0.95  # λ: GAE's bias-variance knob (0 = one-step TD error, 1 = Monte Carlo return)
    vf_coef: float = 0.1  # c_V: weight of the value loss in L = L_clip + c_V · L_V
    cliprange_value: float | None = 0.2  # c: V gains nothing from moving further than this from V_old; None = off
    whiten_advantages: bool = True  # standardise Â over the batch's real tokens (mean 0, std 1)
    # c_H: L - c_H·H, an entropy bonus on the policy's next-token entropy (token mean, as L_clip); 0 = off
    entropy_coef: float = 0.0

    def validate(self) -> None:
        super().validate()
        require_positive(self, "eps", "epochs")
        if self.eps_high is not None:
            require_positive(self, "eps_high")
        require_non_negative(self, "vf_coef", "entropy_coef")
        require(self, check_gae, "gamma", "lam")
        if self.cliprange_value is not None:
            require_positive(self, "cliprange_value")


def policy_forward(
    model: nn.Module, value_head: nn.Module, exp: Experience, rows: torch.Tensor, temperature: float,
    entropy_grad: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One forward pass of p_θ -> (logp, entropy, values) on the response columns of the selected rows, each (b, N).
    The entropy has a gradient only with `entropy_grad` (an entropy bonus in the loss).

    Alignment. Full columns are [0, P) prompt (left-padded) and [P, P + N) response. Response token t sits at
    column P + t. The hidden state h[P + t - 1] has read x, y_<t and nothing else: it is the state s_t in which
    y_t is chosen. It gives both the logits of p_θ(· | x, y_<t) (that is how `logprobs_on_response` scores
    column P + t) and V(s_t). So the values of the N response tokens are the head on columns P-1 .. P+N-2.
    Column P-1 is always a real token: prompts are left-padded, so their last token sits there.
    """
    r, rows = exp.rollout, exp.sampled(rows)  # this process's rows of the batch, as rows of its rollout
    ids, attn, resp = r.input_ids[rows], r.attention_mask[rows], r.response_mask[rows]  # (b, P + N)
    logits, hidden = forward_logits(model, ids, attn, output_hidden_states=True)  # (b, P+N, V), (b, P+N, d)
    logp, entropy = logprobs_on_response(logits, ids, resp, temperature, return_entropy=True,
                                         entropy_grad=entropy_grad)  # (b, P + N) each
    P = exp.prompt_length
    # V(s_t) = head(h[P + t - 1]) for t = 0 .. N-1
    values = value_head(hidden[:, P - 1 : -1])  # (b, N)
    return exp.response(logp), exp.response(entropy), values


def train_ppo(task: Task | None = None, config: PPOConfig | None = None, model=None, tokenizer=None, callbacks=()):
    """Train p_θ (and its value head) with PPO on `task`. Returns (model, tokenizer, history).

    The value head is not part of the returned model; with `out_dir` it is saved as value_head.safetensors.
    """
    # The set-up CleanRL writes at the top of each script lives in one place, `online.online_run`: the task
    # (config.task when none is given), device and processes, seeds, p_θ, p_ref and V, AdamW, the held-out
    # evaluation and the checkpoints. `run.collect()` samples a batch (gathered whole: GAE and the whitening see
    # every row), and `run.minibatches(exp)` hands this process its own rows of it.
    run = online_run(task, config or PPOConfig(), model, tokenizer, callbacks, value_head=True)
    config = run.config

    for step in run.steps("ppo"):
        metrics = run.evaluate(step)
        # 1. sample y ~ p_θold, score R(x, y), record log p_θold (from sampling) and log p_ref
        exp = run.collect()
        if config.samples_off_policy:  # μ is not p_θold (no correction here): how far it was, as GRPO logs it
            metrics |= behaviour_metrics(exp.old_logp, exp.behaviour_logp, exp.mask, "none")
        mask = exp.mask  # (B, N)
        with torch.no_grad():
            # V_old(s_t), once per batch: the baseline of GAE and the anchor of value clipping (each process its
            # own rows, gathered whole)
            with run.autocast():
                _, _, old_values = policy_forward(run.model, run.value_head, exp, exp.share, config.temperature)
            old_values = run.gather(old_values)  # (B, N)
            # 2. r_t = -β · (log p_θold - log p_ref) + R(x, y) at the last token
            kl = kl_k1(exp.old_logp, exp.ref_logp) if exp.ref_logp is not None else None  # (B, N)
            rewards = token_rewards(exp.rewards, mask, kl, run.beta)  # (B, N); β fixed, or adapted to kl_target
            # 3. Â_t = Σ_l (γλ)^l δ_{t+l} and the value targets R_t = Â_t + V_old(s_t)
            advantages, returns = gae(rewards, old_values, mask, config.gamma, config.lam)  # (B, N) each
            metrics |= experience_metrics(exp) | {
                "value_mean": masked_mean(old_values, mask).item(),
                "return_mean": masked_mean(returns, mask).item(),
                "advantage_mean": masked_mean(advantages, mask).item(),
                "explained_variance": explained_variance(old_values, returns, mask),
            }
            if config.whiten_advantages:  # over the real tokens of the batch
                advantages = masked_whiten(advantages, mask)

        # 4. `epochs` passes of minibatch steps on L = L_clip + c_V · L_V
        run.model.train()
        if config.debug:
            metrics |= diagnose(run.model, exp, config)
        for _ in range(config.epochs):
            for rows in run.minibatches(exp):  # one optimizer step each
                for micro in run.micro_batches(rows):  # gradient accumulation: one forward and backward each
                    with run.autocast():
                        logp, entropy, values = policy_forward(run.train_model, run.train_value_head, exp, micro,
                                                               config.temperature, config.entropy_coef > 0)
                    m = mask[micro]
                    policy_loss, stats = ppo_clip_loss(logp, exp.old_logp[micro], advantages[micro], m,
                                                        eps=config.eps, eps_high=config.eps_high)
                    v_loss = value_loss(values, old_values[micro], returns[micro], m, clip=config.cliprange_value)
                    # L = L_clip + c_V · L_V  (one loss, one optimiser: the head and the trunk learn together),
                    # normalised by the whole minibatch's tokens
                    loss = policy_loss + config.vf_coef * v_loss
                    if config.entropy_coef > 0:  # - c_H·H, a token mean like L_clip
                        loss = loss + entropy_bonus(entropy, m, config.entropy_coef)
                    run.backward(loss, over=m, of=mask[rows])
                    run.add(policy_loss=policy_loss, value_loss=v_loss, clip_frac=stats["clip_frac"],
                            clip_frac_low=stats["clip_frac_low"], clip_frac_high=stats["clip_frac_high"],
                            ratio_mean=stats["ratio_mean"],
                            ratio_max=stats["ratio_max"],  # the most-moved token of the minibatch
                            approx_kl=stats["approx_kl"],  # KL(p_θold || p_θ): how far this batch moved p_θ
                            entropy=masked_mean(entropy.detach(), m))
                    if exp.ref_logp is not None:  # per-token KL(p_θ || p_ref), k3, as GRPO logs it
                        run.add(kl=masked_mean(kl_k3(logp.detach(), exp.ref_logp[micro]), m))
                loss, grad_norm = run.step()
                run.add(loss=loss, grad_norm=grad_norm)
        run.model.eval()
        run.log(step, metrics)

    run.finish()  # the policy after the last update, and its value head beside it
    return run.model, run.tokenizer, run.history
