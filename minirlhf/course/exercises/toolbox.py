"""Exercises of the 2026 toolbox (notebook 09a): CISPO's capped importance weight, written as f(r, Â)."""

from __future__ import annotations

import torch

from minirlhf import losses
from minirlhf.course.exercises.engine import Case, Exercise, Mistake, randn, tensor

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

EXERCISES = [CISPO]
