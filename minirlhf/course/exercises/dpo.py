"""Exercise of notebook 05: the DPO loss with its implicit rewards."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minirlhf import losses
from minirlhf.course.exercises.engine import Case, Exercise, Mistake, tensor

LOG_SIGMOID_HINT = "log(sigmoid(x)) underflows to -inf for large negative x: use F.logsigmoid(x)."


def _dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    return losses.dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)


def _dpo_cases():
    def pairs(pc, pr, rc, rr, beta):
        return dict(policy_chosen_logps=tensor(pc), policy_rejected_logps=tensor(pr), ref_chosen_logps=tensor(rc),
                    ref_rejected_logps=tensor(rr), beta=beta)
    return [
        Case("the lecture's quiz pair", pairs([0.1], [-2.0], [0.0], [0.0], 0.1)),
        Case("a batch, the reference differs per answer", pairs([-12.0, -30.5, -8.0], [-14.0, -29.0, -8.5],
                                                                [-13.0, -31.0, -7.0], [-13.5, -30.0, -9.0], 0.5)),
        Case("p_θ = p_ref: loss log 2, rewards 0", pairs([-5.0, -9.0], [-6.0, -4.0], [-5.0, -9.0], [-6.0, -4.0], 0.1)),
        Case("β = 2, small margins", pairs([-3.0, -4.2], [-3.5, -4.0], [-3.2, -4.1], [-3.1, -4.4], 2.0)),
        Case("a huge margin the wrong way round", pairs([-900.0], [-10.0], [-10.0], [-10.0], 1.0)),
        Case("the first step: p_θ a hair from p_ref (float32 rounding shows)",
             pairs([-30.5 + 2e-5, -12.3 - 3e-5], [-28.1 - 1e-5, -14.7], [-30.5, -12.3], [-28.1, -14.7 + 2e-5], 0.1)),
    ]


def _dpo_with(ref_sign=-1.0, beta_on=("chosen", "rejected"), beta_outside=False, loss_sign=-1.0, swapped=False,
              mean=False, margin_sign=1.0, beta_power=1.0, link=F.logsigmoid):
    """The DPO loss with one thing made wrong on purpose (the implicit rewards stay right unless swapped)."""
    def dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
        if swapped:
            policy_chosen_logps, policy_rejected_logps = policy_rejected_logps, policy_chosen_logps
            ref_chosen_logps, ref_rejected_logps = ref_rejected_logps, ref_chosen_logps
        chosen = policy_chosen_logps + ref_sign * ref_chosen_logps
        rejected = policy_rejected_logps + ref_sign * ref_rejected_logps
        scale = 1.0 if beta_outside else beta ** beta_power
        margin = (scale if "chosen" in beta_on else 1.0) * chosen - (scale if "rejected" in beta_on else 1.0) * rejected
        loss = loss_sign * link(margin_sign * margin) * (beta if beta_outside else 1.0)
        _, chosen_rewards, rejected_rewards = _dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps,
                                                   ref_rejected_logps, beta)
        return loss.mean() if mean else loss, chosen_rewards, rejected_rewards
    return dpo


def _dpo_no_reference(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    zero = torch.zeros_like(policy_chosen_logps)
    return losses.dpo_loss(policy_chosen_logps, policy_rejected_logps, zero, zero, beta)


def _dpo_no_beta_in_rewards(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    loss, chosen, rejected = _dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                                  beta)
    return loss, chosen / beta, rejected / beta


def _dpo_rewards_of(chosen_of, rejected_of):
    """The right loss, with implicit rewards computed wrong."""
    def dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
        args = (policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)
        return _dpo(*args)[0], chosen_of(*args), rejected_of(*args)
    return dpo


def _dpo_beta_on_policy_only(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    chosen = beta * policy_chosen_logps - ref_chosen_logps
    rejected = beta * policy_rejected_logps - ref_rejected_logps
    rewards = _dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)[1:]
    return (-F.logsigmoid(chosen - rejected), *rewards)


def _dpo_log_of_sigmoid(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta):
    _, chosen, rejected = _dpo(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, beta)
    margin = beta * ((policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps))
    return -torch.log(torch.sigmoid(margin)), chosen, rejected


DPO_LOSS = Exercise(
    "dpo-loss", "dpo", "dpo_pair_loss", _dpo, _dpo_cases,
    (
        Mistake("no reference", _dpo_no_reference,
                "the reference model is missing: the implicit reward is β log p_θ(y|x)/p_ref(y|x), subtract "
                "the reference log-probs."),
        Mistake("reference sign flipped", _dpo_with(ref_sign=1.0),
                "the reference log-probs are added: log p_θ(y|x)/p_ref(y|x) = log p_θ(y|x) - log p_ref(y|x)."),
        Mistake("chosen and rejected swapped", _dpo_with(swapped=True),
                "chosen and rejected are swapped: the loss is -log σ(r_w - r_l), with r_w of the chosen answer."),
        Mistake("β outside the sigmoid", _dpo_with(beta_outside=True),
                "β multiplies the log-sigmoid: it belongs INSIDE, -log σ(β h), where it sets how sharply the loss "
                "turns; outside it only rescales the loss."),
        Mistake("β on the chosen term only", _dpo_with(beta_on=("chosen",)),
                "β scales only the chosen log-ratio: the margin is β (chosen log-ratio - rejected log-ratio), "
                "r_w - r_l with β in both rewards."),
        Mistake("β on the rejected term only", _dpo_with(beta_on=("rejected",)),
                "β scales only the rejected log-ratio: the margin is β (chosen log-ratio - rejected log-ratio), "
                "r_w - r_l with β in both rewards."),
        Mistake("no β in the margin", _dpo_with(beta_on=()),
                "the margin lacks β: -log σ(β h), with h the difference of the two log-ratios."),
        Mistake("loss sign flipped", _dpo_with(loss_sign=1.0),
                "the minus sign is missing: the loss is the NEGATIVE log-likelihood -log σ(r_w - r_l)."),
        Mistake("mean over the pairs", _dpo_with(mean=True),
                "you average over the pairs: return the loss of EACH pair, shape (B,) (the trainer averages)."),
        Mistake("β missing from the rewards", _dpo_no_beta_in_rewards,
                "the loss is right but the implicit rewards lack β: r = β (log p_θ - log p_ref)."),
        Mistake("log of sigmoid", _dpo_log_of_sigmoid, LOG_SIGMOID_HINT),
        Mistake("margin the wrong way round", _dpo_with(margin_sign=-1.0),
                "the margin is rejected minus chosen: the loss is -log σ(r_w - r_l), the CHOSEN reward first."),
        Mistake("β divides", _dpo_with(beta_power=-1.0),
                "the margin is divided by β: multiply, -log σ(β h)."),
        Mistake("no log", _dpo_with(link=torch.sigmoid),
                "the log is missing: -σ(β h) is minus a probability, the loss is its negative LOG, -log σ(β h)."),
        Mistake("β on the policy log-probs only", _dpo_beta_on_policy_only,
                "β multiplies the policy log-probs only: it multiplies the whole log-ratio, "
                "β (log p_θ(y|x) - log p_ref(y|x))."),
        Mistake("rewards swapped", _dpo_rewards_of(lambda *a: _dpo(*a)[2], lambda *a: _dpo(*a)[1]),
                "the loss is right but the two implicit rewards are returned in the wrong order: (loss, r_w, r_l), "
                "the chosen answer's reward first."),
        Mistake("rewards without the reference", _dpo_rewards_of(lambda pc, pr, rc, rr, beta: (beta * pc).detach(),
                                                                 lambda pc, pr, rc, rr, beta: (beta * pr).detach()),
                "the loss is right but the implicit rewards lack the reference: r = β (log p_θ(y|x) - "
                "log p_ref(y|x))."),
    ),
    grad_inputs=("policy_chosen_logps", "policy_rejected_logps"),
)

EXERCISES = [DPO_LOSS]
