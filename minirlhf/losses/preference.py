"""Preference losses, in the order of notebooks 05a and 05b: the Bradley-Terry model, DPO and its options (IPO,
label smoothing, the hinge, RPO's NLL term), then the rest of the family: SimPO, ORPO and KTO.

They score whole sequences: each takes (B,) sequence log-probs (sums over the response tokens, as
``masked_sum(logp, mask, dim=-1)`` gives them) or reward-model scores, and returns the loss of each pair (or each
example, for KTO), (B,), unreduced; the trainers take their mean. There is no per-token term to expose: a student's
per-token log-probs enter only through their sum.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from minirlhf.checks import check_choice, check_interval, check_non_negative, check_positive
from minirlhf.losses._contract import _check_finite_result, _check_real_tokens, _check_same_shape

DPO_LOSS_TYPES = ("sigmoid", "ipo", "hinge")
IPO_NORMALISATIONS = ("sum", "mean")


def bradley_terry_per_pair_loss(chosen_scores: Tensor, rejected_scores: Tensor) -> Tensor:
    """The Bradley-Terry loss of each pair, (B,), under P(y_w ≻ y_l) = σ(RM(x, y_w) - RM(x, y_l)):

        ℓ_i = -log σ(RM(x_i, y_w,i) - RM(x_i, y_l,i))

    ``logsigmoid`` stays finite for large negative margins where log(sigmoid(.)) gives -inf.
    ``bradley_terry_loss`` is their mean.
    """
    _check_same_shape(chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    _check_real_tokens(None, chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    return -F.logsigmoid(chosen_scores - rejected_scores)


def bradley_terry_loss(chosen_scores: Tensor, rejected_scores: Tensor) -> Tensor:
    """Reward-model loss under the Bradley-Terry model P(y_w ≻ y_l) = σ(RM(x, y_w) - RM(x, y_l)):

        L = -E[ log σ(RM(x, y_w) - RM(x, y_l)) ]     mean over the B pairs of ``bradley_terry_per_pair_loss``
    """
    loss = bradley_terry_per_pair_loss(chosen_scores, rejected_scores).mean()
    _check_finite_result("bradley_terry_loss", loss, score_difference=chosen_scores - rejected_scores)
    return loss


def dpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    ref_chosen_logps: Tensor,
    ref_rejected_logps: Tensor,
    beta: float,
    loss_type: str = "sigmoid",
    label_smoothing: float = 0.0,
    *,
    chosen_lengths: Tensor | None = None,
    rejected_lengths: Tensor | None = None,
    ipo_normalisation: str = "sum",
    rpo_alpha: float = 0.0,
    all_chosen_lengths: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Direct preference optimisation on (B,) sequence log-probs of chosen y_w and rejected y_l.

        h = [log p_θ(y_w|x) - log p_ref(y_w|x)] - [log p_θ(y_l|x) - log p_ref(y_l|x)]
        "sigmoid": -(1 - ls) log σ(β h) - ls log σ(-β h)    DPO; ls > 0 = conservative DPO
        "ipo":     (h - 1 / (2β))²                          IPO (Azar et al.)
        "hinge":   max(0, 1 - β h)                          SLiC-style hinge

    ``label_smoothing`` (ls) assumes a fraction ls of the labels are flipped; it applies to
    "sigmoid" only. Returns per-pair losses (B,) and the implicit rewards β log(p_θ/p_ref) of the
    chosen and rejected answers, both (B,) and detached (for logging, as TRL does).

    IPO's h, ``ipo_normalisation``: "sum" (default) is the paper's, log-ratios of whole sequences; "mean"
    divides each log-ratio by its token count, h = (1/|y_w|) log p_θ/p_ref (y_w) - (1/|y_l|) log p_θ/p_ref (y_l),
    which is TRL's loss_type="ipo" (its 1/(2β) target then does not grow with the answers' length).

    ``rpo_alpha`` = α > 0 adds the NLL of the chosen answers (RPO, Pang et al. 2024; TRL 1.16 writes it
    loss_type=["sigmoid", "sft"], loss_weights=[1, α]), normalised per token over the batch as TRL does:

        L_i += α · (-log p_θ(y_w,i|x_i)) / mean_j |y_w,j|
        mean_i L_i = mean_i DPO_i + α · (-Σ_i log p_θ(y_w,i|x_i) / Σ_i |y_w,i|)     the NLL per chosen token

    It stops the chosen answers' likelihood from falling while the margin h grows. "mean" and α > 0 need the
    (B,) token counts ``chosen_lengths`` |y_w| (and ``rejected_lengths`` |y_l| for "mean"). When these B pairs are
    one process's share of a batch, ``all_chosen_lengths`` holds |y_w| of the whole batch: the mean over j is taken
    over it, so that the processes' mean losses average to the whole batch's NLL per chosen token.
    """
    _check_same_shape(
        policy_chosen_logps=policy_chosen_logps,
        policy_rejected_logps=policy_rejected_logps,
        ref_chosen_logps=ref_chosen_logps,
        ref_rejected_logps=ref_rejected_logps,
    )
    _check_real_tokens(
        None,
        policy_chosen_logps=policy_chosen_logps,
        policy_rejected_logps=policy_rejected_logps,
        ref_chosen_logps=ref_chosen_logps,
        ref_rejected_logps=ref_rejected_logps,
    )
    check_dpo_options(beta, loss_type, label_smoothing, ipo_normalisation, rpo_alpha)
    chosen_logratio = policy_chosen_logps - ref_chosen_logps  # log p_θ(y_w)/p_ref(y_w)
    rejected_logratio = policy_rejected_logps - ref_rejected_logps  # log p_θ(y_l)/p_ref(y_l)
    _check_token_counts(policy_chosen_logps, chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths)
    if all_chosen_lengths is not None:  # (M,): the whole batch's, whatever this share's B
        _check_real_tokens(None, all_chosen_lengths=all_chosen_lengths.double())
        _check_lengths(all_chosen_lengths=all_chosen_lengths)
    if rpo_alpha > 0:
        _require("rpo_alpha > 0", chosen_lengths=chosen_lengths)
    if ipo_normalisation == "mean":
        _require("ipo_normalisation='mean'", chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths)
        h = chosen_logratio / chosen_lengths - rejected_logratio / rejected_lengths  # per-token log-ratios
    else:
        h = chosen_logratio - rejected_logratio  # (B,)
    if loss_type == "sigmoid":
        losses = -(1 - label_smoothing) * F.logsigmoid(beta * h) - label_smoothing * F.logsigmoid(-beta * h)
    elif loss_type == "ipo":
        losses = (h - 1 / (2 * beta)) ** 2
    else:
        losses = torch.relu(1 - beta * h)
    if rpo_alpha > 0:
        lengths = chosen_lengths if all_chosen_lengths is None else all_chosen_lengths  # |y_w,j| of the mean_j
        losses = losses + rpo_alpha * -policy_chosen_logps / lengths.to(policy_chosen_logps).mean()
    _check_finite_result("dpo_loss", losses, log_ratio_difference=chosen_logratio - rejected_logratio)
    return losses, beta * chosen_logratio.detach(), beta * rejected_logratio.detach()


def check_dpo_options(
    beta: float, loss_type: str, label_smoothing: float, ipo_normalisation: str = "sum", rpo_alpha: float = 0.0
) -> None:
    """β > 0, a known loss type, label smoothing ls in [0, 0.5] for the sigmoid (DPO) loss only, a known IPO
    normalisation ("mean" for loss_type="ipo" only) and an NLL weight α >= 0."""
    check_positive("beta", beta)
    check_choice("loss_type", loss_type, DPO_LOSS_TYPES)
    check_label_smoothing(label_smoothing, loss_type)
    check_choice("ipo_normalisation", ipo_normalisation, IPO_NORMALISATIONS)
    if ipo_normalisation != "sum" and loss_type != "ipo":
        raise ValueError(f"ipo_normalisation only applies to loss_type='ipo', got {loss_type!r}")
    check_non_negative("rpo_alpha", rpo_alpha)


def check_label_smoothing(label_smoothing: float, loss_type: str) -> None:
    """Label smoothing ls in [0, 0.5], and for the sigmoid (DPO) loss alone: the one loss of the family it is
    defined for (every other loss type, in the DPO family or not, takes ls = 0)."""
    check_interval("label_smoothing", label_smoothing, 0.0, 0.5)
    if label_smoothing and loss_type != "sigmoid":
        raise ValueError(f"label_smoothing only applies to loss_type='sigmoid', got {loss_type!r}")


def _check_lengths(**lengths: Tensor) -> None:
    """Every token count |y| must be at least 1: an average over an empty response is 0/0."""
    for name, count in lengths.items():
        if not (count >= 1).all():
            raise ValueError(f"{name} must be >= 1 token for every sequence, got {count.min().item()}")


def _check_token_counts(like: Tensor, **lengths: Tensor | None) -> None:
    """The token counts that were given (None = not given): shaped like ``like`` (B,), finite and >= 1 each."""
    given = {name: count for name, count in lengths.items() if count is not None}
    for name, count in given.items():
        _check_same_shape(policy_chosen_logps=like, **{name: count})
        _check_real_tokens(None, **{name: count.double()})
    _check_lengths(**given)


def _require(option: str, **lengths: Tensor | None) -> None:
    """Raise a ValueError naming the token counts that ``option`` needs and that were not given."""
    for name, count in lengths.items():
        if count is None:
            raise ValueError(f"{option} needs {name}, the (B,) token counts of the answers")


def pair_accuracy(chosen_scores: Tensor, rejected_scores: Tensor) -> float:
    """Fraction of pairs ranked right, score(y_w) > score(y_l), for a reward model or DPO's implicit reward.

    A tie counts 1/2, so an untrained reward model (every score 0) and DPO at step 0 (p_θ = p_ref: every implicit
    reward is 0) both sit at chance, 0.5, like a coin flip. (TRL counts a tie as wrong, so it reports 0 there.)
    """
    _check_same_shape(chosen_scores=chosen_scores, rejected_scores=rejected_scores)
    if chosen_scores.numel() == 0:
        raise ValueError("pair_accuracy of 0 pairs is undefined (a fraction of nothing): score at least one pair")
    right = (chosen_scores > rejected_scores).float()
    ties = (chosen_scores == rejected_scores).float()
    return (right + 0.5 * ties).mean().item()


# ----------------------------------------------------------------------------- the rest of the family (notebook 05b)
#
# SimPO and ORPO need no reference model; KTO needs one but learns from unpaired examples. SimPO and ORPO
# normalise by length: |y| is the number of scored response tokens of y (its EOS included), so
# (1/|y|) log p_θ(y|x) is the average token log-prob. Sequence log-probs are sums, as for `dpo_loss`.


def _check_length_normalised(policy_chosen_logps: Tensor, policy_rejected_logps: Tensor, chosen_lengths: Tensor,
                             rejected_lengths: Tensor) -> None:
    """The (B,) summed log-probs and token counts of a length-normalised loss, named as its arguments: one shape,
    no inf/NaN, and every token count |y| at least 1."""
    logps = {"policy_chosen_logps": policy_chosen_logps, "policy_rejected_logps": policy_rejected_logps}
    lengths = {"chosen_lengths": chosen_lengths, "rejected_lengths": rejected_lengths}
    _check_same_shape(**logps, **lengths)
    _check_real_tokens(None, **logps, **lengths)
    _check_lengths(**lengths)


def simpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    beta: float,
    gamma: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """SimPO (Meng et al., 2024): DPO's Bradley-Terry loss with a reference-free, length-normalised reward.

        r(x, y) = (β / |y|) log p_θ(y|x)                  the average token log-prob, scaled by β
        L = -log σ( r(x, y_w) - r(x, y_l) - γ )           γ ≥ 0: the target reward margin

    Without p_ref nothing ties p_θ to its start but the data. A summed log-prob penalises length (every token adds a
    negative term, so a longer y scores lower at the same per-token likelihood); the average takes length out of the
    reward. Arguments are (B,) summed log-probs and token counts |y_w|, |y_l|. Returns per-pair
    losses (B,) and the rewards r(x, y_w), r(x, y_l), both (B,) and detached. TRL's CPOTrainer with
    loss_type="simpo" and cpo_alpha=0 writes the same loss as -log σ(β (Δ - γ/β)), Δ the difference of averages.
    """
    _check_length_normalised(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths)
    check_positive("beta", beta)
    check_non_negative("gamma", gamma)
    chosen_rewards = beta * policy_chosen_logps / chosen_lengths  # (B,) r(x, y_w)
    rejected_rewards = beta * policy_rejected_logps / rejected_lengths  # (B,) r(x, y_l)
    losses = -F.logsigmoid(chosen_rewards - rejected_rewards - gamma)
    return losses, chosen_rewards.detach(), rejected_rewards.detach()


def _log_odds(avg_logp: Tensor) -> Tensor:
    """log odds = log P - log(1 - P) from log P < 0, with log(1 - P) = log(-expm1(log P)) or log1p(-P),
    whichever keeps its precision (the first for P > 1/2, the second below). The second branch reads log P
    clamped to log 1/2, so that the branch torch.where discards cannot put inf (or NaN) into the gradient."""
    near_one = avg_logp > -math.log(2)
    far_from_one = torch.log1p(-torch.exp(avg_logp.clamp(max=-math.log(2))))
    log_one_minus = torch.where(near_one, torch.log(-torch.expm1(avg_logp)), far_from_one)  # log(1 - P)
    return avg_logp - log_one_minus


def orpo_loss(
    policy_chosen_logps: Tensor,
    policy_rejected_logps: Tensor,
    chosen_lengths: Tensor,
    rejected_lengths: Tensor,
    lam: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """ORPO (Hong et al., 2024): supervised fine-tuning on y_w plus an odds-ratio penalty on y_l, no p_ref.

        P_θ(y|x) = exp( (1/|y|) log p_θ(y|x) )            the per-token geometric-mean likelihood
        odds_θ(y|x) = P_θ(y|x) / (1 - P_θ(y|x))
        L_SFT = -(1/|y_w|) log p_θ(y_w|x)                  the NLL of the chosen answer, per token
        L_OR = -log σ( log odds_θ(y_w|x) - log odds_θ(y_l|x) )
        L = L_SFT + λ · L_OR

    Arguments are (B,) summed log-probs and token counts |y_w|, |y_l|; every average log-prob must be < 0 (a
    completion of probability 1 has infinite odds). Returns per-pair losses (B,) and the log odds of y_w and y_l,
    both (B,) and detached: their difference is the log odds ratio that L_OR pushes up.
    TRL's ORPOTrainer (λ is its `beta`) differs in two places: its L_SFT is the cross-entropy averaged over every
    token of the batch's chosen sequences, prompt tokens included, and it logs λ (1/|y|) log p_θ(y|x) as rewards.
    """
    _check_length_normalised(policy_chosen_logps, policy_rejected_logps, chosen_lengths, rejected_lengths)
    check_non_negative("lam", lam)
    chosen_avg = policy_chosen_logps / chosen_lengths  # (B,) log P_θ(y_w|x)
    rejected_avg = policy_rejected_logps / rejected_lengths  # (B,) log P_θ(y_l|x)
    for name, average in {"policy_chosen_logps": chosen_avg, "policy_rejected_logps": rejected_avg}.items():
        if not (average < 0).all():  # the odds of a completion of probability 1 are infinite
            raise ValueError(f"{name} / its lengths (average log-probs) must be < 0, got {average.max().item()}")
    chosen_log_odds, rejected_log_odds = _log_odds(chosen_avg), _log_odds(rejected_avg)
    sft = -chosen_avg  # L_SFT
    odds_ratio = -F.logsigmoid(chosen_log_odds - rejected_log_odds)  # L_OR
    return sft + lam * odds_ratio, chosen_log_odds.detach(), rejected_log_odds.detach()


def kto_loss(
    policy_logps: Tensor,
    ref_logps: Tensor,
    desirable: Tensor,
    policy_kl_logps: Tensor,
    ref_kl_logps: Tensor,
    beta: float,
    desirable_weight: float = 1.0,
    undesirable_weight: float = 1.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """KTO (Ethayarajh et al., 2024): unpaired examples, each labelled desirable or undesirable, valued like
    prospect theory values a gain or a loss against a reference point z_ref.

        r_θ(x, y) = log p_θ(y|x) - log p_ref(y|x)
        z_ref = max(0, mean_j [ log p_θ(y'_j|x_j) - log p_ref(y'_j|x_j) ])     detached
        v(x, y) = λ_D σ( β (r_θ(x, y) - z_ref) )    y desirable
                  λ_U σ( β (z_ref - r_θ(x, y)) )    y undesirable
        L = λ_y - v(x, y)                           per example; λ_y = λ_D or λ_U

    z_ref estimates KL(p_θ || p_ref) from M mismatched pairs (x_j, y'_j): each y'_j is a completion written for
    another prompt, so it is not the example being scored. No gradient flows through z_ref: it only sets the
    level a desirable answer must beat (and an undesirable one must fall below). λ_D, λ_U rebalance classes of
    unequal size (the paper suggests λ_D n_D / (λ_U n_U) in [1, 4/3], n_D and n_U the example counts).
    Arguments: (B,) sequence log-probs and a (B,) bool `desirable`; (M,) log-probs of the mismatched pairs.
    Returns per-example losses (B,), the implicit rewards β r_θ (B,) and z_ref (a 0-d tensor), all detached but
    the losses. TRL's KTOTrainer computes the same losses (desirable ones first, then the undesirable ones).
    """
    _check_same_shape(policy_logps=policy_logps, ref_logps=ref_logps, desirable=desirable)
    _check_same_shape(policy_kl_logps=policy_kl_logps, ref_kl_logps=ref_kl_logps)
    if desirable.dtype != torch.bool:
        raise ValueError(f"desirable must be a bool tensor, got {desirable.dtype}")
    if policy_kl_logps.dim() != 1 or policy_kl_logps.numel() == 0:
        raise ValueError(f"policy_kl_logps must be (M,) with M >= 1, got shape {tuple(policy_kl_logps.shape)}")
    _check_real_tokens(None, policy_logps=policy_logps, ref_logps=ref_logps, policy_kl_logps=policy_kl_logps,
                       ref_kl_logps=ref_kl_logps)
    check_positive("beta", beta)
    check_positive("desirable_weight", desirable_weight)
    check_positive("undesirable_weight", undesirable_weight)
    logratio = policy_logps - ref_logps  # (B,) r_θ(x, y)
    z_ref = (policy_kl_logps - ref_kl_logps).mean().clamp_min(0).detach()  # () z_ref
    value = torch.where(
        desirable,
        desirable_weight * torch.sigmoid(beta * (logratio - z_ref)),
        undesirable_weight * torch.sigmoid(beta * (z_ref - logratio)),
    )  # (B,) v(x, y)
    weight = torch.where(desirable, desirable_weight, undesirable_weight).to(value)  # (B,) λ_y
    return weight - value, beta * logratio.detach(), z_ref
