"""Exercises of the 2026 toolbox: CISPO's capped importance weight, written as f(r, Â), and the policy-gradient loss of
answers that hold a tool's tokens (notebook 09a); the sampler's importance weight p_θold/μ, masked per answer at a
cap, on PPO's clipped objective (notebook 09b)."""

from __future__ import annotations

import torch

from minirlhf import losses
from minirlhf.course.exercises.engine import Case, Exercise, Mistake, randn, tensor
from minirlhf.sampling import policy_token_mask

TOPIC = "toolbox"
EPS_LOW, EPS_HIGH = 0.2, 0.28  # DAPO's clip-higher edges, the range CISPO's weight is capped to here


def _cispo(logp, old_logp, advantages, eps_low, eps_high):
    return losses.cispo_surrogate(torch.exp(logp - old_logp), logp, advantages, eps_low, eps_high)


def _cispo_cases():
    low, high = EPS_LOW, EPS_HIGH
    ratio = tensor([[0.5, 0.75, 0.9, 1.1, 1.25, 1.5], [0.5, 0.75, 0.9, 1.1, 1.25, 1.5]])
    logp = tensor([[-0.2, -1.0, -2.5, -0.7, -3.0, -1.5], [-1.2, -0.4, -0.9, -2.0, -0.1, -4.0]])
    far = tensor([[4.0, 0.2, 4.0, 0.2]])
    far_logp = tensor([[-0.1, -3.0, -2.0, -0.6]])
    return [
        Case("ε_low = 0.2, ε_high = 0.28: r on both sides of both edges, Â of both signs",
             dict(logp=logp, old_logp=logp - ratio.log(), advantages=tensor([[1.0] * 6, [-0.5] * 6]), eps_low=low,
                  eps_high=high)),
        Case("random log-probs and advantages", dict(logp=-randn(3, 5, seed=41).abs(),
                                                     old_logp=-randn(3, 5, seed=42).abs(),
                                                     advantages=randn(3, 5, seed=43), eps_low=low, eps_high=high)),
        Case("ε_low = 0.3 above ε_high = 0.1: r = 0.75 keeps its weight, r = 1.15 is capped at 1.1",
             dict(logp=tensor([[-0.5, -1.5, -2.0, -0.3]]), old_logp=tensor([[-0.5, -1.5, -2.0, -0.3]])
                  - tensor([[0.75, 1.15, 0.65, 1.05]]).log(), advantages=tensor([[-1.0, 2.0, -1.0, 2.0]]),
                  eps_low=0.3, eps_high=0.1)),
        Case("r far outside the range, Â of either sign: PPO would stop these tokens, CISPO keeps them",
             dict(logp=far_logp, old_logp=far_logp - far.log(), advantages=tensor([[1.5, 1.5, -1.5, -1.5]]),
                  eps_low=low, eps_high=high)),
    ]


def _weight_clipped(low, high):
    def objective(logp, old_logp, advantages, eps_low, eps_high):
        ratio = torch.exp(logp - old_logp)
        return torch.clamp(ratio, low(eps_low, eps_high), high(eps_low, eps_high)).detach() * advantages * logp
    return objective


def _ppo_surrogate(logp, old_logp, advantages, eps_low, eps_high):
    return losses.clipped_surrogate(torch.exp(logp - old_logp), advantages, eps_low, eps_high)


def _weight_uncapped(logp, old_logp, advantages, eps_low, eps_high):
    return torch.exp(logp - old_logp).detach() * advantages * logp


def _weight_capped_above_only(logp, old_logp, advantages, eps_low, eps_high):
    return torch.clamp(torch.exp(logp - old_logp), max=1 + eps_high).detach() * advantages * logp


def _weight_not_detached(logp, old_logp, advantages, eps_low, eps_high):
    return torch.clamp(torch.exp(logp - old_logp), 1 - eps_low, 1 + eps_high) * advantages * logp


def _ratio_for_logp(logp, old_logp, advantages, eps_low, eps_high):
    ratio = torch.exp(logp - old_logp)
    return torch.clamp(ratio, 1 - eps_low, 1 + eps_high).detach() * advantages * ratio


def _probability_for_logp(logp, old_logp, advantages, eps_low, eps_high):
    ratio = torch.exp(logp - old_logp)
    return torch.clamp(ratio, 1 - eps_low, 1 + eps_high).detach() * advantages * logp.exp()


def _ratio_inverted(logp, old_logp, advantages, eps_low, eps_high):
    return torch.clamp(torch.exp(old_logp - logp), 1 - eps_low, 1 + eps_high).detach() * advantages * logp


def _log_ratio_clipped(logp, old_logp, advantages, eps_low, eps_high):
    return torch.exp(torch.clamp(logp - old_logp, -eps_low, eps_high)).detach() * advantages * logp


def _outside_dropped(logp, old_logp, advantages, eps_low, eps_high):
    ratio = torch.exp(logp - old_logp).detach()
    inside = (ratio >= 1 - eps_low) & (ratio <= 1 + eps_high)
    return torch.where(inside, ratio, torch.zeros_like(ratio)) * advantages * logp


def _answer_mean(logp, old_logp, advantages, eps_low, eps_high):
    return _cispo(logp, old_logp, advantages, eps_low, eps_high).mean(-1, keepdim=True).expand_as(logp)


def _negated(logp, old_logp, advantages, eps_low, eps_high):
    return -_cispo(logp, old_logp, advantages, eps_low, eps_high)


def _as_loss(logp, old_logp, advantages, eps_low, eps_high):
    return -_cispo(logp, old_logp, advantages, eps_low, eps_high).mean()


CISPO = Exercise(
    "cispo", TOPIC, "cispo_objective", _cispo, _cispo_cases,
    (
        Mistake("PPO's clipped surrogate", _ppo_surrogate,
                "this is PPO's min(r Â, clip(r) Â), which stops the gradient of a token once r leaves the range. "
                "CISPO keeps every token: sg[clip(r, 1 - ε_low, 1 + ε_high)] · Â · log p_θ, the capped ratio a "
                "constant weight on REINFORCE's Â log p_θ."),
        Mistake("weight not detached", _weight_not_detached,
                "the values are right but the capped ratio carries a gradient: CISPO's weight is a constant, "
                "sg[clip(r)] (.detach()), so the gradient is clip(r) Â ∇log p_θ and nothing flows through r."),
        Mistake("weight not capped", _weight_uncapped,
                "the importance weight is r itself, uncapped: clip it to [1 - ε_low, 1 + ε_high] before it "
                "multiplies Â log p_θ (r = 4 must weigh 1 + ε_high, not 4)."),
        Mistake("weight capped above only", _weight_capped_above_only,
                "only the upper edge caps the weight (TRL's cispo does so): this exercise clips both sides as verl "
                "does, clip(r, 1 - ε_low, 1 + ε_high), so r = 0.5 weighs 1 - ε_low."),
        Mistake("ε_low and ε_high swapped", _weight_clipped(lambda lo, hi: 1 - hi, lambda lo, hi: 1 + lo),
                "ε_high is on the low side and ε_low on the high side: clip(r, 1 - ε_low, 1 + ε_high)."),
        Mistake("clip range without the 1", _weight_clipped(lambda lo, hi: -lo, lambda lo, hi: hi),
                "an edge of your clip range is ε itself: the ratio is 1 when nothing moved, clip it to "
                "[1 - ε_low, 1 + ε_high]."),
        Mistake("log-ratio clipped", _log_ratio_clipped,
                "you clip log r to [-ε_low, ε_high] (GMPO's clip) and then exponentiate: CISPO clips the ratio "
                "itself, clip(r, 1 - ε_low, 1 + ε_high), so r = 1.5 weighs 1 + ε_high = 1.28, not e^0.28."),
        Mistake("tokens outside the range dropped", _outside_dropped,
                "your weight is 0 where r leaves the range: that drops the token, as PPO's clip does. CISPO caps "
                "the weight instead, clip(r, 1 - ε_low, 1 + ε_high), so every token keeps a gradient."),
        Mistake("ε_low on both sides", _weight_clipped(lambda lo, hi: 1 - lo, lambda lo, hi: 1 + lo),
                "the upper edge uses ε_low: the range is asymmetric, clip(r, 1 - ε_low, 1 + ε_high)."),
        Mistake("averaged over the answer", _answer_mean,
                "each token's value is the mean over its row: the objective is elementwise, one value per token "
                "(shaped like logp); the loss averages later."),
        Mistake("ratio upside down", _ratio_inverted,
                "your ratio is p_θold / p_θ: r = exp(logp - old_logp), the new policy over the one that sampled."),
        Mistake("the ratio in place of log p_θ", _ratio_for_logp,
                "the last factor is r: CISPO's objective is the capped weight times Â times log p_θ (its gradient "
                "is the weight times Â ∇log p_θ), not a PPO-style r Â."),
        Mistake("p_θ in place of log p_θ", _probability_for_logp,
                "you multiply by p_θ = exp(logp): the policy-gradient term is Â · log p_θ, whose gradient is "
                "Â ∇log p_θ."),
        Mistake("sign flipped", _negated,
                "the sign is flipped: f(r, Â) is an objective to MAXIMISE; the loss (its negative, aggregated) comes "
                "later."),
        Mistake("the loss returned", _as_loss,
                "you return the loss, minus the mean: this function is the objective itself, elementwise and to "
                "maximise, shaped like logp."),
    ),
    grad_inputs=("logp",),
)



def _sequence_mask(logp, old_logp, behaviour_logp, advantages, mask, eps, cap):
    return -losses.grpo_per_token_loss(logp, old_logp, None, advantages, mask, eps, 0.0, behaviour_logp=behaviour_logp,
                                       behaviour_correction="sequence-mask", behaviour_cap=cap)


def _sequence_mask_cases():
    # three answers of 4 tokens, the last column padding in rows 1-2 (its log-probs garbage, as a batch's may be):
    # row 0 every ρ_t = 1.4 < C but ρ_i = 1.4^4 ≈ 3.84 > C; row 1 one ρ_t = 4 > C but ρ_i = 4·0.5·0.9 = 1.8 ≤ C;
    # row 2 ρ_i ≈ 0.52. r = p_θ/p_θold on both sides of 1 ± ε, so the clip acts too
    behaviour = tensor([[-1.0, -0.5, -2.0, -0.3], [-2.0, -0.4, -1.1, -0.7], [-0.6, -1.5, -0.2, -3.0]])
    rho = tensor([[1.4, 1.4, 1.4, 1.4], [4.0, 0.5, 0.9, 7.0], [0.8, 1.3, 0.5, 9.0]])
    ratio = tensor([[1.3, 0.7, 1.1, 0.95], [0.6, 1.5, 1.05, 2.0], [1.4, 0.9, 0.75, 3.0]])
    mask = tensor([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 0]])
    old = behaviour + rho.log()
    logp = old + ratio.log()
    both_signs = tensor([1.0, -0.5, 2.0])
    return [
        Case("C = 3, ε = 0.2: an answer whose ρ_t are all below C but whose product is above, one with a ρ_t above C "
             "and a product below, padding with large ρ_t; r on both sides of the clip",
             dict(logp=logp, old_logp=old, behaviour_logp=behaviour, advantages=both_signs, mask=mask, eps=0.2,
                  cap=3.0)),
        Case("the same answers at C = 1.5 (the second is dropped too), Â of the other signs, ε = 0.1",
             dict(logp=logp, old_logp=old, behaviour_logp=behaviour, advantages=-both_signs, mask=mask, eps=0.1,
                  cap=1.5)),
        Case("random log-probs of three policies, C = 2", dict(
            logp=-randn(4, 5, seed=51).abs(), old_logp=-randn(4, 5, seed=52).abs(),
            behaviour_logp=-randn(4, 5, seed=53).abs(), advantages=randn(4, seed=54),
            mask=tensor([[1] * 5, [1] * 3 + [0] * 2, [1] * 4 + [0], [1, 0, 0, 0, 0]]), eps=0.2, cap=2.0)),
        Case("μ = p_θold: every ρ is 1, the objective is PPO's clipped one", dict(
            logp=logp, old_logp=behaviour, behaviour_logp=behaviour, advantages=both_signs, mask=mask, eps=0.2,
            cap=3.0)),
    ]


def _clipped(logp, old_logp, advantages, eps):
    ratio = torch.exp(logp - old_logp)
    A = advantages[:, None]
    return torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A)


def _answer_weight(log_rho, mask, cap, bound="mask", sign=1.0):
    keep = mask.bool()
    rho = torch.exp(torch.where(keep, log_rho, torch.zeros_like(log_rho)).sum(-1, keepdim=True)).detach()
    weight = rho.clamp(max=cap) if bound == "truncate" else torch.where(sign * rho > sign * cap, 0.0, rho)
    return torch.where(keep, weight.expand_as(log_rho), 0.0)


def _weighted(weight):
    def objective(logp, old_logp, behaviour_logp, advantages, mask, eps, cap):
        w = weight(logp, old_logp, behaviour_logp, mask, cap)
        return torch.where(mask.bool(), w * _clipped(logp, old_logp, advantages, eps), 0.0)
    return objective


def _per_token(logp, old_logp, behaviour_logp, mask, cap):
    rho = torch.exp(old_logp - behaviour_logp).detach()
    return torch.where(mask.bool() & (rho <= cap), rho, 0.0)


def _not_detached(logp, old_logp, behaviour_logp, mask, cap):
    keep = mask.bool()
    rho = torch.exp(torch.where(keep, old_logp - behaviour_logp, 0.0).sum(-1, keepdim=True))
    return torch.where(keep & (rho <= cap), rho.expand_as(old_logp), 0.0)


def _geometric_mean(logp, old_logp, behaviour_logp, mask, cap):
    keep = mask.bool()
    log_rho = torch.where(keep, old_logp - behaviour_logp, 0.0).sum(-1, keepdim=True) / keep.sum(-1, keepdim=True)
    rho = log_rho.exp().detach()
    return torch.where(keep & (rho <= cap), rho.expand_as(old_logp), 0.0)


def _padding_counted(logp, old_logp, behaviour_logp, mask, cap):
    rho = torch.exp((old_logp - behaviour_logp).sum(-1, keepdim=True)).detach()
    return torch.where(mask.bool() & (rho <= cap), rho.expand_as(old_logp), 0.0)


def _one_for_kept(logp, old_logp, behaviour_logp, mask, cap):
    weight = _answer_weight(old_logp - behaviour_logp, mask, cap)
    return torch.where(weight > 0, 1.0, 0.0).to(weight.dtype)


def _sampler_in_the_clip(logp, old_logp, behaviour_logp, advantages, mask, eps, cap):
    return torch.where(mask.bool(), _clipped(logp, behaviour_logp, advantages, eps), 0.0)


def _weight_inside_the_clip(logp, old_logp, behaviour_logp, advantages, mask, eps, cap):
    weight = _answer_weight(old_logp - behaviour_logp, mask, cap)
    ratio = weight * torch.exp(logp - old_logp)
    A = advantages[:, None]
    return torch.where(mask.bool(), torch.minimum(ratio * A, torch.clamp(ratio, 1 - eps, 1 + eps) * A), 0.0)


def _not_clipped(logp, old_logp, behaviour_logp, advantages, mask, eps, cap):
    weight = _answer_weight(old_logp - behaviour_logp, mask, cap)
    return torch.where(mask.bool(), weight * torch.exp(logp - old_logp) * advantages[:, None], 0.0)


def _uncorrected(logp, old_logp, behaviour_logp, advantages, mask, eps, cap):
    return torch.where(mask.bool(), _clipped(logp, old_logp, advantages, eps), 0.0)


SEQUENCE_MASK = Exercise(
    "sequence-mask", TOPIC, "corrected_objective", _sequence_mask, _sequence_mask_cases,
    (
        Mistake("masked per token", _weighted(_per_token),
                "you mask each token whose ρ_t = p_θold/μ exceeds C (token-mask, MIS per token): the sequence mask "
                "multiplies the answer's ρ_t into one ρ_i = Π_t ρ_t and keeps or drops the whole answer, so four "
                "tokens at ρ_t = 1.4 make ρ_i ≈ 3.8 > 3 and the answer is dropped."),
        Mistake("truncated, not masked",
                _weighted(lambda lp, old, mu, m, c: _answer_weight(old - mu, m, c, "truncate")),
                "you truncate, min(ρ_i, C) (sequence-truncate, TIS): the mask drops an answer above the cap, "
                "w = ρ_i · 1[ρ_i ≤ C], so ρ_i = 3.8 weighs 0, not 3."),
        Mistake("ratio upside down", _weighted(lambda lp, old, mu, m, c: _answer_weight(mu - old, m, c)),
                "your ρ is μ / p_θold: the weight that turns an average under μ into one under p_θold is "
                "ρ = p_θold / μ, exp(old_logp - behaviour_logp)."),
        Mistake("the cap on p_θ / μ", _weighted(lambda lp, old, mu, m, c: _answer_weight(lp - mu, m, c)),
                "your weight is built from p_θ / μ: it mixes the policy being trained into the sampler's weight. ρ "
                "compares the two FIXED policies, p_θold / μ (old_logp - behaviour_logp); p_θ enters only the "
                "clip's r = p_θ / p_θold."),
        Mistake("the cap on the clip's ratio", _weighted(lambda lp, old, mu, m, c: _answer_weight(lp - old, m, c)),
                "your weight is built from the clip's r = p_θ / p_θold: the sampler's weight is ρ = p_θold / μ "
                "(old_logp - behaviour_logp), a constant of the step that logp does not enter."),
        Mistake("the sampler in the clip", _sampler_in_the_clip,
                "your clip sees p_θ / μ, one ratio for both jobs: that treats the sampler as p_θold. Keep the three "
                "apart: the clip sees r = p_θ / p_θold, and the weight ρ_i = Π_t p_θold / μ multiplies the clipped "
                "term."),
        Mistake("no clip", _not_clipped,
                "your weight multiplies r Â alone: PPO's clip is gone. The corrected objective keeps it, "
                "w · min(r Â, clip(r, 1 - ε, 1 + ε) Â), with r = p_θ / p_θold."),
        Mistake("the weight inside the clip", _weight_inside_the_clip,
                "your weight multiplies the ratio inside the min and the clip: ρ is a weight on the token's whole "
                "objective, w · min(r Â, clip(r, 1 - ε, 1 + ε) Â), and the clip sees r = p_θ / p_θold alone."),
        Mistake("no correction", _uncorrected,
                "your objective is PPO's clipped one, with no weight: multiply it by w_i = ρ_i · 1[ρ_i ≤ C], "
                "ρ_i = exp(Σ_t (old_logp - behaviour_logp)) over the answer's real tokens."),
        Mistake("weight not detached", _weighted(_not_detached),
                "the values are right but the weight carries a gradient (into old_logp and behaviour_logp): ρ is "
                "a constant of the step, detach it (.detach())."),
        Mistake("geometric mean in place of the product", _weighted(_geometric_mean),
                "you average the log-ratios over the answer, exp(mean_t log ρ_t), as GSPO's ratio does: the "
                "sequence weight is the product Π_t ρ_t = exp(Σ_t log ρ_t), the likelihood ratio of the whole "
                "answer (TRL's sequence modes)."),
        Mistake("padding in the product", _weighted(_padding_counted),
                "your product runs over padding columns too: zero log ρ_t off the mask before the sum "
                "(torch.where(mask.bool(), old_logp - behaviour_logp, 0))."),
        Mistake("kept above the cap", _weighted(lambda lp, old, mu, m, c: _answer_weight(old - mu, m, c, sign=-1.0)),
                "your mask keeps the answers above C and drops the rest: keep ρ_i ≤ C, w = ρ_i · 1[ρ_i ≤ C]."),
        Mistake("weight 1 for a kept answer", _weighted(_one_for_kept),
                "a kept answer weighs 1 in your version: it weighs ρ_i itself (the mask only drops answers above "
                "C), w = ρ_i · 1[ρ_i ≤ C]."),
    ),
    # p_θold is fixed in the step (sampled without a gradient): a solution may detach it or not; a weight that is
    # not detached still shows, as a gradient into behaviour_logp
    grad_inputs=("logp", "behaviour_logp"),
)



def _tool_use_loss(logp, advantages, lengths, tool_mask):
    return losses.reinforce_loss(logp, advantages, policy_token_mask(lengths, tool_mask), "token-mean")


def _tool_use_cases():
    # the layout of a rollout's response columns: a row's first `lengths` tokens are real (EOS included, the tool's
    # tokens counted), the rest padding; logp is what a full forward gives at every column, so the tool's tokens and
    # the padding hold numbers too (the padding large ones, as garbage may be)
    T = 10
    tools = torch.zeros(3, T, dtype=torch.bool)
    tools[0, 5:7] = True  # "[1+2]" (5 tokens), the calculator's "=3" (2 tokens), EOS: 8 real tokens
    logp = -randn(3, T, seed=61).abs()
    logp[:, 8:] = 50.0
    logp[1, 5:8] = 50.0
    middle = torch.zeros(3, 8, dtype=torch.bool)
    middle[0, 2:5] = middle[1, 6:8] = middle[2, 1:3] = True  # a result mid-answer; one that runs to the cap
    square = torch.zeros(4, 4, dtype=torch.bool)
    square[0, 1] = square[2, 1:3] = True
    return [
        Case("a call, the calculator's 2 tokens and EOS; an answer in the head (5 tokens); a refused call (8), "
             "padding after each", dict(logp=logp, advantages=tensor([1.0, -0.5, -0.5]),
                                         lengths=torch.tensor([8, 5, 8]), tool_mask=tools)),
        Case("the tool's tokens in the middle of an answer; an answer cut off at the cap while the tool spoke; one "
             "cut off after the policy's token", dict(logp=-randn(3, 8, seed=62).abs(), advantages=randn(3, seed=63),
                                                      lengths=torch.tensor([7, 8, 8]), tool_mask=middle)),
        Case("four answers of at most 4 tokens (B = T), random advantages",
             dict(logp=-randn(4, 4, seed=64).abs(), advantages=tensor([0.5, -1.5, 1.0, 2.0]),
                  lengths=torch.tensor([3, 4, 4, 1]), tool_mask=square)),
        Case("no tool: the token-mean REINFORCE loss", dict(logp=-randn(2, 5, seed=65).abs(),
                                                              advantages=tensor([1.0, -1.0]),
                                                              lengths=torch.tensor([5, 2]),
                                                              tool_mask=torch.zeros(2, 5, dtype=torch.bool))),
    ]


def _tool_loss_with(mask_of, count_of=None):
    """-Σ m Â log p / N with the mask `mask_of(real, tool)` and the count N = Σ `count_of(real, tool, mask)`."""
    def loss(logp, advantages, lengths, tool_mask):
        real = torch.arange(logp.shape[-1])[None, :] < lengths[:, None]
        mask = mask_of(real, tool_mask)
        count = mask if count_of is None else count_of(real, tool_mask, mask)
        return -torch.where(mask, advantages[:, None] * logp, 0.0).sum() / count.sum()
    return loss


def _eos_dropped(logp, advantages, lengths, tool_mask):
    real = torch.arange(logp.shape[-1])[None, :] < (lengths - 1)[:, None]
    mask = real & ~tool_mask
    return -torch.where(mask, advantages[:, None] * logp, 0.0).sum() / mask.sum()


def _padding_included(logp, advantages, lengths, tool_mask):
    real = torch.arange(logp.shape[-1])[None, :] <= lengths[:, None]
    mask = real & ~tool_mask
    return -torch.where(mask, advantages[:, None] * logp, 0.0).sum() / mask.sum()


def _shifted(tool, by):
    """The tool's mask moved one column: by = +1 later, -1 earlier (as if logp[:, t] scored token t + 1)."""
    moved = torch.zeros_like(tool)
    if by > 0:
        moved[:, 1:] = tool[:, :-1]
    else:
        moved[:, :-1] = tool[:, 1:]
    return moved


def _tool_loss_aggregated(aggregation):
    def loss(logp, advantages, lengths, tool_mask):
        return losses.reinforce_loss(logp, advantages, policy_token_mask(lengths, tool_mask), aggregation)
    return loss


def _tool_loss_negated(logp, advantages, lengths, tool_mask):
    return -_tool_use_loss(logp, advantages, lengths, tool_mask)


TOOL_USE = Exercise(
    "tool-use-loss", TOPIC, "tool_use_loss", _tool_use_loss, _tool_use_cases,
    (
        Mistake("the tool's tokens in the loss", _tool_loss_with(lambda real, tool: real),
                "your mask keeps the calculator's tokens: they are context the policy reads, not actions it took. "
                "Their log p_θ would train the model to predict the calculator. The policy's tokens are the real "
                "ones less the tool's: (t < length) & ~tool_mask."),
        Mistake("the tool's tokens counted in N", _tool_loss_with(lambda real, tool: real & ~tool,
                                                                  lambda real, tool, mask: real),
                "the sum is right but you divide by every real token, the tool's too (zeroing their log-prob, as "
                "rollout.logprobs does, leaves them in the count): N is the number of the policy's tokens, so an "
                "answer's weight does not depend on how long the calculator's reply was."),
        Mistake("EOS dropped", _eos_dropped,
                "your mask stops one token early: the first `length` tokens are real, EOS included (t < length, "
                "t = 0, 1, ...), and EOS is the policy's action \"stop here\", which gets credit and blame too."),
        Mistake("one padding token too many", _padding_included,
                "your mask takes one column past the answer (t <= length): the first `length` tokens are real, "
                "t < length; the next column is padding, whose log-prob is garbage."),
        Mistake("divided by every position", _tool_loss_with(lambda real, tool: real & ~tool,
                                                             lambda real, tool, mask: torch.ones_like(mask)),
                "you divide by B·T, every column: padding and the tool's tokens count in your mean. Divide the "
                "masked sum by the number of the policy's tokens, mask.sum()."),
        Mistake("the padding kept", _tool_loss_with(lambda real, tool: ~tool),
                "your mask is ~tool_mask alone: it keeps the padding after each answer, whose log-prob is garbage. "
                "The policy's tokens are the real ones less the tool's: (t < length) & ~tool_mask."),
        Mistake("the tool's mask a column early", _tool_loss_with(lambda real, tool: real & ~_shifted(tool, -1)),
                "your tool mask is one column early: it drops the policy's closing \"]\" and keeps the calculator's "
                "last token. logp and tool_mask are aligned already (column t is the answer's token t): use "
                "(t < length) & ~tool_mask as it is, with no shift."),
        Mistake("the tool's mask a column late", _tool_loss_with(lambda real, tool: real & ~_shifted(tool, 1)),
                "your tool mask is one column late: it keeps the calculator's first token and drops the policy's "
                "token after the reply. logp and tool_mask are aligned already (column t is the answer's token t): "
                "use (t < length) & ~tool_mask as it is, with no shift."),
        Mistake("only the tool's tokens", _tool_loss_with(lambda real, tool: real & tool),
                "your mask keeps the calculator's tokens and drops the policy's: the loss sums over the tokens the "
                "policy sampled, (t < length) & ~tool_mask."),
        Mistake("a mean per answer first", _tool_loss_aggregated("seq-mean"),
                "you average each answer over its tokens and then the answers (seq-mean): this exercise asks for "
                "the token mean, every policy token of the batch weighing the same, Σ m Â log p / Σ m."),
        Mistake("summed per answer", _tool_loss_aggregated("seq-sum"),
                "you sum each answer's tokens and average over the answers (seq-sum, REINFORCE's log p_θ(y)): "
                "this exercise asks for the token mean, Σ m Â log p / Σ m over the batch's policy tokens."),
        Mistake("sign flipped", _tool_loss_negated,
                "the sign is flipped: the loss is MINUS the objective, -Σ m Â log p_θ / Σ m, so that gradient "
                "descent raises the log-prob of answers with Â > 0."),
    ),
    grad_inputs=("logp",),
)

EXERCISES = [CISPO, TOOL_USE, SEQUENCE_MASK]
