"""Exercise of notebook 05b: the Bradley–Terry reward-model loss."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from minirlhf import losses
from minirlhf.course.exercises.dpo import LOG_SIGMOID_HINT
from minirlhf.course.exercises.engine import Case, Exercise, Mistake, randn, tensor


def _bt_cases():
    return [
        Case("four pairs", dict(chosen_scores=tensor([1.0, 0.2, -0.5, 2.0]),
                                rejected_scores=tensor([0.0, 0.4, -1.5, 2.0]))),
        Case("one pair", dict(chosen_scores=tensor([0.3]), rejected_scores=tensor([-0.3]))),
        Case("random scores", dict(chosen_scores=randn(6, seed=11), rejected_scores=randn(6, seed=12))),
        Case("a margin of -800: the model is sure and wrong", dict(chosen_scores=tensor([-400.0, 1.0]),
                                                                   rejected_scores=tensor([400.0, 0.0]))),
        Case("large scores a hair apart (float32 rounding shows)", dict(chosen_scores=tensor([500.0003, -250.0]),
                                                                        rejected_scores=tensor([500.0, -250.0002]))),
    ]


def _bt_swapped(chosen_scores, rejected_scores):
    return losses.bradley_terry_loss(rejected_scores, chosen_scores)


def _bt_summed(chosen_scores, rejected_scores):
    return losses.bradley_terry_loss(chosen_scores, rejected_scores) * chosen_scores.numel()


def _bt_log_of_sigmoid(chosen_scores, rejected_scores):
    return -torch.log(torch.sigmoid(chosen_scores - rejected_scores)).mean()


def _bt_no_minus(chosen_scores, rejected_scores):
    return F.logsigmoid(chosen_scores - rejected_scores).mean()


def _bt_no_log(chosen_scores, rejected_scores):
    return -torch.sigmoid(chosen_scores - rejected_scores).mean()


def _bt_rejected_detached(chosen_scores, rejected_scores):
    return losses.bradley_terry_loss(chosen_scores, rejected_scores.detach())


def _bt_chosen_detached(chosen_scores, rejected_scores):
    return losses.bradley_terry_loss(chosen_scores.detach(), rejected_scores)


def _bt_probability_bce(chosen_scores, rejected_scores):
    return F.binary_cross_entropy(torch.sigmoid(chosen_scores - rejected_scores), torch.ones_like(chosen_scores))


def _bt_scored_apart(chosen_scores, rejected_scores):
    return (-F.logsigmoid(chosen_scores) - F.logsigmoid(-rejected_scores)).mean()


def _bt_hinge(chosen_scores, rejected_scores):
    return torch.relu(1 - (chosen_scores - rejected_scores)).mean()


def _bt_means_first(chosen_scores, rejected_scores):
    return -F.logsigmoid(chosen_scores.mean() - rejected_scores.mean())


DETACHED_HINT = ("the values are right but no gradient reaches the {} scores: both scores come from the reward "
                 "model, and the loss must push the chosen one up AND the rejected one down. Do not detach either.")

BRADLEY_TERRY = Exercise(
    "bradley-terry", "dpo", "reward_model_loss", losses.bradley_terry_loss, _bt_cases,
    (
        Mistake("chosen and rejected swapped", _bt_swapped,
                "chosen and rejected are swapped: P(y_w ≻ y_l) = σ(RM(y_w) - RM(y_l))."),
        Mistake("sum instead of mean", _bt_summed, "you sum over the pairs: the loss is the MEAN over pairs."),
        Mistake("log of sigmoid", _bt_log_of_sigmoid, LOG_SIGMOID_HINT),
        Mistake("no minus", _bt_no_minus,
                "the minus sign is missing: the loss is the NEGATIVE log-likelihood -log σ(...)."),
        Mistake("no log", _bt_no_log,
                "the log is missing: -σ(margin) is the probability, the loss is its negative LOG, -log σ(margin)."),
        Mistake("rejected scores detached", _bt_rejected_detached, DETACHED_HINT.format("rejected")),
        Mistake("chosen scores detached", _bt_chosen_detached, DETACHED_HINT.format("chosen")),
        Mistake("BCE on probabilities", _bt_probability_bce,
                "F.binary_cross_entropy(σ(margin), 1) clamps the log at -100 (and σ rounds to 0 or 1): give the "
                "margin itself to F.binary_cross_entropy_with_logits, or use -F.logsigmoid(margin)."),
        Mistake("each score on its own", _bt_scored_apart,
                "you score each answer on its own, -log σ(RM(y_w)) - log σ(-RM(y_l)): Bradley–Terry compares "
                "them, -log σ(RM(y_w) - RM(y_l)); only the difference matters."),
        Mistake("hinge loss", _bt_hinge,
                "this is a hinge (margin-ranking) loss: Bradley–Terry is -log σ(RM(y_w) - RM(y_l))."),
        Mistake("scores averaged first", _bt_means_first,
                "you average the scores, then take -log σ of the difference of the means: take -log σ of EACH "
                "pair's difference, then average the pairs."),
    ),
    grad_inputs=("chosen_scores", "rejected_scores"),
)

EXERCISES = [BRADLEY_TERRY]
