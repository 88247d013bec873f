"""Worked solutions of the implement-it exercises (minirlhf.course.exercises), one function per exercise, and the
capstone's training step (minirlhf.course.capstone).

Each function has the name and signature of the notebook's stub, so `exercises.solution(id)` can show its source
and `exercises.fill_solutions(nb)` can paste it into the stub cell. They are written with plain torch, the way a
student would, and the checker holds them to the library's functions (minirlhf.losses) like any other answer.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minirlhf.course.step_output import StepOutput
from minirlhf.logprobs import response_logprobs
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic


def reinforce_gradient(logits: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                       baseline: float) -> torch.Tensor:
    """(1/N) Σ_i (R(a_i) - b) ∇_θ log p_θ(a_i) for p_θ = softmax(θ): the REINFORCE estimate of ∇J, shape (K,)."""
    p = torch.softmax(logits, -1)  # (K,)
    score = F.one_hot(actions, logits.shape[-1]).to(p.dtype) - p  # (N, K) ∇_θ log softmax(θ)_a = e_a - p
    weights = rewards[actions] - baseline  # (N,) R(a_i) - b
    return (weights[:, None] * score).mean(0)


def train_bandit(logits: torch.Tensor, rewards: torch.Tensor, n_steps: int, n_samples: int, lr: float,
                 seed: int) -> torch.Tensor:
    """n_steps of REINFORCE with a leave-one-out baseline on a K-armed bandit; returns the final logits θ."""
    generator = torch.Generator().manual_seed(seed)
    theta = logits.clone()
    for _ in range(n_steps):
        p = torch.softmax(theta, -1)
        actions = torch.multinomial(p, n_samples, replacement=True, generator=generator)  # fresh samples of p_θ
        r = rewards[actions]  # (N,)
        advantages = r - (r.sum() - r) / (n_samples - 1)  # R_i - mean of the other N - 1
        score = F.one_hot(actions, theta.shape[-1]).to(p.dtype) - p  # (N, K)
        theta = theta + lr * (advantages[:, None] * score).mean(0)  # gradient ASCENT on J
    return theta


def leave_one_out_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Â_i = R_i - (1/(G-1)) Σ_{j≠i} R_j within each group of G consecutive rewards; shape (B,)."""
    R = rewards.view(-1, group_size)  # (B/G, G)
    others_mean = (R.sum(1, keepdim=True) - R) / (group_size - 1)
    return (R - others_mean).reshape(-1)


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                        eps: float) -> torch.Tensor:
    """-mean over real tokens of min(r_t Â_t, clip(r_t, 1-ε, 1+ε) Â_t), r_t = exp(logp - old_logp); a scalar."""
    keep = mask.bool()
    ratio = torch.exp(torch.where(keep, logp - old_logp, torch.zeros_like(logp)))  # (B, T), 1 on padding
    objective = torch.minimum(ratio * advantages, torch.clamp(ratio, 1 - eps, 1 + eps) * advantages)
    objective = torch.where(keep, objective, torch.zeros_like(objective))
    return -objective.sum() / keep.sum().clamp_min(1)


def gae_advantages(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float,
                   lam: float) -> torch.Tensor:
    """Â_t = δ_t + γλ Â_{t+1}, δ_t = r_t + γ V(s_{t+1}) - V(s_t), with V = 0 after the last real token; (B, T)."""
    keep = mask.bool()
    rewards = torch.where(keep, rewards, torch.zeros_like(rewards))
    values = torch.where(keep, values, torch.zeros_like(values))
    advantages = torch.zeros_like(rewards)
    next_value = torch.zeros_like(values[:, 0])
    next_advantage = torch.zeros_like(values[:, 0])
    for t in reversed(range(rewards.shape[1])):
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        next_advantage = torch.where(keep[:, t], delta + gamma * lam * next_advantage, torch.zeros_like(delta))
        advantages[:, t] = next_advantage
        next_value = values[:, t]
    return advantages


def group_advantages(rewards: torch.Tensor, group_size: int) -> torch.Tensor:
    """Â_i = (R_i - mean(group)) / std(group), sample std; a group of equal rewards gets Â = 0; shape (B,)."""
    R = rewards.view(-1, group_size)  # (B/G, G)
    std = R.std(1, keepdim=True)  # divides by G - 1
    centred = R - R.mean(1, keepdim=True)
    return torch.where(std < 1e-4, torch.zeros_like(R), centred / std.clamp_min(1e-4)).reshape(-1)


def k3_estimate(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = p_ref/p_θ - log(p_ref/p_θ) - 1 per token, from log-probabilities."""
    log_ratio = ref_logp - logp  # log p_ref/p_θ
    return torch.exp(log_ratio) - log_ratio - 1


def dpo_pair_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
                  ref_chosen_logps: torch.Tensor, ref_rejected_logps: torch.Tensor,
                  beta: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(-log σ(r_w - r_l), r_w, r_l) per pair, with the implicit rewards r = β log p_θ(y|x)/p_ref(y|x)."""
    chosen_rewards = beta * (policy_chosen_logps - ref_chosen_logps)
    rejected_rewards = beta * (policy_rejected_logps - ref_rejected_logps)
    loss = -F.logsigmoid(chosen_rewards - rejected_rewards)  # log σ stays finite where log(sigmoid(.)) is -inf
    return loss, chosen_rewards.detach(), rejected_rewards.detach()


def reward_model_loss(chosen_scores: torch.Tensor, rejected_scores: torch.Tensor) -> torch.Tensor:
    """Bradley–Terry: -mean over pairs of log σ(RM(x, y_w) - RM(x, y_l)); a scalar."""
    return -F.logsigmoid(chosen_scores - rejected_scores).mean()


def grpo_token_loss(logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor, advantages: torch.Tensor,
                    mask: torch.Tensor, eps: float, beta: float) -> torch.Tensor:
    """-token mean of J_t = min(r_t Â_i, clip(r_t, 1-ε, 1+ε) Â_i) - β k3_t, one Â_i per sequence; a scalar."""
    keep = mask.bool()
    logp, old_logp, ref_logp = (torch.where(keep, x, torch.zeros_like(x)) for x in (logp, old_logp, ref_logp))
    ratio = torch.exp(logp - old_logp)  # (B, T) r_t
    A = advantages[:, None]  # (B, 1): every token of answer i shares Â_i
    surrogate = torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)
    log_ratio = ref_logp - logp  # log p_ref/p_θ
    k3 = torch.exp(log_ratio) - log_ratio - 1
    objective = torch.where(keep, surrogate - beta * k3, torch.zeros_like(surrogate))
    return -objective.sum() / keep.sum().clamp_min(1)


def kl_penalized_rewards(rewards: torch.Tensor, logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor,
                         beta: float) -> torch.Tensor:
    """r_t = -β (log p_θ(y_t) - log p_ref(y_t)), plus R(x, y) on the last real token; 0 on padding; (B, T)."""
    keep = mask.bool()
    r = -beta * (logp - ref_logp)  # (B, T) the KL penalty of each token
    last = keep.sum(-1) - 1  # (B,) column of each response's last real token
    r = r + F.one_hot(last, mask.shape[1]).to(r.dtype) * rewards[:, None]
    return torch.where(keep, r, torch.zeros_like(r))


def simpo_pair_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
                    chosen_lengths: torch.Tensor, rejected_lengths: torch.Tensor, beta: float,
                    gamma: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(-log σ(r_w - r_l - γ), r_w, r_l) per pair, with the reference-free rewards r = (β/|y|) log p_θ(y|x)."""
    chosen_rewards = beta * policy_chosen_logps / chosen_lengths  # the average token log-prob, times β
    rejected_rewards = beta * policy_rejected_logps / rejected_lengths
    loss = -F.logsigmoid(chosen_rewards - rejected_rewards - gamma)
    return loss, chosen_rewards.detach(), rejected_rewards.detach()


def orpo_pair_loss(policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
                   chosen_lengths: torch.Tensor, rejected_lengths: torch.Tensor,
                   lam: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(L_SFT + λ L_OR, log odds(y_w), log odds(y_l)) per pair; odds of P = exp((1/|y|) log p_θ(y|x))."""
    chosen_avg = policy_chosen_logps / chosen_lengths  # log P_θ(y_w|x)
    rejected_avg = policy_rejected_logps / rejected_lengths
    chosen_log_odds = chosen_avg - torch.log1p(-torch.exp(chosen_avg))  # log P - log(1 - P)
    rejected_log_odds = rejected_avg - torch.log1p(-torch.exp(rejected_avg))
    odds_ratio_loss = -F.logsigmoid(chosen_log_odds - rejected_log_odds)
    return -chosen_avg + lam * odds_ratio_loss, chosen_log_odds.detach(), rejected_log_odds.detach()


def kto_example_loss(policy_logps: torch.Tensor, ref_logps: torch.Tensor, desirable: torch.Tensor,
                     policy_kl_logps: torch.Tensor, ref_kl_logps: torch.Tensor, beta: float, desirable_weight: float,
                     undesirable_weight: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(λ_y - v(x, y), β r_θ, z_ref) per example; z_ref = max(0, mean of the mismatched pairs' log-ratios)."""
    logratio = policy_logps - ref_logps  # r_θ(x, y)
    z_ref = (policy_kl_logps - ref_kl_logps).mean().clamp_min(0).detach()  # the reference point, no gradient
    value = torch.where(desirable, desirable_weight * torch.sigmoid(beta * (logratio - z_ref)),
                        undesirable_weight * torch.sigmoid(beta * (z_ref - logratio)))
    weight = torch.where(desirable, desirable_weight, undesirable_weight).to(value)  # λ_y
    return weight - value, beta * logratio.detach(), z_ref


def clip_higher_surrogate(ratio: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                          eps_high: float) -> torch.Tensor:
    """min(r Â, clip(r, 1 - ε_low, 1 + ε_high) Â) elementwise, to MAXIMISE; same shape as ratio."""
    clipped_ratio = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)  # DAPO: the upper edge moves, the lower stays
    return torch.minimum(ratio * advantages, clipped_ratio * advantages)


def informative_group_mask(rewards: torch.Tensor, group_size: int, eps: float) -> torch.Tensor:
    """True for each group of G consecutive rewards whose sample std is >= eps (a learning signal); (B/G,) bool."""
    R = rewards.view(-1, group_size)  # (B/G, G): one row per prompt
    return R.std(1) >= eps  # divides by G - 1, like grpo_advantages' test for a constant group


def gspo_sequence_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """s_i = exp(mean of logp - old_logp over the real tokens of row i); 1 for a row without real tokens; (B,)."""
    keep = mask.bool()
    log_ratio = torch.where(keep, logp - old_logp, torch.zeros_like(logp))  # (B, T) log r_t, 0 on padding
    lengths = keep.sum(-1).clamp_min(1)  # (B,) |y_i|, at least 1 so that an empty row gives exp(0) = 1
    return torch.exp(log_ratio.sum(-1) / lengths)



def cispo_objective(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_low: float,
                    eps_high: float) -> torch.Tensor:
    """sg[clip(r, 1 - ε_low, 1 + ε_high)] · Â · log p_θ elementwise, r = exp(logp - old_logp), to MAXIMISE."""
    ratio = torch.exp(logp - old_logp)  # r_t(θ) = p_θ / p_θold
    weight = torch.clamp(ratio, 1 - eps_low, 1 + eps_high).detach()  # a capped importance weight, a constant
    return weight * advantages * logp  # REINFORCE's Â log p_θ, weighted: every token keeps its gradient


def tool_use_loss(logp: torch.Tensor, advantages: torch.Tensor, lengths: torch.Tensor,
                  tool_mask: torch.Tensor) -> torch.Tensor:
    """-Σ m Â log p_θ / Σ m over the policy's own tokens: m_t = 1[t < length] (EOS included) and not the tool's."""
    positions = torch.arange(logp.shape[-1], device=logp.device)  # (T,)
    real = positions[None, :] < lengths[:, None]  # (B, T) up to and including EOS, the tool's tokens too
    mask = real & ~tool_mask  # (B, T) the policy's actions: the calculator's tokens are context
    per_token = torch.where(mask, advantages[:, None] * logp, torch.zeros_like(logp))  # padding's logp is garbage
    return -per_token.sum() / mask.sum()  # the token mean over the policy's tokens


def corrected_objective(logp: torch.Tensor, old_logp: torch.Tensor, behaviour_logp: torch.Tensor,
                        advantages: torch.Tensor, mask: torch.Tensor, eps: float, cap: float) -> torch.Tensor:
    """w_i · min(r_t Â_i, clip(r_t, 1 - ε, 1 + ε) Â_i) per token, to MAXIMISE, 0 on padding: r_t = p_θ / p_θold,
    and TRL's default sampler correction w_i = ρ_i · 1[ρ_i ≤ C], ρ_i = Π_t p_θold / μ over the answer, a constant."""
    keep = mask.bool()
    log_rho = torch.where(keep, old_logp - behaviour_logp, torch.zeros_like(old_logp))  # (B, T) log ρ_t, 0 on padding
    rho = torch.exp(log_rho.sum(-1, keepdim=True)).detach()  # (B, 1) ρ_i = Π_t ρ_t, no gradient
    weight = torch.where(rho > cap, torch.zeros_like(rho), rho)  # the whole answer dropped when ρ_i > C
    ratio = torch.exp(logp - old_logp)  # (B, T) r_t: the clip compares p_θ with p_θold only
    A = advantages[:, None]  # (B, 1) one advantage per answer
    objective = torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)
    return torch.where(keep, weight * objective, torch.zeros_like(objective))  # (B, T)


def my_step(model, tokenizer, optimizer, prompts, generator, group_size, eps):
    """One GRPO step: sample G answers per prompt, reward, group advantages, clipped loss (β = 0), one update."""
    model.eval()
    rollout = sample(model, tokenizer, prompts, group_size=group_size, max_new_tokens=arithmetic.MAX_NEW_TOKENS,
                     generator=generator)
    rewards = torch.tensor(arithmetic.correctness_reward(rollout.prompts, rollout.completions))  # (B,)
    R = rewards.view(-1, group_size)  # one row per prompt
    std = R.std(1, keepdim=True)
    advantages = torch.where(std < 1e-4, torch.zeros_like(R), (R - R.mean(1, keepdim=True)) / std.clamp_min(1e-4))
    advantages = advantages.reshape(-1)  # (B,)
    model.train()
    logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                             prompt_length=rollout.prompt_length)  # (B, P + N), with a gradient
    mask = rollout.response_mask.bool()
    ratio = torch.exp(torch.where(mask, logp - rollout.logprobs, torch.zeros_like(logp)))  # old = sampling log-probs
    A = advantages[:, None]
    objective = torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)
    loss = -torch.where(mask, objective, torch.zeros_like(objective)).sum() / mask.sum()  # token mean
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    model.eval()
    return StepOutput(rollout.completions, rewards, advantages, loss.detach())
