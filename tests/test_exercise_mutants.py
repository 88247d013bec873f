"""The checkers name the kind of each mistake: every single-edit wrong version of a worked solution (mutants.py) that
changes the behaviour is refused with a hint naming its kind, and so are wrong versions written by hand, independently
of the solutions' source, for the exercises of the zoo (SimPO, ORPO, KTO), GRPO's loss and the loss of answers with
a tool's tokens."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from minirlhf.course import exercises
from minirlhf.course.exercises import engine, mutants

# ---------------------------------------------------------------------------------------------------------
# The mutants of every worked solution
# ---------------------------------------------------------------------------------------------------------


def test_every_kind_of_mistake_is_generated():
    kinds = {m.kind for e in exercises.EXERCISES_LIST for m in engine.mutants_of(e)}
    assert kinds == set(mutants.KINDS)


def test_the_mutants_are_single_edits_of_the_solution_each_with_its_kind():
    found = {(m.kind, m.edit) for m in engine.mutants_of(exercises.EXERCISES["grpo-advantages"])}
    assert (mutants.BIASED_STD, "R.std(1, keepdim=True) -> R.std(1, keepdim=True, correction=0)") in found
    assert (mutants.AXIS, "R.mean(1, keepdim=True) -> R.mean(0, keepdim=True)") in found
    assert (mutants.SIGN, "R - R.mean(1, keepdim=True) -> R.mean(1, keepdim=True) - R") in found


@pytest.mark.parametrize("exercise_id", exercises.list_exercises())


def test_every_mutant_that_changes_behaviour_is_refused_with_its_kind_named(exercise_id):
    scores = engine.score_mutants(exercises.EXERCISES[exercise_id])
    assert any(not s.equivalent for s in scores)
    unnamed = [f"({s.mutant.kind}) {s.mutant.edit}" for s in scores if not s.equivalent and not s.named]
    assert not unnamed, unnamed


# ---------------------------------------------------------------------------------------------------------
# Wrong versions written by hand
# ---------------------------------------------------------------------------------------------------------


# SimPO: each name says the mistake

def simpo_sign(pc, pr, lc, lr, beta, gamma):
    rw, rl = beta * pc / lc, beta * pr / lr
    return F.logsigmoid(rw - rl - gamma), rw.detach(), rl.detach()  # the minus dropped


def simpo_margin_sign(pc, pr, lc, lr, beta, gamma):
    rw, rl = beta * pc / lc, beta * pr / lr
    return -F.logsigmoid(rw - rl + gamma), rw.detach(), rl.detach()  # + γ


def simpo_detach_extra(pc, pr, lc, lr, beta, gamma):
    rw, rl = beta * pc / lc, beta * pr.detach() / lr
    return -F.logsigmoid(rw - rl - gamma), rw.detach(), rl.detach()


def simpo_lengths_inplace(pc, pr, lc, lr, beta, gamma):
    lc.add_(1)
    rw, rl = beta * pc / (lc - 1), beta * pr / lr
    return -F.logsigmoid(rw - rl - gamma), rw.detach(), rl.detach()


# ORPO: each name says the mistake

def _lo(avg):
    return avg - torch.log(1 - torch.exp(avg))  # log odds


def orpo_sign(pc, pr, lc, lr, lam):
    a, b = pc / lc, pr / lr
    return -a + lam * -F.logsigmoid(_lo(b) - _lo(a)), _lo(a).detach(), _lo(b).detach()


def orpo_sft_sign(pc, pr, lc, lr, lam):
    a, b = pc / lc, pr / lr
    return a + lam * -F.logsigmoid(_lo(a) - _lo(b)), _lo(a).detach(), _lo(b).detach()


def orpo_detach_extra(pc, pr, lc, lr, lam):
    a, b = pc / lc, pr / lr
    return -a + lam * -F.logsigmoid(_lo(a) - _lo(b).detach()), _lo(a).detach(), _lo(b).detach()


# KTO: each name says the mistake

def kto_sign(pl, rl, d, pkl, rkl, beta, dw, uw):
    lr = pl - rl
    z = (pkl - rkl).mean().clamp(min=0).detach()
    v = torch.where(d, dw * torch.sigmoid(beta * (lr - z)), uw * torch.sigmoid(beta * (lr - z)))
    lam = torch.where(d, torch.full_like(v, dw), torch.full_like(v, uw))
    return lam - v, beta * lr.detach(), z


def kto_no_detach(pl, rl, d, pkl, rkl, beta, dw, uw):
    lr = pl - rl
    z = torch.clamp((pkl - rkl).mean(), min=0)
    v = torch.where(d, dw * torch.sigmoid(beta * (lr - z)), uw * torch.sigmoid(beta * (z - lr)))
    lam = torch.where(d, torch.full_like(v, dw), torch.full_like(v, uw))
    return lam - v, beta * lr.detach(), z.detach()


def kto_min_max(pl, rl, d, pkl, rkl, beta, dw, uw):
    lr = pl - rl
    z = torch.clamp((pkl - rkl).mean(), max=0).detach()
    v = torch.where(d, dw * torch.sigmoid(beta * (lr - z)), uw * torch.sigmoid(beta * (z - lr)))
    lam = torch.where(d, torch.full_like(v, dw), torch.full_like(v, uw))
    return lam - v, beta * lr.detach(), z


def kto_detach_extra(pl, rl, d, pkl, rkl, beta, dw, uw):
    lr = (pl - rl).detach()
    z = torch.clamp((pkl - rkl).mean(), min=0).detach()
    v = torch.where(d, dw * torch.sigmoid(beta * (lr - z)), uw * torch.sigmoid(beta * (z - lr)))
    lam = torch.where(d, torch.full_like(v, dw), torch.full_like(v, uw))
    return lam - v, beta * lr, z


def kto_in_place(pl, rl, d, pkl, rkl, beta, dw, uw):
    pkl = pkl.detach()
    pkl.sub_(rkl)
    z = pkl.mean().clamp(min=0)
    lr = pl - rl
    v = torch.where(d, dw * torch.sigmoid(beta * (lr - z)), uw * torch.sigmoid(beta * (z - lr)))
    lam = torch.where(d, torch.full_like(v, dw), torch.full_like(v, uw))
    return lam - v, beta * lr.detach(), z


# GRPO's loss: each name says the mistake

def _grpo(logp, old, ref, adv, mask, eps, beta, *, sign=1, mx=False, clip="ratio", masked=True, pad_mean=False,
          detach_logp=False, kl_sign=1, axis=None):
    lp = logp.detach() if detach_logp else logp
    r = torch.exp(lp - old)
    A = adv.unsqueeze(-1)
    if clip == "ratio":
        c = torch.clamp(r, 1 - eps, 1 + eps) * A
    elif clip == "adv":
        c = r * torch.clamp(A, 1 - eps, 1 + eps)
    else:
        c = torch.clamp(r * A, 1 - eps, 1 + eps)
    s = (torch.max if mx else torch.min)(r * A, c)
    d = ref - lp
    kl = torch.exp(d) - d - 1
    J = sign * s - kl_sign * beta * kl
    if not masked:
        return -J.mean()
    J = J * mask
    if pad_mean:
        return -J.sum() / mask.numel()
    if axis is not None:
        return -(J.sum(axis) / mask.sum(axis)).mean()
    return -J.sum() / mask.sum()


def grpo_sign(*a): return _grpo(*a, sign=-1)


def grpo_kl_sign(*a): return _grpo(*a, kl_sign=-1)


def grpo_max(*a): return _grpo(*a, mx=True)


def grpo_clip_adv(*a): return _grpo(*a, clip="adv")


def grpo_clip_prod(*a): return _grpo(*a, clip="prod")


def grpo_unmasked(*a): return _grpo(*a, masked=False)


def grpo_pad_mean(*a): return _grpo(*a, pad_mean=True)


def grpo_detached(*a): return _grpo(*a, detach_logp=True)


def grpo_axis(*a): return _grpo(*a, axis=-1)


def grpo_in_place(logp, old, ref, adv, mask, eps, beta):
    old.sub_(0.5)
    return _grpo(logp, old + 0.5, ref, adv, mask, eps, beta)


def grpo_total_sign(*a): return -_grpo(*a)


# The policy-gradient loss of answers with a tool's tokens (notebook 09a)


def _policy_tokens(logp, lengths, tool_mask):
    return (torch.arange(logp.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)) & ~tool_mask


def tool_loss_over_positions(logp, advantages, lengths, tool_mask):
    mine = _policy_tokens(logp, lengths, tool_mask)
    return -torch.where(mine, logp * advantages.unsqueeze(1), torch.zeros_like(logp)).mean()


def tool_loss_padding_kept(logp, advantages, lengths, tool_mask):
    mine = _policy_tokens(logp, lengths, tool_mask)
    return -(logp * advantages.unsqueeze(1)).sum() / mine.sum()


def tool_loss_sign(logp, advantages, lengths, tool_mask):
    mine = _policy_tokens(logp, lengths, tool_mask)
    return torch.where(mine, logp * advantages.unsqueeze(1), torch.zeros_like(logp)).sum() / mine.sum()


def tool_loss_in_place(logp, advantages, lengths, tool_mask):
    tool_mask.logical_not_()  # "the policy's tokens", computed by flipping the caller's mask
    mine = (torch.arange(logp.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)) & tool_mask
    return -torch.where(mine, logp * advantages.unsqueeze(1), torch.zeros_like(logp)).sum() / mine.sum()


INDEPENDENT = [
    ("simpo-loss", "sign flipped", simpo_sign),
    ("simpo-loss", "sign flipped", simpo_margin_sign),
    ("simpo-loss", "detach extra", simpo_detach_extra),
    ("simpo-loss", "in-place change of an input", simpo_lengths_inplace),
    ("orpo-loss", "sign flipped", orpo_sign),
    ("orpo-loss", "sign flipped", orpo_sft_sign),
    ("orpo-loss", "detach extra", orpo_detach_extra),
    ("kto-loss", "sign flipped", kto_sign),
    ("kto-loss", "detach missing", kto_no_detach),
    ("kto-loss", "min and max swapped", kto_min_max),
    ("kto-loss", "detach extra", kto_detach_extra),
    ("kto-loss", "in-place change of an input", kto_in_place),
    ("grpo-loss", "sign flipped", grpo_sign),
    ("grpo-loss", "sign flipped", grpo_kl_sign),
    ("grpo-loss", "sign flipped", grpo_total_sign),
    ("grpo-loss", "min and max swapped", grpo_max),
    ("grpo-loss", "the clip on the wrong quantity", grpo_clip_adv),
    ("grpo-loss", "the clip on the wrong quantity", grpo_clip_prod),
    ("grpo-loss", "mask dropped", grpo_unmasked),
    ("grpo-loss", "mean over padding", grpo_pad_mean),
    ("grpo-loss", "detach extra", grpo_detached),
    ("grpo-loss", "wrong axis", grpo_axis),
    ("grpo-loss", "in-place change of an input", grpo_in_place),
    ("tool-use-loss", "mean over padding", tool_loss_over_positions),
    ("tool-use-loss", "mask dropped", tool_loss_padding_kept),
    ("tool-use-loss", "sign flipped", tool_loss_sign),
    ("tool-use-loss", "in-place change of an input", tool_loss_in_place),
]


@pytest.mark.parametrize("exercise_id, kind, wrong", INDEPENDENT,
                         ids=[f"{e}: {k} ({w.__name__})" for e, k, w in INDEPENDENT])


def test_a_wrong_version_written_by_hand_is_refused_with_its_kind_named(exercise_id, kind, wrong, capsys):
    assert exercises.check_function(exercise_id, wrong) is False
    out = capsys.readouterr().out
    assert engine.hint_names(out, kind), out
