"""Exercises of GRPO since R1: DAPO's clip-higher surrogate and dynamic-sampling filter (notebook 07a), GSPO's
sequence-level ratio (notebook 07b)."""

from __future__ import annotations

import inspect
import math

import torch

from minirlhf import losses
from minirlhf.course.exercises.engine import DTYPE, Case, Exercise, Mistake, randn, tensor

TOPIC = "grpo-since-r1"
DAPO_EPS_LOW, DAPO_EPS_HIGH = 0.2, 0.28  # DAPO's clip-higher (Yu et al., 2025)
GSPO_EPS_LOW, GSPO_EPS_HIGH = 3e-4, 4e-4  # GSPO's clip range of s_i (Zheng et al., 2025)

# ---------------------------------------------------------------------------------------------------------
# clip-higher
# ---------------------------------------------------------------------------------------------------------


def _clip_higher(ratio, advantages, eps_low, eps_high):
    return losses.clipped_surrogate(ratio, advantages, eps_low, eps_high)


def _clip_higher_cases():
    low, high = DAPO_EPS_LOW, DAPO_EPS_HIGH
    # with ε_low = 0.2, ε_high = 0.28: 1.25 is clipped by a symmetric 0.2 clip only, 0.75 by the low edge 0.8 only
    ratio = tensor([[0.5, 0.75, 0.9, 1.1, 1.25, 1.5], [0.5, 0.75, 0.9, 1.1, 1.25, 1.5]])
    advantages = tensor([[1.0, 1.0, 1.0, 1.0, 1.0, 1.0], [-0.5, -0.5, -0.5, -0.5, -0.5, -0.5]])
    edges = tensor([[1 - low, 1 + high, 1 - low, 1 + high]])
    return [
        Case("DAPO's ε_low = 0.2, ε_high = 0.28: r on both sides of both edges, Â of both signs",
             dict(ratio=ratio, advantages=advantages, eps_low=low, eps_high=high)),
        Case("random ratios and advantages", dict(ratio=torch.exp(0.4 * randn(3, 5, seed=31)),
                                                  advantages=randn(3, 5, seed=32), eps_low=low, eps_high=high)),
        Case("ε_low = 0.3 above ε_high = 0.1: r = 0.75 (Â < 0) stays, r = 1.15 (Â > 0) is clipped",
             dict(ratio=tensor([[0.75, 1.15, 0.65, 1.05]]), advantages=tensor([[-1.0, 2.0, -1.0, 2.0]]), eps_low=0.3,
                  eps_high=0.1)),
        Case("r far outside, Â of the sign the clip does not touch (unclipped, full gradient)",
             dict(ratio=tensor([[4.0, 0.2]]), advantages=tensor([[-1.5, 1.5]]), eps_low=low, eps_high=high)),
        Case("r exactly on an edge", dict(ratio=edges, advantages=tensor([[-1.0, 1.0, 1.0, -1.0]]), eps_low=low,
                                          eps_high=high), check_grad=False),
        Case("ε_low = ε_high = 0.2: PPO's symmetric clip", dict(ratio=ratio, advantages=-2 * advantages, eps_low=0.2,
                                                                eps_high=0.2)),
    ]


def _surrogate_clipped_at(low, high):
    """min(r Â, clip(r, low(ε_low, ε_high), high(ε_low, ε_high)) Â): the clip range written wrong."""
    def surrogate(ratio, advantages, eps_low, eps_high):
        clipped = torch.clamp(ratio, low(eps_low, eps_high), high(eps_low, eps_high))
        return torch.minimum(ratio * advantages, clipped * advantages)
    return surrogate


def _surrogate_clamp_only(ratio, advantages, eps_low, eps_high):
    return torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages


def _surrogate_dual_clip(ratio, advantages, eps_low, eps_high):
    surrogate = losses.clipped_surrogate(ratio, advantages, eps_low, eps_high)
    return torch.where(advantages < 0, torch.maximum(surrogate, 3.0 * advantages), surrogate)


def _surrogate_of_exp_ratio(ratio, advantages, eps_low, eps_high):
    return losses.clipped_surrogate(torch.exp(ratio), advantages, eps_low, eps_high)


def _surrogate_product_clipped(ratio, advantages, eps_low, eps_high):
    return torch.minimum(ratio * advantages, torch.clamp(ratio * advantages, 1 - eps_low, 1 + eps_high))


def _surrogate_no_clip(ratio, advantages, eps_low, eps_high):
    return ratio * advantages


def _surrogate_max(ratio, advantages, eps_low, eps_high):
    return torch.maximum(ratio * advantages, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * advantages)


def _surrogate_detached(ratio, advantages, eps_low, eps_high):
    return losses.clipped_surrogate(ratio.detach(), advantages, eps_low, eps_high)


def _surrogate_negated(ratio, advantages, eps_low, eps_high):
    return -losses.clipped_surrogate(ratio, advantages, eps_low, eps_high)


def _surrogate_averaged(ratio, advantages, eps_low, eps_high):
    return losses.clipped_surrogate(ratio, advantages, eps_low, eps_high).mean()


def _surrogate_min_of_ratios(ratio, advantages, eps_low, eps_high):
    return torch.minimum(ratio, torch.clamp(ratio, 1 - eps_low, 1 + eps_high)) * advantages


def _surrogate_as_loss(ratio, advantages, eps_low, eps_high):
    return -losses.clipped_surrogate(ratio, advantages, eps_low, eps_high).mean()


def _surrogate_advantage_clipped(ratio, advantages, eps_low, eps_high):
    return torch.minimum(ratio * advantages, ratio * torch.clamp(advantages, 1 - eps_low, 1 + eps_high))


def _surrogate_upper_only(ratio, advantages, eps_low, eps_high):
    return torch.minimum(ratio * advantages, torch.clamp(ratio, max=1 + eps_high) * advantages)


def _surrogate_lower_only(ratio, advantages, eps_low, eps_high):
    return torch.minimum(ratio * advantages, torch.clamp(ratio, min=1 - eps_low) * advantages)


CLIP_HIGHER = Exercise(
    "clip-higher", TOPIC, "clip_higher_surrogate", _clip_higher, _clip_higher_cases,
    (
        Mistake("symmetric clip at ε_low", _surrogate_clipped_at(lambda lo, hi: 1 - lo, lambda lo, hi: 1 + lo),
                "both edges use ε_low, PPO's symmetric clip: the upper edge is 1 + ε_HIGH, so a token with Â > 0 "
                "may grow its probability further (r = 1.25 is not clipped at ε_high = 0.28)."),
        Mistake("symmetric clip at ε_high", _surrogate_clipped_at(lambda lo, hi: 1 - hi, lambda lo, hi: 1 + hi),
                "both edges use ε_high: the LOWER edge stays at 1 - ε_low (DAPO raises only the upper one), so "
                "r = 0.75 with Â < 0 is clipped at 0.8."),
        Mistake("ε_low and ε_high swapped", _surrogate_clipped_at(lambda lo, hi: 1 - hi, lambda lo, hi: 1 + lo),
                "ε_high is on the low side and ε_low on the high side: clip(r, 1 - ε_low, 1 + ε_high)."),
        Mistake("clip range without the 1", _surrogate_clipped_at(lambda lo, hi: -lo, lambda lo, hi: hi),
                "an edge of your clip range is ε itself ([-ε_low, ε_high], [ε_low, ε_high], or the 1 + left out "
                "of the upper edge): the ratio is 1 when nothing moved, clip it to [1 - ε_low, 1 + ε_high]."),
        Mistake("DAPO's 0.2 and 0.28 written in", _surrogate_clipped_at(lambda lo, hi: 1 - DAPO_EPS_LOW,
                                                                        lambda lo, hi: 1 + DAPO_EPS_HIGH),
                f"your clip range is DAPO's [{1 - DAPO_EPS_LOW:g}, {1 + DAPO_EPS_HIGH:g}] whatever the arguments say: "
                f"use eps_low and eps_high, clip(r, 1 - eps_low, 1 + eps_high)."),
        Mistake("the product r Â clipped", _surrogate_product_clipped,
                "you clip the product r Â to [1 - ε_low, 1 + ε_high]: it is the RATIO that is clipped, then "
                "multiplied by Â, min(r Â, clip(r, 1 - ε_low, 1 + ε_high) Â)."),
        Mistake("ratio exponentiated", _surrogate_of_exp_ratio,
                "you take exp of the first argument: it is already the ratio r = p_θ/p_θold (1 when nothing moved), "
                "not a log-ratio."),
        Mistake("dual clip's floor added", _surrogate_dual_clip,
                "you add dual-clip PPO's floor max(·, 3 Â) for Â < 0: clip-higher has no such floor, min(r Â, "
                "clip(r, 1 - ε_low, 1 + ε_high) Â) keeps the full penalty r Â however far r moves the wrong way."),
        Mistake("log-ratio clipped", _surrogate_clipped_at(lambda lo, hi: math.exp(-lo), lambda lo, hi: math.exp(hi)),
                "you clip log r at [-ε_low, ε_high], which clips r at [exp(-ε_low), exp(ε_high)], not at "
                "[1 - ε_low, 1 + ε_high]: clip the ratio itself."),
        Mistake("min of the ratios, then times Â", _surrogate_min_of_ratios,
                "min(r, clip(r)) · Â takes the bound before the sign of Â is known: for Â < 0 it picks the wrong "
                "side. Take the min of the two PRODUCTS, min(r Â, clip(r) Â)."),
        Mistake("clamp without the min", _surrogate_clamp_only,
                "you return only the clipped term clip(r) Â: the min with the unclipped r Â is what keeps the full "
                "penalty when the ratio moves the wrong way (r = 4 with Â < 0 must count as 4 Â, not 1.28 Â)."),
        Mistake("min without the clamp", _surrogate_no_clip,
                "the ratio is never clipped (min(r Â, r Â) = r Â): min(r Â, clip(r, 1 - ε_low, 1 + ε_high) Â)."),
        Mistake("max instead of min", _surrogate_max,
                "you take the max of the two terms: take the MIN, the pessimistic bound, so that moving the ratio "
                "beyond the clip range never pays."),
        Mistake("clip on the upper side only", _surrogate_upper_only,
                "only 1 + ε_high is clipped: with Â < 0 the ratio is clipped at 1 - ε_low as well."),
        Mistake("clip on the lower side only", _surrogate_lower_only,
                "only 1 - ε_low is clipped: with Â > 0 the ratio is clipped at 1 + ε_high as well."),
        Mistake("advantage clipped", _surrogate_advantage_clipped,
                "you clip the advantage: it is the RATIO that is clipped, min(r Â, clip(r, 1 - ε_low, 1 + ε_high) Â)."),
        Mistake("sign flipped", _surrogate_negated,
                "the sign is flipped: the surrogate is an objective to MAXIMISE; the loss (its negative, averaged) "
                "comes later."),
        Mistake("averaged to a scalar", _surrogate_averaged,
                "you average the tokens: the surrogate is elementwise, one value per token, shaped like ratio; the "
                "aggregation (token mean, seq-mean, ...) comes later."),
        Mistake("the loss returned", _surrogate_as_loss,
                "you return the loss, minus the mean: this function is the surrogate itself, elementwise and to "
                "maximise, shaped like ratio (the trainer negates and aggregates it)."),
        Mistake("detached ratio", _surrogate_detached,
                "the values are right but no gradient reaches ratio: it is detached (or rebuilt from numbers with "
                "torch.tensor). Keep torch ops on ratio itself."),
    ),
    grad_inputs=("ratio",),
)


# ---------------------------------------------------------------------------------------------------------
# dynamic-sampling
# ---------------------------------------------------------------------------------------------------------

# A group whose std is below this counts as constant: the library's own default, read from informative_groups.
CONSTANT_GROUP_STD = inspect.signature(losses.informative_groups).parameters["eps"].default
NOISE = 1.5 * CONSTANT_GROUP_STD  # one reward of a G = 4 group off by this: std = NOISE/2 below ε, range above
# one reward off by this: sample std = SPREAD/2 above ε, population std = SPREAD·√3/4 below it
SPREAD = 2.15 * CONSTANT_GROUP_STD
# one reward off by this: sample and population std above ε, mean absolute deviation (0.375 of it) below
MAD_SPREAD = 2.5 * CONSTANT_GROUP_STD


def _dynamic_sampling_cases():
    eps = CONSTANT_GROUP_STD
    return [
        Case("3 prompts × G = 4, 0/1 rewards: all right, 1 of 4 right, all wrong",
             dict(rewards=tensor([1, 1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0]), group_size=4, eps=eps)),
        Case("G = 2, rewards beyond 0/1: constant groups at 0.5 and 1, spread groups with mean 1, 0.55 and 0",
             dict(rewards=tensor([0.5, 0.5, 2.0, 0.0, 1.0, 1.0, 0.3, 0.8, -0.5, 0.5]), group_size=2, eps=eps)),
        Case("groups are consecutive: read every B/G-th reward and the answer flips",
             dict(rewards=tensor([1, 1, 1, 1, 0, 1, 0, 1]), group_size=4, eps=eps)),
        Case(f"float noise: 0 < std < ε = {eps:g} counts as constant, std just above ε does not",
             dict(rewards=tensor([0.5, 0.5 + NOISE, 0.5, 0.5, 1.0, 1.0, 1.0 + SPREAD, 1.0, 0.0, 0.0, 0.0, 0.0,
                                  2.0, 2.0, 2.0, 2.0 + MAD_SPREAD]), group_size=4, eps=eps)),
        Case(f"G = 2: one group of std {3 / 2**0.5:.2g}·ε among 7 equal ones, the batch's std below ε",
             dict(rewards=tensor([1.0] * 10 + [1.0 + 3 * eps] + [1.0] * 5), group_size=2, eps=eps)),
        Case("every group constant", dict(rewards=tensor([1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.7, 0.7, 0.7]),
                                          group_size=3, eps=eps)),
        Case("ε = 0.1: spreads of std 0.06 and 0.025 are not enough, std 0.2 (variance 0.04) and 0.5 are",
             dict(rewards=tensor([0.0, 0.12, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.05, 0.0, 0.0, 0.0, 0.0, 0.4, 0.0]),
                  group_size=4, eps=0.1)),
        Case("random rewards, G = 8", dict(rewards=randn(24, seed=33), group_size=8, eps=eps)),
        # 1 (or 3) right of 4 has sample std exactly 0.5 in floating point: ε = 0.5 sits on the boundary, no rounding
        Case("ε = 0.5, 0/1 rewards: 1 or 3 right of 4 have std exactly 0.5 = ε and are kept (std ≥ ε), 4 of 4 is not",
             dict(rewards=tensor([0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1]), group_size=4, eps=0.5)),
    ]


def _keep_where(statistic):
    """statistic(R) >= eps, R = rewards.view(-1, G): the group's spread measured wrong."""
    def keep(rewards, group_size, eps):
        return statistic(rewards.view(-1, group_size)) >= eps
    return keep


def _keep_strictly_above(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1) > eps


def _keep_at_library_threshold(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1) >= CONSTANT_GROUP_STD


def _keep_g_groups(rewards, group_size, eps):
    return rewards.view(group_size, -1).std(1) >= eps


def _keep_some_right(rewards, group_size, eps):
    return rewards.view(-1, group_size).mean(1) > 0


def _keep_some_wrong(rewards, group_size, eps):
    return rewards.view(-1, group_size).mean(1) < 1


def _keep_nonzero_std(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1) > 0


def _keep_success_rate(rewards, group_size, eps):
    success = rewards.view(-1, group_size).mean(1)
    return (success > 0) & (success < 1)


def _keep_correct_count(rewards, group_size, eps):
    correct = (rewards.view(-1, group_size) == 1).sum(1)
    return (correct > 0) & (correct < group_size)


def _keep_all(rewards, group_size, eps):
    return torch.ones(rewards.numel() // group_size, dtype=torch.bool)


def _mean_absolute_deviation(R):
    return (R - R.mean(1, keepdim=True)).abs().mean(1)


def _keep_interleaved(rewards, group_size, eps):
    return rewards.view(group_size, -1).T.std(1) >= eps


def _keep_indices(rewards, group_size, eps):
    return torch.nonzero(losses.informative_groups(rewards, group_size, eps)).reshape(-1)


def _keep_constant(rewards, group_size, eps):
    return ~losses.informative_groups(rewards, group_size, eps)


def _keep_per_answer(rewards, group_size, eps):
    return losses.informative_groups(rewards, group_size, eps).repeat_interleave(group_size)


def _keep_batch_std(rewards, group_size, eps):
    return (rewards.std() >= eps).expand(rewards.numel() // group_size)


DYNAMIC_SAMPLING = Exercise(
    "dynamic-sampling", TOPIC, "informative_group_mask", losses.informative_groups, _dynamic_sampling_cases,
    (
        Mistake("constant only when std is exactly 0", _keep_nonzero_std,
                f"only std == 0 (or a tiny fixed threshold) counts as constant: float noise (rewards 0.5 and "
                f"0.5 + {NOISE:g}) has a tiny std and no signal. Keep a group when its std is at least eps, "
                f"std >= eps."),
        Mistake("std > eps: a group at exactly eps dropped", _keep_strictly_above,
                "a group whose std equals eps is kept: the test is std >= eps, the same boundary as grpo_advantages, "
                "which zeroes only a std BELOW eps (with 0/1 rewards, 1 right of 4 has std exactly 0.5)."),
        Mistake("eps not used: a fixed threshold", _keep_at_library_threshold,
                f"your threshold does not follow the eps argument (a hard-coded {CONSTANT_GROUP_STD:g}, or "
                f"grpo_advantages called without eps=eps): compare each group's std with eps."),
        Mistake("G groups of B/G rewards", _keep_g_groups,
                "you cut the batch into G groups of B/G rewards (rewards.chunk(G) or rewards.view(G, -1)): a group "
                "is the G answers of ONE prompt, so there are B/G groups of G, rewards.view(-1, G) or "
                "rewards.split(G)."),
        Mistake("only the all-wrong groups dropped", _keep_some_right,
                "you drop a group only when every answer is wrong: a group where every answer is RIGHT has no "
                "signal either (all Â = 0). Keep a group when its rewards differ, std >= eps."),
        Mistake("only the all-right groups dropped", _keep_some_wrong,
                "you drop a group only when every answer is right: a group where every answer is WRONG has no "
                "signal either (all Â = 0). Keep a group when its rewards differ, std >= eps."),
        Mistake("population std", _keep_where(lambda R: R.std(1, correction=0)),
                "you measure the population std (divide by G): the filter uses the sample std (divide by G - 1, "
                "torch.std's default), the same rule as grpo_advantages."),
        Mistake("success rate strictly between 0 and 1", _keep_success_rate,
                "0 < mean < 1 is DAPO's test for 0/1 rewards only: rewards (0.5, 0.5) have mean 0.5 and no signal, "
                "(2, 0) have mean 1 and a signal. Test the spread: std >= eps."),
        Mistake("correct answers counted", _keep_correct_count,
                "0 < #(rewards equal to 1) < G is DAPO's rule for 0/1 rewards only: rewards (0.3, 0.8) hold no 1 and "
                "a signal. Test the spread of any reward: std >= eps."),
        Mistake("groups read interleaved", _keep_interleaved,
                "your groups are interleaved (every B/G-th reward): a group is G CONSECUTIVE rewards, "
                "rewards.view(-1, G) (one row per prompt), not rewards.view(G, -1)."),
        Mistake("range as the constant test", _keep_where(lambda R: R.amax(1) - R.amin(1)),
                f"a group counts as constant when its STD is below eps, not its range (max - min): rewards 0.5, "
                f"0.5 + {NOISE:g}, 0.5, 0.5 have a range above {CONSTANT_GROUP_STD:g} and a std below it."),
        Mistake("mean absolute deviation instead of std", _keep_where(_mean_absolute_deviation),
                "you measure the spread as the mean |R - mean|: the test is on the sample std, std >= eps "
                "(R.std(1)), the same rule as grpo_advantages."),
        Mistake("variance instead of std", _keep_where(lambda R: R.var(1)),
                "you compare the variance with eps: compare the standard deviation, its square root (R.std(1))."),
        Mistake("std over the wrong dimension", _keep_where(lambda R: R.std(0)),
                "the std is taken over dim 0, across prompts: with R = rewards.view(-1, G) a group is a ROW, take "
                "the std over dim 1."),
        Mistake("constant groups kept, informative ones dropped", _keep_constant,
                "the mask is inverted: True marks a group to KEEP, one whose rewards differ (std >= eps)."),
        Mistake("every group kept", _keep_all,
                "every group is kept: a group whose rewards are all equal (std < eps) has Â = 0 for every answer and "
                "is the one to drop."),
        Mistake("indices instead of a mask", _keep_indices,
                "you return the indices of the kept groups: return one bool per group, True = keep "
                "(rewards.view(-1, G)[mask] then selects them)."),
        Mistake("one flag per answer", _keep_per_answer,
                "you return one flag per answer (B,): return one per GROUP, shape (B/G,)."),
        Mistake("the whole batch's std", _keep_batch_std,
                "you test the std of the whole batch: each group is tested on its own G rewards."),
    ),
)


# ---------------------------------------------------------------------------------------------------------
# gspo-ratio
# ---------------------------------------------------------------------------------------------------------


def _gspo_cases():
    logp, old_logp = randn(3, 5, seed=34) * 0.3 - 1.5, randn(3, 5, seed=35) * 0.3 - 1.5
    # padding holds garbage in both log-probs (far from the real tokens); lengths 3, 1 and 4
    padded_logp = tensor([[-1.0, -0.4, -2.0, -9.0], [-0.2, -9.0, -9.0, -9.0], [-1.5, -1.1, -0.7, -0.3]])
    padded_old = tensor([[-1.3, -0.1, -2.5, -7.0], [-0.9, -7.0, -7.0, -7.0], [-1.4, -1.2, -0.9, -0.2]])
    padded_mask = tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    long_old = torch.full((2, 12), -2.0, dtype=DTYPE)
    return [
        Case("random tokens, no padding", dict(logp=logp, old_logp=old_logp, mask=torch.ones(3, 5, dtype=DTYPE))),
        Case("padding with garbage, lengths 3, 1 (one token) and 4",
             dict(logp=padded_logp, old_logp=padded_old, mask=padded_mask)),
        Case("12 tokens, each token ratio e^0.1 (and e^-0.05): the product runs away, the geometric mean does not",
             dict(logp=long_old + tensor([[0.1], [-0.05]]), old_logp=long_old, mask=torch.ones(2, 12, dtype=DTYPE))),
        Case("token log-ratios -1, 0.5, 1.2: the arithmetic mean of the ratios is not their geometric mean",
             dict(logp=tensor([[-2.0, -0.5, -0.3], [-1.0, -1.0, -1.0]]), old_logp=tensor([[-1.0, -1.0, -1.5],
                                                                                         [-1.0, -1.0, -1.0]]),
                  mask=tensor([[1, 1, 1], [1, 1, 1]]))),
        # no gradient check: what reaches an empty row through 0/0 (NaN or 0) depends on how padding is zeroed
        Case("an answer masked out entirely (truncated, no real token): s = 1",
             dict(logp=tensor([[-0.5, -1.0, -2.0], [-3.0, -4.0, -5.0]]), old_logp=tensor([[-0.7, -1.4, -1.0],
                                                                                          [-1.0, -1.0, -1.0]]),
                  mask=tensor([[1, 1, 0], [0, 0, 0]])), check_grad=False),
    ]


def _ratio_from(log_ratio_of):
    """exp of log_ratio_of(logp - old_logp with padding zeroed, mask): the sequence's log-ratio reduced wrong."""
    def ratio(logp, old_logp, mask):
        keep = mask.bool()
        log_ratio = torch.where(keep, logp - old_logp, torch.zeros_like(logp))
        return torch.exp(log_ratio_of(log_ratio, keep))
    return ratio


def _gspo_arithmetic_mean(logp, old_logp, mask):
    keep = mask.bool()
    token_ratios = torch.where(keep, torch.exp(logp - old_logp), torch.zeros_like(logp))
    return token_ratios.sum(-1) / keep.sum(-1).clamp_min(1) + (keep.sum(-1) == 0).to(logp.dtype)


def _gspo_sum_of_ratios(logp, old_logp, mask):
    keep = mask.bool()
    return torch.where(keep, torch.exp(logp - old_logp), torch.zeros_like(logp)).sum(-1)


def _gspo_no_exp(logp, old_logp, mask):
    return torch.log(losses.sequence_ratio(logp, old_logp, mask))


def _gspo_unmasked(logp, old_logp, mask):
    return torch.exp((logp - old_logp).mean(-1))


def _gspo_upside_down(logp, old_logp, mask):
    return losses.sequence_ratio(old_logp, logp, mask)


def _gspo_detached(logp, old_logp, mask):
    return losses.sequence_ratio(logp.detach(), old_logp, mask)


def _gspo_token_ratios(logp, old_logp, mask):
    return torch.where(mask.bool(), torch.exp(logp - old_logp), torch.ones_like(logp))


def _gspo_batch_ratio(logp, old_logp, mask):
    return torch.exp(losses.masked_mean(logp - old_logp, mask))


def _gspo_mask_only_in_count(logp, old_logp, mask):
    return torch.exp((logp - old_logp).sum(-1) / mask.sum(-1).clamp_min(1))


def _gspo_over_batch_tokens(logp, old_logp, mask):
    keep = mask.bool()
    log_ratio = torch.where(keep, logp - old_logp, torch.zeros_like(logp))
    return torch.exp(log_ratio.sum(-1) / keep.sum())


def _gspo_count_plus_one(logp, old_logp, mask):
    keep = mask.bool()
    log_ratio = torch.where(keep, logp - old_logp, torch.zeros_like(logp))
    return torch.exp(log_ratio.sum(-1) / (keep.sum(-1) + 1))


def _gspo_clipped(logp, old_logp, mask):
    return torch.clamp(losses.sequence_ratio(logp, old_logp, mask), 1 - GSPO_EPS_LOW, 1 + GSPO_EPS_HIGH)


def _gspo_empty_row_zero(logp, old_logp, mask):
    return torch.where(mask.bool().any(-1), losses.sequence_ratio(logp, old_logp, mask), torch.zeros(()))


def _gspo_logps_divided(logp, old_logp, mask):
    return losses.masked_mean(logp / old_logp, mask, dim=-1) + (mask.sum(-1) == 0).to(logp.dtype)


def _gspo_empty_row_nan(logp, old_logp, mask):
    keep = mask.bool()
    log_ratio = torch.where(keep, logp - old_logp, torch.zeros_like(logp))
    return torch.exp(log_ratio.sum(-1) / keep.sum(-1))


GSPO_RATIO = Exercise(
    "gspo-ratio", TOPIC, "gspo_sequence_ratio", losses.sequence_ratio, _gspo_cases,
    (
        Mistake("product of the token ratios", _ratio_from(lambda x, keep: x.sum(-1)),
                "you multiply the token ratios (exp of the SUM of log-ratios), p_θ(y|x)/p_θold(y|x) itself: it "
                "runs away on long answers. GSPO takes its 1/|y_i| power, exp of the MEAN log-ratio over the real "
                "tokens."),
        Mistake("mean over the padded length T", _ratio_from(lambda x, keep: x.sum(-1) / keep.shape[-1]),
                "you divide by the padded length T (mask.shape[1]): divide each row by its own number of real "
                "tokens |y_i| = mask.sum(-1)."),
        Mistake("divided by the batch's token count", _gspo_over_batch_tokens,
                "you divide each row's sum by the number of real tokens in the whole BATCH (mask.sum()): divide by "
                "the row's own count, mask.sum(-1)."),
        Mistake("arithmetic mean of the token ratios", _gspo_arithmetic_mean,
                "you average the token ratios r_t: GSPO's s_i is their GEOMETRIC mean, exp(mean_t log r_t), which "
                "is smaller whenever the ratios differ."),
        Mistake("sum of the token ratios", _gspo_sum_of_ratios,
                "you add the token ratios: s_i = exp((1/|y_i|) Σ_t log r_t), the geometric mean of the ratios."),
        Mistake("log-ratio without exp", _gspo_no_exp,
                "you return the mean LOG-ratio: s_i is a ratio, exp of it (1 when nothing moved, not 0)."),
        Mistake("no masking", _gspo_unmasked,
                "padding is counted: average the log-ratios over the real tokens of each row only (mask = 1)."),
        Mistake("padding summed, real tokens counted", _gspo_mask_only_in_count,
                "you divide by the number of real tokens but sum over every position, padding included: mask the "
                "log-ratios too (torch.where(mask.bool(), logp - old_logp, 0)) before summing."),
        Mistake("ratio upside down", _gspo_upside_down,
                "the ratio is upside down: log r_t = logp - old_logp (p_θ over p_θold)."),
        Mistake("per-token ratios", _gspo_token_ratios,
                "you return the token ratios r_t, shape (B, T): GSPO's ratio is ONE number per sequence, shape (B,), "
                "the geometric mean of its tokens' ratios."),
        Mistake("one ratio for the whole batch", _gspo_batch_ratio,
                "you average over every real token of the batch: average within each row (dim=-1), one s_i per "
                "sequence."),
        Mistake("|y_i| + 1 in the denominator", _gspo_count_plus_one,
                "you divide by the number of real tokens plus one (to avoid 0/0?): divide by |y_i| = mask.sum(-1) "
                "itself, and guard the empty row with .clamp_min(1), which changes nothing else."),
        Mistake("s_i clipped", _gspo_clipped,
                f"you clip s_i (to GSPO's [1 - {GSPO_EPS_LOW:g}, 1 + {GSPO_EPS_HIGH:g}]?): this function returns the "
                f"ratio itself; the clip comes later, in the surrogate min(s_i Â_i, clip(s_i) Â_i)."),
        Mistake("log-probs divided", _gspo_logps_divided,
                "you divide log-probs (logp / old_logp): a ratio of probabilities is a DIFFERENCE of log-probs, "
                "r_t = exp(logp - old_logp), and s_i = exp(mean_t (logp - old_logp))."),
        Mistake("0 for an answer without tokens", _gspo_empty_row_zero,
                "a row with no real token gets s_i = 1, not 0: its mean log-ratio counts as 0 and exp(0) = 1 (its "
                "loss is zero anyway, as its mask is all 0)."),
        Mistake("0/0 for an answer without tokens", _gspo_empty_row_nan,
                "a row with no real token (a truncated answer masked out) gives 0/0 = NaN: divide by "
                "mask.sum(-1).clamp_min(1), so that its s_i = exp(0) = 1."),
        Mistake("detached", _gspo_detached,
                "the values are right but no gradient reaches logp: compute s_i with torch ops on logp itself (no "
                ".detach(), .item() or torch.tensor(...) of it)."),
    ),
    grad_inputs=("logp",),
)

EXERCISES = [CLIP_HIGHER, DYNAMIC_SAMPLING, GSPO_RATIO]
