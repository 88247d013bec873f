"""PPO's exercises: the clipped loss and GAE (notebook 03a), the per-token KL reward (notebook 08)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from minirlhf import losses
from minirlhf.course import toy
from minirlhf.course.exercises.engine import DTYPE, Case, Exercise, Mistake, randn, tensor

# ---------------------------------------------------------------------------------------------------------
# ppo-clip
# ---------------------------------------------------------------------------------------------------------


def _ppo_clip(logp, old_logp, advantages, mask, eps):
    return losses.ppo_clip_loss(logp, old_logp, advantages, mask, eps)[0]


def _ppo_cases():
    eps = 0.2
    at_bounds = torch.log(tensor([[1 - eps, 1 + eps, 1 - eps, 1 + eps]]))
    padded_logp = tensor([[-1.0, -0.5, -2.0, -9.0], [-0.3, -9.0, -9.0, -9.0]])
    padded_old = tensor([[-1.2, -0.2, -2.0, 0.0], [-0.9, 0.0, 0.0, 0.0]])
    padded_mask = tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    padded_adv = tensor([[1.0, -1.0, 0.5, 5.0], [2.0, 5.0, 5.0, 5.0]])
    logp, old_logp = randn(3, 6, seed=5) * 0.3 - 1.0, randn(3, 6, seed=6) * 0.3 - 1.0
    ones = torch.ones(1, 2, dtype=DTYPE)
    hair = tensor([[-5.3, -5.3, -7.1, -7.1]])  # not float32 numbers: rounding them moves the ratios visibly
    return [
        Case("random ratios, Â of both signs", dict(logp=logp, old_logp=old_logp, advantages=randn(3, 6, seed=7),
                                                    mask=torch.ones(3, 6, dtype=DTYPE), eps=eps)),
        Case("r far above 1 + ε, Â > 0", dict(logp=tensor([[0.0, -0.1]]), old_logp=tensor([[-1.0, -1.0]]),
                                              advantages=tensor([[1.0, 2.0]]), mask=ones, eps=eps)),
        Case("r far below 1 - ε, Â < 0", dict(logp=tensor([[-3.0, -2.5]]), old_logp=tensor([[-1.0, -1.0]]),
                                              advantages=tensor([[-1.0, -2.0]]), mask=ones, eps=eps)),
        Case("r far above 1 + ε, Â < 0 (not clipped)", dict(logp=tensor([[0.0]]), old_logp=tensor([[-1.0]]),
                                                            advantages=tensor([[-1.5]]),
                                                            mask=torch.ones(1, 1, dtype=DTYPE), eps=eps)),
        Case("r far below 1 - ε, Â > 0 (not clipped)", dict(logp=tensor([[-3.0]]), old_logp=tensor([[-1.0]]),
                                                            advantages=tensor([[1.5]]),
                                                            mask=torch.ones(1, 1, dtype=DTYPE), eps=eps)),
        Case("r exactly at 1 ± ε", dict(logp=at_bounds, old_logp=torch.zeros(1, 4, dtype=DTYPE),
                                        advantages=tensor([[1.0, 1.0, -1.0, -1.0]]),
                                        mask=torch.ones(1, 4, dtype=DTYPE), eps=eps), check_grad=False),
        Case("ε = 0.1: r = 1.15 and 0.85 are clipped", dict(logp=torch.log(tensor([[1.15, 0.85]])),
                                                            old_logp=torch.zeros(1, 2, dtype=DTYPE),
                                                            advantages=tensor([[1.0, -2.0]]), mask=ones, eps=0.1)),
        Case("ε = 0.3: r = 1.25 and 0.75 are not clipped", dict(logp=torch.log(tensor([[1.25, 0.75]])) - 0.5,
                                                                old_logp=torch.full((1, 2), -0.5, dtype=DTYPE),
                                                                advantages=tensor([[2.0, -1.0]]), mask=ones,
                                                                eps=0.3)),
        Case("padding at the end of each row", dict(logp=padded_logp, old_logp=padded_old, advantages=padded_adv,
                                                    mask=padded_mask, eps=eps)),
        Case("one-token response next to a longer one", dict(logp=padded_logp, old_logp=padded_old,
                                                             advantages=-padded_adv, mask=padded_mask, eps=0.1)),
        Case("ratios a hair from 1, Â cancelling: float32 rounding shows",
             dict(logp=hair + tensor([[1e-3, -2e-3, 3e-3, 0.0]]), old_logp=hair,
                  advantages=tensor([[1.0, -1.0, 1.0, -1.0]]), mask=torch.ones(1, 4, dtype=DTYPE), eps=eps)),
    ]


def _ppo_with(surrogate=losses.clipped_surrogate, ratio_of=lambda logp, old: torch.exp(logp - old),
              fixed_eps=None, detach_ratio=False, use_mask=True, reduce="token-mean", sign=-1.0):
    """The PPO loss with one thing made wrong on purpose."""
    def loss(logp, old_logp, advantages, mask, eps):
        ratio = ratio_of(logp, old_logp)
        if detach_ratio:
            ratio = ratio.detach()
        objective = surrogate(ratio, advantages, eps if fixed_eps is None else fixed_eps)
        if not use_mask:
            return sign * objective.mean()
        if reduce == "sum":
            return sign * losses.masked_sum(objective, mask)
        return sign * losses.aggregate(objective, mask, reduce)
    return loss


def _surrogate_clip_at(low, high):
    """min(r Â, clip(r, low(ε), high(ε)) Â): the clip range written wrong."""
    def surrogate(ratio, advantages, eps):
        return torch.minimum(ratio * advantages, torch.clamp(ratio, low(eps), high(eps)) * advantages)
    return surrogate


def _surrogate_advantage_clipped(ratio, advantages, eps):
    return torch.minimum(ratio * advantages, ratio * torch.clamp(advantages, 1 - eps, 1 + eps))


def _ppo_mask_inverted(logp, old_logp, advantages, mask, eps):
    objective = losses.clipped_surrogate(torch.exp(logp - old_logp), advantages, eps)
    padding = 1 - mask
    return -losses.masked_sum(objective, padding) / padding.sum().clamp_min(1)


def _ppo_over_length(logp, old_logp, advantages, mask, eps):
    objective = losses.clipped_surrogate(torch.exp(logp - old_logp), advantages, eps)
    return -losses.masked_sum(objective, mask) / mask.shape[1]


def _surrogate_max(ratio, advantages, eps):
    return torch.maximum(ratio * advantages, torch.clamp(ratio, 1 - eps, 1 + eps) * advantages)


def _surrogate_upper_clip_only(ratio, advantages, eps):
    return torch.minimum(ratio * advantages, torch.clamp(ratio, max=1 + eps) * advantages)


def _surrogate_clipped_only(ratio, advantages, eps):
    return torch.clamp(ratio, 1 - eps, 1 + eps) * advantages


PPO_CLIP = Exercise(
    "ppo-clip", "ppo", "clipped_policy_loss", _ppo_clip, _ppo_cases,
    (
        Mistake("max instead of min", _ppo_with(_surrogate_max),
                "you take the max of the two terms: PPO takes the MIN, the pessimistic bound, so that moving "
                "the ratio beyond the clip range never pays."),
        Mistake("sign flip", _ppo_with(sign=1.0),
                "the sign is flipped: min(r Â, clip(r) Â) is an objective to MAXIMISE, the loss is its negative."),
        Mistake("clip on one side only", _ppo_with(_surrogate_upper_clip_only),
                "only 1 + ε is clipped: with Â < 0 the ratio must be clipped at 1 - ε as well, "
                "clip(r, 1 - ε, 1 + ε)."),
        Mistake("no min", _ppo_with(_surrogate_clipped_only),
                "you return only the clipped term: the min with the unclipped r Â is what keeps the full "
                "(unclipped) penalty when the ratio moves the wrong way."),
        Mistake("ε fixed at 0.2", _ppo_with(fixed_eps=0.2),
                "the clip range ignores the eps argument (0.2 is written in): clip at 1 - eps and 1 + eps."),
        Mistake("log-ratio used as the ratio", _ppo_with(ratio_of=lambda logp, old: logp - old),
                "logp - old_logp is the LOG of the ratio: r = exp(logp - old_logp), which is 1 when nothing moved."),
        Mistake("ratio upside down", _ppo_with(ratio_of=lambda logp, old: torch.exp(old - logp)),
                "the ratio is upside down: r = p_θ / p_θold = exp(logp - old_logp)."),
        Mistake("detached ratio", _ppo_with(detach_ratio=True),
                "the values are right but no gradient reaches logp: the ratio is detached (or built from "
                "numbers that are). Compute r = exp(logp - old_logp) with torch ops on logp itself."),
        Mistake("forgotten mask", _ppo_with(use_mask=False),
                "padded tokens are counted: apply the mask, and average over the real tokens only."),
        Mistake("padding counted in the mean", _ppo_with(reduce="constant"),
                "padding is counted in the mean: divide by the number of real tokens (mask.sum()), not by B·T."),
        Mistake("sum instead of mean", _ppo_with(reduce="sum"),
                "you sum over the tokens: the loss is the MEAN over all real tokens, Σ (mask · objective) / Σ mask."),
        Mistake("sum per sequence", _ppo_with(reduce="seq-sum"),
                "you sum over the tokens of each response and average the responses: the loss is the MEAN over "
                "all real tokens, Σ (mask · objective) / Σ mask."),
        Mistake("mean per sequence", _ppo_with(reduce="seq-mean"),
                "you average each response, then the responses: that weighs a token of a short response more. "
                "Average over all real tokens of the batch at once, Σ (mask · objective) / Σ mask."),
        Mistake("mask read as 1 = padding", _ppo_mask_inverted,
                "you average over the padding: mask is 1 on the REAL tokens and 0 on padding."),
        Mistake("advantage clipped", _ppo_with(_surrogate_advantage_clipped),
                "you clip the advantage: it is the RATIO that is clipped, min(r Â, clip(r, 1 - ε, 1 + ε) Â)."),
        Mistake("clip range [-ε, ε]", _ppo_with(_surrogate_clip_at(lambda e: -e, lambda e: e)),
                "the clip range is [-ε, ε]: the ratio is 1 when nothing moved, clip it to [1 - ε, 1 + ε]."),
        Mistake("log-ratio clipped at ±ε", _ppo_with(_surrogate_clip_at(lambda e: math.exp(-e), math.exp)),
                "you clip log r at ±ε, which clips r at exp(±ε), not at 1 ± ε: clip the ratio itself, "
                "clip(r, 1 - ε, 1 + ε)."),
        Mistake("divided by the length T", _ppo_over_length,
                "you divide by the padded length T (mask.shape[1]): the loss is the MEAN over all real tokens, "
                "Σ (mask · objective) / Σ mask."),
    ),
    grad_inputs=("logp",),
)


# ---------------------------------------------------------------------------------------------------------
# gae
# ---------------------------------------------------------------------------------------------------------


def _gae(rewards, values, mask, gamma, lam):
    return losses.gae(rewards, values, mask, gamma, lam)[0]


def _gae_cases():
    traj = toy.toy_trajectory()
    padded_rewards = tensor([[0.0, -0.1, 1.0, 7.0, 7.0], [0.5, 7.0, 7.0, 7.0, 7.0], [0.1, 0.0, 0.2, -0.3, 1.0]])
    padded_values = tensor([[0.2, 0.4, 0.6, 9.0, 9.0], [0.3, 9.0, 9.0, 9.0, 9.0], [0.5, 0.4, 0.3, 0.2, 0.1]])
    padded_mask = tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    empty_mask = tensor([[1, 1, 0], [0, 0, 0]])
    return [
        Case("toy trajectory, γ = 1, λ = 0.95", dict(rewards=traj.rewards, values=traj.values, mask=traj.mask,
                                                     gamma=1.0, lam=0.95)),
        Case("λ = 0: one-step TD errors", dict(rewards=traj.rewards, values=traj.values, mask=traj.mask, gamma=0.9,
                                               lam=0.0)),
        Case("λ = 1, γ = 0.9: discounted return minus V", dict(rewards=traj.rewards, values=traj.values,
                                                               mask=traj.mask, gamma=0.9, lam=1.0)),
        Case("random rewards and values, γ = 0.8, λ = 0.6", dict(rewards=randn(2, 4, seed=13),
                                                                 values=randn(2, 4, seed=14),
                                                                 mask=torch.ones(2, 4, dtype=DTYPE), gamma=0.8,
                                                                 lam=0.6)),
        Case("padding (garbage r and V after the last token), one-token row",
             dict(rewards=padded_rewards, values=padded_values, mask=padded_mask, gamma=0.99, lam=0.9)),
        Case("an empty response", dict(rewards=tensor([[0.0, 1.0, 4.0], [4.0, 4.0, 4.0]]),
                                       values=tensor([[0.5, 0.5, 4.0], [4.0, 4.0, 4.0]]), mask=empty_mask, gamma=1.0,
                                       lam=0.95)),
    ]


def _gae_loop(decay=lambda g, la: g * la, zero_padding=True, mask_output=True, reverse=True, next_offset=1,
              gamma_in_delta=True, last=0, first=0, invert_mask=False, delta_discount=lambda g, la: g,
              carry_delta=False):
    """GAE's backward recursion Â_t = δ_t + decay · Â_{t+1}, with its bookkeeping made wrong on purpose."""
    def gae(rewards, values, mask, gamma, lam):
        if invert_mask:
            mask = 1 - mask
        if zero_padding:
            rewards, values = rewards * mask, values * mask
        T = rewards.shape[1]
        advantages = torch.zeros_like(rewards)
        running = torch.zeros_like(rewards[:, 0])
        next_delta = torch.zeros_like(running)
        for t in (reversed(range(first, T - last)) if reverse else range(first, T - last)):
            s = t + next_offset
            next_value = values[:, s] if s < T else torch.zeros_like(running)
            discount = delta_discount(gamma, lam) if gamma_in_delta else 1.0
            delta = rewards[:, t] + discount * next_value - values[:, t]
            running = delta + decay(gamma, lam) * (next_delta if carry_delta else running)
            next_delta = delta * mask[:, t] if mask_output else delta
            if mask_output:
                running = running * mask[:, t]
            advantages[:, t] = running
        return advantages
    return gae


def _gae_discounted_from_start(rewards, values, mask, gamma, lam):
    deltas = _gae_loop(decay=lambda g, la: 0.0)(rewards, values, mask, gamma, lam)  # δ_t, 0 on padding
    powers = (gamma * lam) ** torch.arange(deltas.shape[1], dtype=deltas.dtype)  # (γλ)^l from the FIRST token
    tail_sums = (deltas * powers).flip(1).cumsum(1).flip(1)
    return tail_sums * mask


def _gae_normalised(rewards, values, mask, gamma, lam):
    advantages = _gae(rewards, values, mask, gamma, lam)
    real = mask.bool()
    return torch.where(real, (advantages - advantages[real].mean()) / advantages[real].std(), 0.0)


def _gae_returns(rewards, values, mask, gamma, lam):
    return losses.gae(rewards, values, mask, gamma, lam)[1]


GAE = Exercise(
    "gae", "ppo", "gae_advantages", _gae, _gae_cases,
    (
        Mistake("bootstrap from padding", _gae_loop(zero_padding=False),
                "after the last real token you bootstrap from a padded V: the response has ended, V(s_T) = 0 "
                "there (zero the padded values, or mask them)."),
        Mistake("no mask at all", _gae_loop(zero_padding=False, mask_output=False),
                "the mask is not used: padded rewards and values (any number) leak into the real tokens' advantages "
                "and the padded advantages are not 0. Zero r and V on padding, and Â there."),
        Mistake("γ instead of γλ", _gae_loop(decay=lambda g, la: g),
                "the recursion decays by γ only: Â_t = δ_t + γλ Â_{t+1}."),
        Mistake("λ instead of γλ", _gae_loop(decay=lambda g, la: la),
                "the recursion decays by λ only: Â_t = δ_t + γλ Â_{t+1}."),
        Mistake("no γ in δ", _gae_loop(gamma_in_delta=False),
                "the TD error lacks its discount: δ_t = r_t + γ V(s_{t+1}) - V(s_t)."),
        Mistake("next value off by one", _gae_loop(next_offset=0),
                "δ_t bootstraps from V(s_t), the current state: the next state's value is V(s_{t+1}), "
                "values[:, t + 1] (0 after the last token)."),
        Mistake("last token skipped", _gae_loop(last=1),
                "the loop stops one token early: run t over T - 1, ..., 0, the last token included (its δ is "
                "r_T - V(s_T), with nothing to bootstrap from)."),
        Mistake("forward recursion", _gae_loop(reverse=False),
                "the recursion runs forwards: Â_t needs Â_{t+1}, so loop t from the last token back to the first."),
        Mistake("returns instead of advantages", _gae_returns,
                "these are the returns Â_t + V(s_t), the value target: return the advantages themselves."),
        Mistake("first token skipped", _gae_loop(first=1),
                "the loop stops before t = 0 (range(T - 1, 0, -1) excludes 0): run t over T - 1, ..., 0, "
                "reversed(range(T))."),
        Mistake("mask read as 1 = padding", _gae_loop(invert_mask=True),
                "mask is 1 on the REAL tokens and 0 on padding: you zero the real tokens and keep the padding."),
        Mistake("δ carried instead of Â", _gae_loop(carry_delta=True),
                "the recursion adds γλ δ_{t+1}, the next TD error: it adds γλ Â_{t+1}, the next ADVANTAGE, which "
                "carries every later δ."),
        Mistake("γλ in δ", _gae_loop(delta_discount=lambda g, la: g * la),
                "the TD error is discounted by γλ: δ_t = r_t + γ V(s_{t+1}) - V(s_t), λ only weighs the recursion."),
        Mistake("discount counted from the first token", _gae_discounted_from_start,
                "the discount is (γλ)^l with l counted from the first token: Â_t = Σ_l (γλ)^l δ_{t+l}, l counted "
                "from t."),
        Mistake("advantages normalised", _gae_normalised,
                "you whiten the advantages (subtract their mean, divide by their std): GAE returns them raw, the "
                "trainer whitens them if asked."),
    ),
)



# ---------------------------------------------------------------------------------------------------------
# kl-reward
# ---------------------------------------------------------------------------------------------------------


def _kl_reward(rewards, logp, ref_logp, mask, beta):
    return losses.token_rewards(rewards, mask, losses.kl_k1(logp, ref_logp), beta)


def _kl_reward_cases():
    logp, ref_logp = randn(2, 4, seed=31) * 0.5 - 1.0, randn(2, 4, seed=32) * 0.5 - 1.0
    padded_logp = tensor([[-0.5, -1.0, -2.0, -9.0, -9.0], [-0.7, -9.0, -9.0, -9.0, -9.0],
                          [-1.0, -0.2, -0.4, -0.6, -0.8]])
    padded_ref = tensor([[-0.9, -0.8, -1.0, 3.0, 3.0], [-0.2, 3.0, 3.0, 3.0, 3.0], [-1.1, -0.5, -0.1, -0.9, -0.6]])
    padded_mask = tensor([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1]])
    return [
        Case("full rows, β = 0.1", dict(rewards=tensor([1.0, -0.5]), logp=logp, ref_logp=ref_logp,
                                        mask=torch.ones(2, 4, dtype=DTYPE), beta=0.1)),
        Case("p_θ = p_ref: only R, on the last token", dict(rewards=tensor([2.0, 0.5]), logp=logp,
                                                            ref_logp=logp.clone(), mask=torch.ones(2, 4, dtype=DTYPE),
                                                            beta=0.3)),
        Case("padding (garbage log-probs after the last token), lengths 3, 1 and 5",
             dict(rewards=tensor([1.0, -1.0, 0.25]), logp=padded_logp, ref_logp=padded_ref, mask=padded_mask,
                  beta=0.05)),
        Case("β = 1, one-token responses", dict(rewards=tensor([0.5, 1.5]), logp=tensor([[-0.2], [-3.0]]),
                                                ref_logp=tensor([[-1.2], [-1.0]]),
                                                mask=torch.ones(2, 1, dtype=DTYPE), beta=1.0)),
    ]


def _kl_reward_with(kl=losses.kl_k1, kl_sign=-1.0, where="last", mask_kl=True, kl_at_end=False):
    """The per-token KL reward with one thing made wrong on purpose."""
    def rewards_of(rewards, logp, ref_logp, mask, beta):
        keep = mask.bool()
        penalty = beta * kl(logp, ref_logp)
        if mask_kl:
            penalty = torch.where(keep, penalty, torch.zeros_like(penalty))
        r = kl_sign * penalty
        if kl_at_end:
            r = torch.zeros_like(r)
            rewards = rewards - penalty.sum(-1)
        last = keep.sum(-1) - 1
        column = {"last": last, "first": torch.zeros_like(last), "end": torch.full_like(last, mask.shape[1] - 1)}
        if where == "every":
            return r + rewards[:, None] * mask
        return r + F.one_hot(column[where], mask.shape[1]).to(r.dtype) * rewards[:, None]
    return rewards_of


KL_REWARD = Exercise(
    "kl-reward", "ppo", "kl_penalized_rewards", _kl_reward, _kl_reward_cases,
    (
        Mistake("KL with the wrong sign", _kl_reward_with(kl_sign=1.0),
                "the KL term has the wrong sign: r_t = -β (log p_θ - log p_ref), a PENALTY for drifting from p_ref."),
        Mistake("k3 instead of k1", _kl_reward_with(kl=losses.kl_k3),
                "this is k3: the per-token reward of Ziegler et al. and InstructGPT uses the plain log-ratio, "
                "r_t = -β (log p_θ(y_t) - log p_ref(y_t)), whose sum over the response is the sampled KL."),
        Mistake("R on every token", _kl_reward_with(where="every"),
                "R is added to every token: the reward model scores the whole answer once, so R goes on the last "
                "real token only (the sum over the tokens must be R - β Σ_t kl_t)."),
        Mistake("R on the first token", _kl_reward_with(where="first"),
                "R is on the first token: it belongs on the LAST real token, the one that completes the answer."),
        Mistake("R on the last column", _kl_reward_with(where="end"),
                "R is put in the last column, which is padding for a shorter response: the last real token of row "
                "i is column mask[i].sum() - 1."),
        Mistake("padding not masked", _kl_reward_with(mask_kl=False),
                "the padded positions get a KL penalty too: the reward is 0 after the last real token."),
        Mistake("the whole KL on the last token", _kl_reward_with(kl_at_end=True),
                "the summed KL is folded into R on the last token (that is RLOO's sequence reward): here each token "
                "carries its own penalty, r_t = -β (log p_θ - log p_ref), and R is added on the last one."),
    ),
)

EXERCISES = [PPO_CLIP, GAE, KL_REWARD]
