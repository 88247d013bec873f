"""GRPO's exercises: group-normalised advantages and the k3 KL estimator (notebook 04a), GRPO's full loss
(notebook 08)."""

from __future__ import annotations

import inspect

import torch

import minirlhf.course.exercises.mutants as mutants
from minirlhf import losses
from minirlhf.course.exercises.engine import DTYPE, Case, Exercise, Mistake, Variant, Verdict, randn, tensor

# A group whose std is below this counts as constant (Â = 0): the library's own threshold, read from
# grpo_advantages' default so the cases follow it if it moves.
CONSTANT_GROUP_STD = inspect.signature(losses.grpo_advantages).parameters["eps"].default
NOISE = 1.5 * CONSTANT_GROUP_STD  # a near-constant group's one off reward: std below the threshold, range above
TRL_STD_EPS = 1e-4  # TRL's GRPOTrainer: Â = (R - mean) / (std + 1e-4), no threshold

# ---------------------------------------------------------------------------------------------------------
# grpo-advantages
# ---------------------------------------------------------------------------------------------------------


def _grpo_advantages(rewards, group_size):
    return losses.grpo_advantages(rewards, group_size)


def _grpo_cases():
    # one reward off by these: std = 1/2 of it (G = 4); the noise's range (max - min) is above the threshold
    noise, spread = NOISE, 3 * CONSTANT_GROUP_STD
    return [
        Case("the lecture's group: 2 correct out of 8", dict(rewards=tensor([1, 0, 1, 0, 0, 0, 0, 0]), group_size=8)),
        Case("two groups of 4 with different spreads", dict(rewards=tensor([0.1, 0.9, 0.4, 0.6, 3.0, -2.0, 1.0, 0.0]),
                                                            group_size=4)),
        Case("G = 2", dict(rewards=tensor([1.0, 0.0, 0.3, 0.8]), group_size=2)),
        Case("a group with zero std (every answer right)", dict(rewards=tensor([1, 1, 1, 1, 1, 0, 0, 1]),
                                                                group_size=4)),
        Case(f"float noise: a group with 0 < std < {CONSTANT_GROUP_STD:g} counts as constant",
             dict(rewards=tensor([0.5, 0.5 + noise, 0.5, 0.5, 1.0, 1.0, 1.0 - noise / 3, 1.0]), group_size=4)),
        Case(f"a small real spread: std = {spread / 2:g}, above the threshold",
             dict(rewards=tensor([2.0, 2.0, 2.0 + spread, 2.0]), group_size=4)),
        Case("random rewards, groups of 8", dict(rewards=randn(16, seed=8), group_size=8)),
    ]


def _normalised(R, std, zero_below=CONSTANT_GROUP_STD):
    centred = R - R.mean(1, keepdim=True)
    return torch.where(std < zero_below, torch.zeros_like(R), centred / std.clamp_min(CONSTANT_GROUP_STD))


def _grpo_population_std(rewards, group_size):
    R = rewards.view(-1, group_size)
    return _normalised(R, R.std(1, keepdim=True, correction=0)).reshape(-1)


def _grpo_no_std(rewards, group_size):
    return losses.grpo_advantages(rewards, group_size, scale="none")


def _grpo_batch_std(rewards, group_size):
    return losses.grpo_advantages(rewards, group_size, scale="batch")


def _grpo_batch_statistics(rewards, group_size):
    return (rewards - rewards.mean()) / rewards.std()


def _grpo_unguarded(rewards, group_size):
    R = rewards.view(-1, group_size)
    return ((R - R.mean(1, keepdim=True)) / R.std(1, keepdim=True)).reshape(-1)


def _grpo_only_exact_zero(rewards, group_size):
    R = rewards.view(-1, group_size)
    std = R.std(1, keepdim=True)
    return torch.where(std == 0, torch.zeros_like(R), (R - R.mean(1, keepdim=True)) / std).reshape(-1)


def _grpo_clamped_not_zeroed(rewards, group_size):
    R = rewards.view(-1, group_size)
    return ((R - R.mean(1, keepdim=True)) / R.std(1, keepdim=True).clamp_min(CONSTANT_GROUP_STD)).reshape(-1)


def _grpo_interleaved(rewards, group_size):
    R = rewards.view(group_size, -1).T  # row j taken for one prompt's answers: every B/G-th reward
    return _normalised(R, R.std(1, keepdim=True)).T.reshape(-1)


def _grpo_scaled_by(scale_of):
    """(R - mean) / scale_of(R), a group of near-equal rewards zeroed: the spread measured wrong."""
    def advantages(rewards, group_size):
        R = rewards.view(-1, group_size)
        return _normalised(R, scale_of(R)).reshape(-1)
    return advantages


def _std_across_prompts(R):
    """The sample std over dim 0 (NaN, without torch's warning, when there is one prompt)."""
    return ((R - R.mean(0, keepdim=True)) ** 2).sum(0, keepdim=True).div(R.shape[0] - 1).sqrt()


def _grpo_tiny_eps_added(rewards, group_size):
    R = rewards.view(-1, group_size)
    return ((R - R.mean(1, keepdim=True)) / (R.std(1, keepdim=True) + 1e-8)).reshape(-1)


def _grpo_threshold_too_high(rewards, group_size):
    R = rewards.view(-1, group_size)
    return _normalised(R, R.std(1, keepdim=True), zero_below=1e-3).reshape(-1)


def _grpo_leave_one_out_centred(rewards, group_size):
    R = rewards.view(-1, group_size)
    std = R.std(1, keepdim=True)
    centred = R - (R.sum(1, keepdim=True) - R) / (group_size - 1)
    return torch.where(std < CONSTANT_GROUP_STD, torch.zeros_like(R), centred / std.clamp_min(CONSTANT_GROUP_STD)
                       ).reshape(-1)


def _grpo_range_as_test(rewards, group_size):
    R = rewards.view(-1, group_size)
    spread = R.amax(1, keepdim=True) - R.amin(1, keepdim=True)
    return torch.where(spread < CONSTANT_GROUP_STD, torch.zeros_like(R),
                       (R - R.mean(1, keepdim=True)) / R.std(1, keepdim=True)).reshape(-1)


def _grpo_trl(rewards, group_size):
    R = rewards.view(-1, group_size)
    return ((R - R.mean(1, keepdim=True)) / (R.std(1, keepdim=True) + TRL_STD_EPS)).reshape(-1)


# an ε guard of one's own, Â = (R - mean) / (std + δ), is accepted when δ changes no advantage of a group with a real
# spread (std at least CONSTANT_GROUP_STD) by more than 1%
GUARD_TOLERANCE = 0.01
MAX_GUARD = GUARD_TOLERANCE * CONSTANT_GROUP_STD


def _epsilon_guard(cases, student, expected):
    """Recognise Â = (R - mean) / (std + δ) (or / max(std, δ)) on the groups with a real spread, for one δ ≥ 0 read
    from the student's numbers; accept it when δ ≤ MAX_GUARD and a constant group still gets Â = 0, else say what
    differs. None when the student's numbers are not of that form."""
    deltas, unzeroed = [], []
    for case, actual in zip(cases, student):
        if actual.error is not None or not actual.values or len(actual.values) != 1:
            return None
        R = case.inputs["rewards"].view(-1, case.inputs["group_size"])
        if actual.values[0].shape != case.inputs["rewards"].shape:
            return None
        A = actual.values[0].view_as(R)
        std, centred = R.std(1, keepdim=True), R - R.mean(1, keepdim=True)
        for row in range(R.shape[0]):
            j = int(centred[row].abs().argmax())
            if std[row] < CONSTANT_GROUP_STD:
                if A[row].abs().max() > 0:
                    unzeroed.append(float(A[row].abs().max()))
                continue
            if A[row, j] == 0 or (A[row, j] > 0) != (centred[row, j] > 0):
                return None
            delta = float(centred[row, j] / A[row, j] - std[row])
            if not torch.allclose(A[row], centred[row] / (std[row] + delta), rtol=1e-9, atol=1e-12):
                return None
            deltas.append(delta)
    delta = max(deltas, default=0.0)
    if min(deltas, default=0.0) < -1e-12:  # a std made smaller is no guard
        return None
    if delta <= MAX_GUARD * (1 + 1e-6) and not unzeroed:
        return Verdict(True, f"Your ε guard adds at most {delta:.2g} to the std, which changes no advantage of a group "
                             f"with a real spread by more than {GUARD_TOLERANCE:.0%} (the library divides by the std "
                             f"itself and zeroes a group whose std is below {CONSTANT_GROUP_STD:g}).")
    problems = []
    if delta > MAX_GUARD:
        stds = torch.cat([case.inputs["rewards"].view(-1, case.inputs["group_size"]).std(1) for case in cases])
        smallest = float(stds[stds >= CONSTANT_GROUP_STD].min())
        shrink = delta / (smallest + delta)
        problems.append(f"your ε guard adds δ ≈ {delta:.2g} to the std, the reference's none (it divides by the std "
                        f"itself): on a group of std {smallest:.2g} that shrinks Â by {shrink:.0%}; "
                        f"a guard must stay below {MAX_GUARD:g} (1% of the smallest std that counts), or use "
                        f"std.clamp_min({CONSTANT_GROUP_STD:g}), which changes nothing above the threshold")
    if unzeroed:
        problems.append(f"a group whose std is below {CONSTANT_GROUP_STD:g} gets advantages up to {max(unzeroed):.2g} "
                        f"from your guard, where the reference gives exactly 0 (torch.where(std < "
                        f"{CONSTANT_GROUP_STD:g}, 0, ...)): its rewards differ by float noise only")
    return Verdict(False, "; ".join(problems) + ".")


GRPO_ADVANTAGES = Exercise(
    "grpo-advantages", "grpo", "group_advantages", _grpo_advantages, _grpo_cases,
    (
        Mistake("population std", _grpo_population_std,
                "you divide by the population std (1/G): the library, like TRL, uses the sample std "
                "(1/(G - 1), torch.std's default)."),
        Mistake("no std", _grpo_no_std,
                "the advantages are centred but not scaled: divide by the group's std (that is Dr. GRPO, "
                "scale='none')."),
        Mistake("batch std", _grpo_batch_std,
                "you divide by the std of the whole batch: GRPO divides by the std of each answer's own group "
                "(that is scale='batch')."),
        Mistake("batch statistics", _grpo_batch_statistics,
                "mean and std are taken over the whole batch: normalise within each group of G consecutive "
                "rewards (reshape to (B/G, G))."),
        Mistake("groups read interleaved", _grpo_interleaved,
                "your groups are interleaved (every B/G-th reward): a group is G CONSECUTIVE rewards, "
                "rewards.view(-1, G) (one row per prompt), not rewards.view(G, -1)."),
        Mistake("zero std not handled", _grpo_unguarded,
                "a group whose rewards are all equal has std 0, and 0/0 is NaN: give such a group Â = 0."),
        Mistake("constant only when std is exactly 0", _grpo_only_exact_zero,
                f"only std == 0 counts as constant: float noise (rewards 0.5 and 0.5 + {NOISE:g}) "
                f"divided by its tiny std becomes ±1-sized advantages. A group whose std is below "
                f"{CONSTANT_GROUP_STD:g} counts as constant: Â = 0."),
        Mistake("tiny std clamped, not zeroed", _grpo_clamped_not_zeroed,
                f"dividing by std.clamp_min({CONSTANT_GROUP_STD:g}) keeps a near-constant group's float noise as "
                f"advantages of up to ±1: a group whose std is below {CONSTANT_GROUP_STD:g} gets Â = 0 exactly "
                f"(torch.where)."),
        Mistake("variance instead of std", _grpo_scaled_by(lambda R: R.var(1, keepdim=True)),
                "you divide by the variance: divide by the standard deviation, its square root (R.std(1))."),
        Mistake("std over the wrong dimension", _grpo_scaled_by(_std_across_prompts),
                "the std is taken over dim 0, across prompts: with R = rewards.view(-1, G) a group is a ROW, "
                "take mean and std over dim 1 (keepdim=True)."),
        Mistake("a tiny ε added to the std", _grpo_tiny_eps_added,
                f"(R - mean) / (std + 1e-8) turns a near-constant group's float noise into ±1-sized advantages: a "
                f"group whose std is below {CONSTANT_GROUP_STD:g} gets Â = 0 exactly (torch.where)."),
        Mistake("threshold too high", _grpo_threshold_too_high,
                f"a group with a real (small) spread is zeroed: the threshold is {CONSTANT_GROUP_STD:g}, "
                f"std < {CONSTANT_GROUP_STD:g}, no higher."),
        Mistake("range as the constant test", _grpo_range_as_test,
                f"a group counts as constant when its STD is below {CONSTANT_GROUP_STD:g}, not its range "
                f"(max - min): rewards 0.5, 0.5 + {NOISE:g}, 0.5, 0.5 have a range above it and a std below it."),
        Mistake("leave-one-out centring", _grpo_leave_one_out_centred,
                "you subtract the mean of the OTHER answers (that is RLOO): GRPO subtracts the mean of the whole "
                "group, the answer itself included."),
    ),
    variants=(
        Variant("TRL's form (R - mean) / (std + 1e-4)", _grpo_trl,
                f"TRL adds 1e-4 to the std instead of a threshold. The two agree to 1e-4/std relative on a group "
                f"with a real spread (0.1% at std 0.1), and differ on near-constant groups: for a std below "
                f"{CONSTANT_GROUP_STD:g} minirlhf gives exactly 0, TRL's form a small advantage (about "
                f"(R - mean) / 1e-4). minirlhf keeps a threshold so that a group it counts as constant adds exactly "
                f"nothing to the gradient."),
    ),
    equivalent_forms=_epsilon_guard,
)


# ---------------------------------------------------------------------------------------------------------
# k3-estimator
# ---------------------------------------------------------------------------------------------------------


def _k3_cases():
    logp, ref_logp = randn(2, 5, seed=9) - 1.0, randn(2, 5, seed=10) - 1.0
    return [
        Case("random tokens", dict(logp=logp, ref_logp=ref_logp)),
        Case("p_θ = p_ref: k3 = 0", dict(logp=tensor([[-0.5, -2.0, -7.0]]), ref_logp=tensor([[-0.5, -2.0, -7.0]]))),
        Case("p_θ far above and far below p_ref", dict(logp=tensor([[-0.1, -6.0]]), ref_logp=tensor([[-5.0, -0.2]]))),
        Case("tiny differences: k3 ≈ d²/2 ≈ 5e-7, far above the tolerance",
             dict(logp=tensor([[-1.0, -2.0, -3.0]]), ref_logp=tensor([[-1.0 + 1e-3, -2.0 - 1e-3, -3.0 + 3e-3]]))),
    ]


def _k3_upside_down(logp, ref_logp):
    return losses.kl_k3(ref_logp, logp)


def _k3_is_k1(logp, ref_logp):
    return losses.kl_k1(logp, ref_logp)


def _k3_is_k2(logp, ref_logp):
    return losses.kl_k2(logp, ref_logp)


def _k3_without_minus_one(logp, ref_logp):
    return losses.kl_k3(logp, ref_logp) + 1


def _k3_without_log_term(logp, ref_logp):
    return torch.expm1(ref_logp - logp)


def _k3_detached(logp, ref_logp):
    return losses.kl_k3(logp.detach(), ref_logp)


def _k3_log_softmaxed(logp, ref_logp):
    return losses.kl_k3(torch.log_softmax(logp, -1), torch.log_softmax(ref_logp, -1))


def _k3_abs_k1(logp, ref_logp):
    return (logp - ref_logp).abs()


def _k3_log_term_added(logp, ref_logp):
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) + log_ratio - 1


def _k3_negated(logp, ref_logp):
    return -losses.kl_k3(logp, ref_logp)


def _k3_exp_detached(logp, ref_logp):
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio).detach() - log_ratio - 1


def _k3_log_detached(logp, ref_logp):
    log_ratio = ref_logp - logp
    return torch.exp(log_ratio) - log_ratio.detach() - 1


def _k3_ratio_of_logps(logp, ref_logp):
    ratio = ref_logp / logp  # the wrong "ratio": of the log-probabilities themselves
    return ratio - torch.log(ratio) - 1


K3_ESTIMATOR = Exercise(
    "k3-estimator", "grpo", "k3_estimate", losses.kl_k3, _k3_cases,
    (
        Mistake("ratio upside down", _k3_upside_down,
                "the ratio is upside down: k3 uses p_ref/p_θ (samples come from p_θ, so E[p_ref/p_θ] = 1)."),
        Mistake("k1", _k3_is_k1, "this is k1 = log p_θ - log p_ref; k3 = p_ref/p_θ - log(p_ref/p_θ) - 1."),
        Mistake("k2", _k3_is_k2, "this is k2 = ½ (log p_θ - log p_ref)²; k3 = p_ref/p_θ - log(p_ref/p_θ) - 1."),
        Mistake("forgotten - 1", _k3_without_minus_one,
                "the '- 1' is missing: without it k3 is 1 where p_θ = p_ref instead of 0."),
        Mistake("log term missing", _k3_without_log_term,
                "the '- log(p_ref/p_θ)' term is missing: p_ref/p_θ - 1 alone is k1's unbiased cousin, negative half "
                "the time; k3 = p_ref/p_θ - log(p_ref/p_θ) - 1 is never negative."),
        Mistake("ratio of log-probs", _k3_ratio_of_logps,
                "you divide the log-probabilities: p_ref/p_θ = exp(ref_logp - logp), and log(p_ref/p_θ) = "
                "ref_logp - logp."),
        Mistake("detached log-prob", _k3_detached,
                "the values are right but no gradient reaches logp: the KL penalty must pull on p_θ, so compute k3 "
                "with torch ops on logp itself (no .detach(), .item() or torch.tensor(...) of it)."),
        Mistake("log-softmax of log-probs", _k3_log_softmaxed,
                "the inputs are already the log-probabilities of the sampled tokens: use them as they are, "
                "log_softmax over the tokens of a response mixes different positions."),
        Mistake("|k1|", _k3_abs_k1, "this is |log p_θ - log p_ref|: k3 = p_ref/p_θ - log(p_ref/p_θ) - 1."),
        Mistake("log term added", _k3_log_term_added,
                "the log term is added: k3 = p_ref/p_θ - log(p_ref/p_θ) - 1, with a MINUS before the log."),
        Mistake("sign flipped", _k3_negated,
                "the sign is flipped: k3 = p_ref/p_θ - log(p_ref/p_θ) - 1 is never negative (x - 1 ≥ log x)."),
        Mistake("ratio detached", _k3_exp_detached,
                "the values are right but the gradient is not: the ratio p_ref/p_θ = exp(ref_logp - logp) is "
                "detached, so only the log term pulls on p_θ. Do not detach any term."),
        Mistake("log term detached", _k3_log_detached,
                "the values are right but the gradient is not: the log term is detached, so only the ratio pulls "
                "on p_θ. Do not detach any term."),
    ),
    grad_inputs=("logp",),
)



# ---------------------------------------------------------------------------------------------------------
# grpo-loss
# ---------------------------------------------------------------------------------------------------------


def _grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps, beta):
    return losses.grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps, beta, aggregation="token-mean")[0]


def _grpo_loss_cases():
    logp, old_logp, ref_logp = (randn(2, 5, seed=s) * 0.4 - 1.5 for s in (21, 22, 23))
    full = torch.ones(2, 5, dtype=DTYPE)
    padded_logp = tensor([[-1.0, -0.4, -2.0, -9.0], [-0.2, -9.0, -9.0, -9.0], [-1.5, -1.1, -0.7, -0.3]])
    padded_old = tensor([[-1.3, -0.1, -2.0, 0.0], [-0.9, 0.0, 0.0, 0.0], [-1.4, -1.2, -0.9, -0.2]])
    padded_ref = tensor([[-0.8, -0.9, -1.0, 5.0], [-0.5, 5.0, 5.0, 5.0], [-1.6, -0.9, -0.9, -0.5]])
    padded_mask = tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    return [
        Case("random tokens, Â of both signs, β = 0.04", dict(logp=logp, old_logp=old_logp, ref_logp=ref_logp,
                                                              advantages=tensor([1.2, -0.7]), mask=full, eps=0.2,
                                                              beta=0.04)),
        Case("first step: old = θ, p_ref far away, β = 0.5",
             dict(logp=logp, old_logp=logp.clone(), ref_logp=ref_logp, advantages=tensor([-0.5, 1.5]), mask=full,
                  eps=0.2, beta=0.5)),
        Case("ε = 0.1, β = 0.1", dict(logp=logp, old_logp=old_logp, ref_logp=ref_logp, advantages=tensor([0.8, -1.1]),
                                      mask=full, eps=0.1, beta=0.1)),
        Case("β = 0: the clipped surrogate alone", dict(logp=logp, old_logp=old_logp, ref_logp=ref_logp,
                                                        advantages=tensor([2.0, 0.5]), mask=full, eps=0.3, beta=0.0)),
        Case("padding (garbage after the last token), lengths 3, 1 and 4",
             dict(logp=padded_logp, old_logp=padded_old, ref_logp=padded_ref, advantages=tensor([1.0, -2.0, 0.5]),
                  mask=padded_mask, eps=0.2, beta=0.2)),
    ]


def _grpo_loss_with(kl=losses.kl_k3, kl_sign=-1.0, aggregation="token-mean", clip=True, mask_kl=True):
    """GRPO's loss with one thing made wrong on purpose."""
    def loss(logp, old_logp, ref_logp, advantages, mask, eps, beta):
        keep = mask.bool()
        logp, old_logp, ref_logp = (torch.where(keep, x, torch.zeros_like(x)) for x in (logp, old_logp, ref_logp))
        ratio = torch.exp(logp - old_logp)
        A = advantages[:, None].expand_as(ratio)
        surrogate = losses.clipped_surrogate(ratio, A, eps) if clip else ratio * A
        objective = surrogate + kl_sign * beta * kl(logp, ref_logp)
        if not mask_kl:
            return -losses.aggregate(surrogate, mask, aggregation) + beta * kl(logp, ref_logp).mean()
        return -losses.aggregate(objective, mask, aggregation)
    return loss


GRPO_LOSS = Exercise(
    "grpo-loss", "grpo", "grpo_token_loss", _grpo_loss, _grpo_loss_cases,
    (
        Mistake("KL with the wrong sign", _grpo_loss_with(kl_sign=1.0),
                "the KL term has the wrong sign: it is a PENALTY, J_t = min(r_t Â, clip(r_t) Â) - β k3_t, and "
                "the loss is -J, so β k3 is ADDED to the loss."),
        Mistake("k1 instead of k3", _grpo_loss_with(kl=losses.kl_k1),
                "the KL estimate is k1 = log p_θ - log p_ref: GRPO uses k3 = p_ref/p_θ - log(p_ref/p_θ) - 1, "
                "which is never negative."),
        Mistake("k3 upside down", _grpo_loss_with(kl=lambda logp, ref: losses.kl_k3(ref, logp)),
                "k3's ratio is upside down: k3 = p_ref/p_θ - log(p_ref/p_θ) - 1, with p_ref/p_θ = "
                "exp(ref_logp - logp)."),
        Mistake("mean per sequence", _grpo_loss_with(aggregation="seq-mean"),
                "you average each response, then the responses (the GRPO paper's 1/|o_i|): this exercise asks for "
                "the token mean (DAPO), Σ (mask · J) / Σ mask over the whole batch.", kind=mutants.AXIS),
        Mistake("padding counted in the mean", _grpo_loss_with(aggregation="constant"),
                "padding is counted in the mean: divide by the number of real tokens (mask.sum()), not by B·T."),
        Mistake("no clipping", _grpo_loss_with(clip=False),
                "the ratio is never clipped: J_t = min(r_t Â, clip(r_t, 1 - ε, 1 + ε) Â) - β k3_t."),
        Mistake("KL averaged over padding too", _grpo_loss_with(mask_kl=False),
                "the KL penalty is averaged over every position, padding included: mask it like the surrogate, "
                "inside the same token mean."),
    ),
    grad_inputs=("logp",),
)

EXERCISES = [GRPO_ADVANTAGES, K3_ESTIMATOR, GRPO_LOSS]
