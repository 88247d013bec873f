"""The DPO family's exercises: the DPO loss with its implicit rewards (notebook 05a), and the rest of the zoo:
SimPO, ORPO, KTO (notebook 08)."""

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



def _lengths(values):
    return torch.tensor(values)  # token counts |y|, int64


# ---------------------------------------------------------------------------------------------------------
# simpo-loss
# ---------------------------------------------------------------------------------------------------------


def _simpo(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths, beta, gamma):
    return losses.simpo_loss(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths, beta,
                             gamma)


def _simpo_cases():
    def pairs(pc, pr, lc, lr, beta, gamma):
        return dict(policy_chosen_logps=tensor(pc), policy_rejected_logps=tensor(pr), chosen_lengths=_lengths(lc),
                    rejected_lengths=_lengths(lr), beta=beta, gamma=gamma)
    return [
        Case("a batch, β = 2, γ = 1", pairs([-12.0, -30.0, -8.0], [-14.0, -27.0, -9.0], [6, 15, 4], [7, 9, 3], 2.0,
                                            1.0)),
        Case("a long chosen answer: more log-prob in total, less per token",
             pairs([-40.0], [-10.0], [40], [5], 2.5, 0.5)),
        Case("γ = 0, equal lengths", pairs([-3.0, -6.0], [-4.0, -5.0], [3, 3], [3, 3], 1.0, 0.0)),
        Case("a huge margin the wrong way round", pairs([-300.0], [-2.0], [3], [4], 10.0, 0.5)),
    ]


def _simpo_with(normalise=True, gamma_sign=-1.0, gamma_times_beta=False, swap_lengths=False, beta_outside=False,
                mean=False, log_of_sigmoid=False):
    """SimPO with one thing made wrong on purpose (the rewards stay right)."""
    def simpo(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths, beta, gamma):
        if swap_lengths:
            chosen_lengths, rejected_lengths = rejected_lengths, chosen_lengths
        chosen = policy_chosen_logps / (chosen_lengths if normalise else 1)
        rejected = policy_rejected_logps / (rejected_lengths if normalise else 1)
        scale = 1.0 if beta_outside else beta
        margin = scale * (chosen - rejected) + gamma_sign * gamma * (beta if gamma_times_beta else 1.0)
        loss = -(torch.log(torch.sigmoid(margin)) if log_of_sigmoid else F.logsigmoid(margin))
        loss = loss * (beta if beta_outside else 1.0)
        _, chosen_rewards, rejected_rewards = _simpo(policy_chosen_logps, policy_rejected_logps, chosen_lengths,
                                                     rejected_lengths, beta, gamma)
        return loss.mean() if mean else loss, chosen_rewards, rejected_rewards
    return simpo


def _simpo_rewards_without_beta(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths, beta,
                                gamma):
    loss, chosen, rejected = _simpo(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths,
                                    beta, gamma)
    return loss, chosen / beta, rejected / beta


SIMPO_LOSS = Exercise(
    "simpo-loss", "dpo", "simpo_pair_loss", _simpo, _simpo_cases,
    (
        Mistake("summed log-probs", _simpo_with(normalise=False),
                "the reward uses the summed log-prob: SimPO AVERAGES it over the answer's tokens, "
                "r = (β/|y|) log p_θ(y|x), so that a long answer cannot win by length alone."),
        Mistake("γ added", _simpo_with(gamma_sign=1.0),
                "γ is added: it is a target MARGIN the chosen reward must beat, -log σ(r_w - r_l - γ)."),
        Mistake("γ scaled by β", _simpo_with(gamma_times_beta=True),
                "γ is multiplied by β: the margin is subtracted from the rewards as it is, -log σ(r_w - r_l - γ) "
                "(TRL writes β (Δ - γ/β), the same thing)."),
        Mistake("lengths swapped", _simpo_with(swap_lengths=True),
                "each answer is divided by the other one's length: r_w = β log p_θ(y_w|x) / |y_w|."),
        Mistake("β outside the sigmoid", _simpo_with(beta_outside=True),
                "β multiplies the log-sigmoid: it belongs INSIDE, in the rewards r = (β/|y|) log p_θ(y|x)."),
        Mistake("mean over the pairs", _simpo_with(mean=True),
                "you average over the pairs: return the loss of EACH pair, shape (B,) (the trainer averages)."),
        Mistake("β missing from the rewards", _simpo_rewards_without_beta,
                "the loss is right but the returned rewards lack β: r = (β/|y|) log p_θ(y|x)."),
        Mistake("log of sigmoid", _simpo_with(log_of_sigmoid=True), LOG_SIGMOID_HINT),
    ),
    grad_inputs=("policy_chosen_logps", "policy_rejected_logps"),
)


# ---------------------------------------------------------------------------------------------------------
# orpo-loss
# ---------------------------------------------------------------------------------------------------------


def _orpo(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths, lam):
    return losses.orpo_loss(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths, lam)


def _orpo_cases():
    def pairs(pc, pr, lc, lr, lam):
        return dict(policy_chosen_logps=tensor(pc), policy_rejected_logps=tensor(pr), chosen_lengths=_lengths(lc),
                    rejected_lengths=_lengths(lr), lam=lam)
    return [
        Case("a batch, λ = 0.1", pairs([-12.0, -30.0, -8.0], [-14.0, -27.0, -9.0], [6, 15, 4], [7, 9, 3], 0.1)),
        Case("likely answers (P near 1: log(1 - P) matters), λ = 1", pairs([-0.3, -1.0], [-0.9, -0.4], [3, 5], [2, 4],
                                                                          1.0)),
        Case("λ = 0: the SFT term alone", pairs([-6.0], [-2.0], [4], [2], 0.0)),
        Case("unlikely answers, λ = 0.5", pairs([-40.0, -25.0], [-60.0, -20.0], [8, 5], [10, 4], 0.5)),
    ]


def _log_odds_naive(avg_logp):
    return avg_logp - torch.log1p(-torch.exp(avg_logp))


def _orpo_with(odds=_log_odds_naive, normalise_odds=True, sft="chosen-avg", lam_on="odds", odds_sign=1.0):
    """ORPO with one thing made wrong on purpose (the returned log odds stay right)."""
    def orpo(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths, lam):
        chosen_avg, rejected_avg = policy_chosen_logps / chosen_lengths, policy_rejected_logps / rejected_lengths
        w, l = (chosen_avg, rejected_avg) if normalise_odds else (policy_chosen_logps, policy_rejected_logps)
        odds_ratio = -F.logsigmoid(odds_sign * (odds(w) - odds(l)))
        nll = {"chosen-avg": -chosen_avg, "chosen-sum": -policy_chosen_logps, "rejected-avg": -rejected_avg,
               "none": torch.zeros_like(chosen_avg)}[sft]
        loss = nll + lam * odds_ratio if lam_on == "odds" else lam * nll + odds_ratio
        _, chosen_log_odds, rejected_log_odds = _orpo(policy_chosen_logps, policy_rejected_logps, chosen_lengths,
                                                      rejected_lengths, lam)
        return loss, chosen_log_odds, rejected_log_odds
    return orpo


ORPO_LOSS = Exercise(
    "orpo-loss", "dpo", "orpo_pair_loss", _orpo, _orpo_cases,
    (
        Mistake("probabilities instead of odds", _orpo_with(odds=lambda avg: avg),
                "you compare log-probabilities: ORPO compares log ODDS, log P - log(1 - P), with "
                "P = exp((1/|y|) log p_θ(y|x))."),
        Mistake("odds of the summed log-prob", _orpo_with(normalise_odds=False),
                "the odds use the summed log-prob: P_θ(y|x) is the per-token average, exp((1/|y|) log p_θ(y|x))."),
        Mistake("no SFT term", _orpo_with(sft="none"),
                "the SFT term is missing: L = -(1/|y_w|) log p_θ(y_w|x) + λ L_OR; ORPO needs no separate SFT stage "
                "because it keeps this term."),
        Mistake("SFT on the summed log-prob", _orpo_with(sft="chosen-sum"),
                "the SFT term is the summed NLL: ORPO averages it over the chosen answer's tokens, "
                "-(1/|y_w|) log p_θ(y_w|x)."),
        Mistake("SFT on the rejected answer", _orpo_with(sft="rejected-avg"),
                "the SFT term is on the rejected answer: the model imitates the CHOSEN one, -(1/|y_w|) "
                "log p_θ(y_w|x)."),
        Mistake("λ on the SFT term", _orpo_with(lam_on="sft"),
                "λ weighs the SFT term: it weighs the odds-ratio penalty, L = L_SFT + λ L_OR."),
        Mistake("odds ratio the wrong way round", _orpo_with(odds_sign=-1.0),
                "the odds ratio is upside down: L_OR = -log σ(log odds(y_w) - log odds(y_l)) pushes the CHOSEN "
                "answer's odds up."),
    ),
    grad_inputs=("policy_chosen_logps", "policy_rejected_logps"),
)


# ---------------------------------------------------------------------------------------------------------
# kto-loss
# ---------------------------------------------------------------------------------------------------------


def _kto(policy_logps, ref_logps, desirable, policy_kl_logps, ref_kl_logps, beta, desirable_weight,
         undesirable_weight):
    return losses.kto_loss(policy_logps, ref_logps, desirable, policy_kl_logps, ref_kl_logps, beta,
                           desirable_weight, undesirable_weight)


def _kto_cases():
    def examples(p, r, d, pk, rk, beta, dw=1.0, uw=1.0):
        return dict(policy_logps=tensor(p), ref_logps=tensor(r), desirable=torch.tensor(d), policy_kl_logps=tensor(pk),
                    ref_kl_logps=tensor(rk), beta=beta, desirable_weight=dw, undesirable_weight=uw)
    return [
        Case("mixed labels, z_ref > 0, β = 0.1", examples([-10.0, -12.0, -7.0, -20.0], [-13.0, -11.0, -9.0, -18.0],
                                                          [True, False, True, False], [-15.0, -8.0, -22.0],
                                                          [-18.0, -9.0, -21.0], 0.1)),
        Case("p_θ drifted below p_ref on the mismatched pairs: z_ref = 0",
             examples([-5.0, -6.0, -9.0], [-7.0, -4.0, -8.0], [False, True, True], [-30.0, -12.0], [-20.0, -11.0],
                      0.5)),
        Case("λ_D = 1.33, λ_U = 1, β = 1", examples([-3.0, -4.0, -2.5], [-3.5, -3.0, -3.0], [True, False, False],
                                                    [-6.0, -7.0], [-6.5, -8.0], 1.0, 1.33, 1.0)),
        Case("λ_D = 1, λ_U = 2, β = 0.3", examples([-8.0, -9.0], [-6.0, -11.0], [False, True], [-5.0, -4.0, -6.0],
                                                   [-6.0, -4.5, -5.0], 0.3, 1.0, 2.0)),
    ]


def _kto_with(z="mismatched", clamp=True, undesirable_sign=-1.0, weights_swapped=False, keep_constant=True,
              use_ref=True):
    """KTO with one thing made wrong on purpose (the returned rewards and z_ref stay right)."""
    def kto(policy_logps, ref_logps, desirable, policy_kl_logps, ref_kl_logps, beta, desirable_weight,
            undesirable_weight):
        logratio = policy_logps - (ref_logps if use_ref else 0.0)
        z_ref = {"mismatched": (policy_kl_logps - ref_kl_logps).mean(), "batch": (policy_logps - ref_logps).mean(),
                 "none": torch.zeros_like(logratio[0])}[z]
        z_ref = (z_ref.clamp_min(0) if clamp else z_ref).detach()
        lam_d, lam_u = (undesirable_weight, desirable_weight) if weights_swapped else (desirable_weight,
                                                                                        undesirable_weight)
        value = torch.where(desirable, lam_d * torch.sigmoid(beta * (logratio - z_ref)),
                            lam_u * torch.sigmoid(undesirable_sign * beta * (logratio - z_ref)))
        weight = torch.where(desirable, lam_d, lam_u).to(value) if keep_constant else torch.zeros_like(value)
        _, rewards, right_z_ref = _kto(policy_logps, ref_logps, desirable, policy_kl_logps, ref_kl_logps, beta,
                                       desirable_weight, undesirable_weight)
        return weight - value, rewards, right_z_ref
    return kto


def _kto_rewards_without_beta(policy_logps, ref_logps, desirable, policy_kl_logps, ref_kl_logps, beta,
                              desirable_weight, undesirable_weight):
    loss, rewards, z_ref = _kto(policy_logps, ref_logps, desirable, policy_kl_logps, ref_kl_logps, beta,
                                desirable_weight, undesirable_weight)
    return loss, rewards / beta, z_ref


KTO_LOSS = Exercise(
    "kto-loss", "dpo", "kto_example_loss", _kto, _kto_cases,
    (
        Mistake("z_ref not clamped", _kto_with(clamp=False),
                "z_ref can go negative here: it estimates a KL divergence, which is never negative, so "
                "z_ref = max(0, mean_j [log p_θ(y'_j|x_j) - log p_ref(y'_j|x_j)])."),
        Mistake("no reference point", _kto_with(z="none"),
                "z_ref is missing: a desirable answer must beat the reference point, σ(β (r_θ - z_ref)), with z_ref "
                "from the mismatched pairs."),
        Mistake("z_ref from the scored examples", _kto_with(z="batch"),
                "z_ref is taken from the examples being scored: it comes from the MISMATCHED pairs (x_j, y'_j), "
                "policy_kl_logps - ref_kl_logps, so it estimates the KL and not the examples' own rewards."),
        Mistake("undesirable with the desirable sign", _kto_with(undesirable_sign=1.0),
                "an undesirable answer is valued like a desirable one: its value is λ_U σ(β (z_ref - r_θ)), so that "
                "pushing its log-ratio DOWN lowers the loss."),
        Mistake("weights swapped", _kto_with(weights_swapped=True),
                "λ_D and λ_U are swapped: desirable examples are weighted by λ_D (desirable_weight)."),
        Mistake("loss is -v", _kto_with(keep_constant=False),
                "the loss is -v: KTO's loss is λ_y - v(x, y), so it is 0 at best and λ_y at worst (same gradient, "
                "other values)."),
        Mistake("no reference in r_θ", _kto_with(use_ref=False),
                "r_θ lacks the reference: r_θ(x, y) = log p_θ(y|x) - log p_ref(y|x)."),
        Mistake("β missing from the rewards", _kto_rewards_without_beta,
                "the loss is right but the returned rewards lack β: they are β (log p_θ(y|x) - log p_ref(y|x))."),
    ),
    # z_ref is a reference point: no gradient reaches the mismatched pairs' log-probs through it
    grad_inputs=("policy_logps", "policy_kl_logps"),
)

EXERCISES = [DPO_LOSS, SIMPO_LOSS, ORPO_LOSS, KTO_LOSS]
