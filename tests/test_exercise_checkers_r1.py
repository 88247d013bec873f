"""The checkers of notebook 07's exercises (clip-higher, dynamic-sampling, gspo-ratio) cannot be fooled: wrong
versions written the way students write them, independently of the catalogue, are refused with the hint that
names their mistake; correct rewrites pass; and the cases hold the inputs where each kind of mistake shows.

The generic mutations (an argument ignored or frozen, a detached input, swapped arguments, inputs shifted, the
output negated, rescaled, reshaped, ...) run on these exercises too, in tests/test_exercise_checkers.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from minirlhf import losses
from minirlhf.course import exercises
from minirlhf.course.exercises import engine, grpo_r1


def _cases(exercise_id: str) -> tuple[engine.Case, ...]:
    return engine.cases_of(exercises.EXERCISES[exercise_id])


def _refused(exercise_id: str, fn, capsys) -> str:
    passed = exercises.check_function(exercise_id, fn)
    out = capsys.readouterr().out
    assert passed is False, out
    assert f"✗ {exercise_id}: case '" in out and "  hint: " in out, out
    return out


# ---------------------------------------------------------------------------------------------------------
# clip-higher: students' wrong versions
# ---------------------------------------------------------------------------------------------------------


def ch_symmetric_low(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_low) * advantages)


def ch_symmetric_high(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(1 - eps_high, 1 + eps_high) * advantages)


def ch_swapped(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, torch.clamp(ratio, 1 - eps_high, 1 + eps_low) * advantages)


def ch_by_sign_swapped(ratio, advantages, eps_low, eps_high):
    bounded = torch.where(advantages > 0, ratio.clamp(max=1 + eps_low), ratio.clamp(min=1 - eps_high))
    return bounded * advantages


def ch_clamp_only(ratio, advantages, eps_low, eps_high):
    return advantages * torch.clamp(ratio, 1 - eps_low, 1 + eps_high)


def ch_clip_when_outside(ratio, advantages, eps_low, eps_high):
    outside = (ratio < 1 - eps_low) | (ratio > 1 + eps_high)
    return torch.where(outside, ratio.clamp(1 - eps_low, 1 + eps_high), ratio) * advantages


def ch_min_no_clamp(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio * advantages)


def ch_max(ratio, advantages, eps_low, eps_high):
    return torch.max(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)


def ch_detached(ratio, advantages, eps_low, eps_high):
    r = ratio.detach()
    return torch.min(r * advantages, r.clamp(1 - eps_low, 1 + eps_high) * advantages)


def ch_rebuilt_with_torch_tensor(ratio, advantages, eps_low, eps_high):
    r = torch.tensor(ratio.tolist(), dtype=ratio.dtype)
    return torch.min(r * advantages, r.clamp(1 - eps_low, 1 + eps_high) * advantages)


def ch_upper_only(ratio, advantages, eps_low, eps_high):
    return torch.where(advantages > 0, ratio.clamp(max=1 + eps_high), ratio) * advantages


def ch_lower_only(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(min=1 - eps_low) * advantages)


def ch_minus_eps_range(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(-eps_low, eps_high) * advantages)


def ch_advantage_clipped(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio * advantages.clamp(1 - eps_low, 1 + eps_high))


def ch_negated(ratio, advantages, eps_low, eps_high):
    return -torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)


def ch_loss(ratio, advantages, eps_low, eps_high):
    return -torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages).mean()


def ch_mean(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages).mean()


# ---------------------------------------------------------------------------------------------------------
# dynamic-sampling: students' wrong versions
# ---------------------------------------------------------------------------------------------------------


def ds_std_not_zero(rewards, group_size, eps):
    return torch.stack([group.std() != 0 for group in rewards.split(group_size)])


def ds_all_equal(rewards, group_size, eps):
    R = rewards.view(-1, group_size)
    return ~(R == R[:, :1]).all(1)


def ds_unique_values(rewards, group_size, eps):
    return torch.tensor([len(set(group.tolist())) > 1 for group in rewards.view(-1, group_size)])


def ds_population(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1, unbiased=False) >= eps


def ds_numpy_default_std(rewards, group_size, eps):
    return torch.from_numpy(rewards.numpy().reshape(-1, group_size).std(1) >= eps)  # numpy's ddof = 0


def ds_success_rate(rewards, group_size, eps):
    accuracy = rewards.view(-1, group_size).mean(1)
    return (accuracy > 0) & (accuracy < 1)


def ds_correct_count(rewards, group_size, eps):
    correct = (rewards.view(-1, group_size) == 1).sum(1)  # DAPO's 0 < |{correct}| < G, for 0/1 rewards only
    return (correct > 0) & (correct < group_size)


def ds_interleaved(rewards, group_size, eps):
    return rewards.reshape(group_size, -1).std(0) >= eps


def ds_indices(rewards, group_size, eps):
    return torch.where(rewards.view(-1, group_size).std(1) >= eps)[0]


def ds_inverted(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1) < eps


def ds_range(rewards, group_size, eps):
    R = rewards.view(-1, group_size)
    return (R.max(1).values - R.min(1).values) > eps


def ds_variance(rewards, group_size, eps):
    return rewards.view(-1, group_size).var(1) >= eps


def ds_per_answer(rewards, group_size, eps):
    keep = rewards.view(-1, group_size).std(1) >= eps
    return keep[:, None].expand(-1, group_size).reshape(-1)


def ds_batch_std(rewards, group_size, eps):
    return torch.full((len(rewards) // group_size,), bool(rewards.std() >= eps))


def ds_std_over_dim0(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(0) >= eps


# ---------------------------------------------------------------------------------------------------------
# gspo-ratio: students' wrong versions
# ---------------------------------------------------------------------------------------------------------


def gs_exp_of_sum(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum(-1))


def gs_product(logp, old_logp, mask):
    return torch.where(mask.bool(), torch.exp(logp - old_logp), torch.ones_like(logp)).prod(-1)


def gs_padded_mean(logp, old_logp, mask):
    return ((logp - old_logp) * mask).mean(-1).exp()


def gs_arithmetic(logp, old_logp, mask):
    return (torch.exp(logp - old_logp) * mask).sum(-1) / mask.sum(-1)


def gs_sum_of_ratios(logp, old_logp, mask):
    return (torch.exp(logp - old_logp) * mask).sum(-1)


def gs_no_exp(logp, old_logp, mask):
    return ((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1)


def gs_unmasked(logp, old_logp, mask):
    return (logp - old_logp).mean(-1).exp()


def gs_upside_down(logp, old_logp, mask):
    return torch.exp(((old_logp - logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1))


def gs_no_grad(logp, old_logp, mask):
    with torch.no_grad():
        return torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1))


def gs_token_ratios(logp, old_logp, mask):
    return torch.exp(logp - old_logp) * mask


def gs_batch(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum() / mask.sum())


def gs_zero_over_zero(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1))


STUDENT_MISTAKES = [
    ("clip-higher", "symmetric clip at ε_low", ch_symmetric_low),
    ("clip-higher", "symmetric clip at ε_high", ch_symmetric_high),
    ("clip-higher", "ε_low and ε_high swapped", ch_swapped),
    ("clip-higher", "ε_low and ε_high swapped", ch_by_sign_swapped),
    ("clip-higher", "clamp without the min", ch_clamp_only),
    ("clip-higher", "clamp without the min", ch_clip_when_outside),
    ("clip-higher", "min without the clamp", ch_min_no_clamp),
    ("clip-higher", "max instead of min", ch_max),
    ("clip-higher", "detached ratio", ch_detached),
    ("clip-higher", "detached ratio", ch_rebuilt_with_torch_tensor),
    ("clip-higher", "clip on the upper side only", ch_upper_only),
    ("clip-higher", "clip on the lower side only", ch_lower_only),
    ("clip-higher", "clip range [-ε_low, ε_high]", ch_minus_eps_range),
    ("clip-higher", "advantage clipped", ch_advantage_clipped),
    ("clip-higher", "sign flipped", ch_negated),
    ("clip-higher", "the loss returned", ch_loss),
    ("clip-higher", "averaged to a scalar", ch_mean),
    ("dynamic-sampling", "constant only when std is exactly 0", ds_std_not_zero),
    ("dynamic-sampling", "constant only when std is exactly 0", ds_all_equal),
    ("dynamic-sampling", "constant only when std is exactly 0", ds_unique_values),
    ("dynamic-sampling", "population std", ds_population),
    ("dynamic-sampling", "population std", ds_numpy_default_std),
    ("dynamic-sampling", "success rate strictly between 0 and 1", ds_success_rate),
    ("dynamic-sampling", "correct answers counted", ds_correct_count),
    ("dynamic-sampling", "groups read interleaved", ds_interleaved),
    ("dynamic-sampling", "indices instead of a mask", ds_indices),
    ("dynamic-sampling", "constant groups kept, informative ones dropped", ds_inverted),
    ("dynamic-sampling", "range as the constant test", ds_range),
    ("dynamic-sampling", "variance instead of std", ds_variance),
    ("dynamic-sampling", "one flag per answer", ds_per_answer),
    ("dynamic-sampling", "the whole batch's std", ds_batch_std),
    ("dynamic-sampling", "std over the wrong dimension", ds_std_over_dim0),
    ("gspo-ratio", "product of the token ratios", gs_exp_of_sum),
    ("gspo-ratio", "product of the token ratios", gs_product),
    ("gspo-ratio", "mean over the padded length T", gs_padded_mean),
    ("gspo-ratio", "arithmetic mean of the token ratios", gs_arithmetic),
    ("gspo-ratio", "sum of the token ratios", gs_sum_of_ratios),
    ("gspo-ratio", "log-ratio without exp", gs_no_exp),
    ("gspo-ratio", "no masking", gs_unmasked),
    ("gspo-ratio", "ratio upside down", gs_upside_down),
    ("gspo-ratio", "detached", gs_no_grad),
    ("gspo-ratio", "per-token ratios", gs_token_ratios),
    ("gspo-ratio", "one ratio for the whole batch", gs_batch),
    ("gspo-ratio", "0/0 for an answer without tokens", gs_zero_over_zero),
]


@pytest.mark.parametrize("exercise_id, name, wrong", STUDENT_MISTAKES,
                         ids=[f"{e}: {n} ({w.__name__})" for e, n, w in STUDENT_MISTAKES])
def test_a_students_wrong_version_gets_the_hint_that_names_it(exercise_id, name, wrong, capsys):
    mistake = next(m for m in exercises.EXERCISES[exercise_id].mistakes if m.name == name)
    assert f"hint: ({name}) {mistake.hint}" in _refused(exercise_id, wrong, capsys)


def test_every_catalogued_mistake_of_07_is_written_by_a_student_here():
    written = {(e, n) for e, n, _ in STUDENT_MISTAKES}
    for exercise_id in exercises.list_exercises(grpo_r1.TOPIC):
        for mistake in exercises.EXERCISES[exercise_id].mistakes:
            assert (exercise_id, mistake.name) in written, (exercise_id, mistake.name)


def ds_as_integers(rewards, group_size, eps):
    return (rewards.view(-1, group_size).std(1) >= eps).int()


def ds_as_floats(rewards, group_size, eps):
    return torch.where(rewards.view(-1, group_size).std(1) >= eps, 1.0, 0.0).double()


def ds_as_list(rewards, group_size, eps):
    return [bool(group.std() >= eps) for group in rewards.split(group_size)]


@pytest.mark.parametrize("wrong, words", [
    (ds_as_integers, "dtype torch.int32, expected torch.bool: a mask is True/False"),
    (ds_as_floats, "dtype torch.float64, expected torch.bool: a mask is True/False"),
    (ds_as_list, "the result is a list of 3, not a torch.Tensor"),
], ids=["0/1 integers", "0/1 floats", "a list of bools"])
def test_a_mask_of_numbers_or_a_list_is_named(wrong, words, capsys):
    out = _refused("dynamic-sampling", wrong, capsys)
    assert words in out and "hint: (" not in out, out


# ---------------------------------------------------------------------------------------------------------
# Correct rewrites pass
# ---------------------------------------------------------------------------------------------------------


def ch_bound_by_sign(ratio, advantages, eps_low, eps_high):
    bounded = torch.where(advantages > 0, ratio.clamp(max=1 + eps_high), ratio.clamp(min=1 - eps_low))
    return bounded * advantages


def ch_stacked(r, a, lo, hi):
    return torch.stack([r * a, torch.clamp(r, 1 - lo, 1 + hi) * a]).min(0).values


def ch_with_default(ratio, advantages, eps_low, eps_high=None):
    return losses.clipped_surrogate(ratio, advantages, eps_low, eps_high)


def ds_loop(rewards, group_size, eps):
    return torch.stack([group.std() >= eps for group in rewards.split(group_size)])


def ds_numpy_sample_std(rewards, group_size, eps):
    return torch.from_numpy(rewards.numpy().reshape(-1, group_size).std(1, ddof=1) >= eps)


def ds_variance_against_eps_squared(rewards, group_size, eps):
    return rewards.reshape(-1, group_size).var(dim=1) >= eps**2


def gs_geometric_mean_by_powers(logp, old_logp, mask):
    keep = mask.bool()
    ratios = torch.where(keep, torch.exp(logp - old_logp), torch.ones_like(logp))
    return (ratios ** (1 / keep.sum(-1, keepdim=True).clamp_min(1))).prod(-1)


def gs_per_row(logp, old_logp, mask):
    rows = []
    for lp, old, m in zip(logp, old_logp, mask.bool()):
        rows.append(torch.exp((lp[m] - old[m]).mean()) if m.any() else torch.ones((), dtype=lp.dtype))
    return torch.stack(rows)


def gs_masked_mean(logp, old_logp, mask):
    return torch.exp(losses.masked_mean(logp - old_logp, mask, dim=-1))


CORRECT = [("clip-higher", ch_bound_by_sign), ("clip-higher", ch_stacked), ("clip-higher", ch_with_default),
           ("dynamic-sampling", ds_loop), ("dynamic-sampling", ds_numpy_sample_std),
           ("dynamic-sampling", ds_variance_against_eps_squared), ("gspo-ratio", gs_geometric_mean_by_powers),
           ("gspo-ratio", gs_per_row), ("gspo-ratio", gs_masked_mean)]


@pytest.mark.parametrize("exercise_id, fn", CORRECT, ids=[f"{e}: {f.__name__}" for e, f in CORRECT])
def test_correct_rewrites_pass(exercise_id, fn, capsys):
    assert exercises.check_function(exercise_id, fn) is True, capsys.readouterr().out


# ---------------------------------------------------------------------------------------------------------
# The cases hold the inputs where the mistakes show
# ---------------------------------------------------------------------------------------------------------


def test_clip_higher_cases_clip_on_each_side_where_a_symmetric_clip_would_not():
    """A token clipped at 1 + ε_high that a symmetric ε_low clip would also clip is no test of ε_high: some case
    must have the clip active on the low side and on the high side where either symmetric clip disagrees."""
    low_only, high_only, signs, on_edge = False, False, set(), False
    for case in _cases("clip-higher"):
        r, a, lo, hi = (case.inputs[k] for k in ("ratio", "advantages", "eps_low", "eps_high"))
        signs |= {int(s) for s in a.sign().unique()}
        high = (a > 0) & (r > 1 + hi)
        low = (a < 0) & (r < 1 - lo)
        high_only |= lo != hi and bool((((a > 0) & (r > 1 + lo)) != high).any())
        low_only |= lo != hi and bool((((a < 0) & (r < 1 - hi)) != low).any())
        on_edge |= not case.check_grad and bool(((r == 1 - lo) | (r == 1 + hi)).all())
    assert low_only and high_only and on_edge and {-1, 1} <= signs


def test_dynamic_sampling_cases_straddle_the_librarys_threshold():
    assert grpo_r1.CONSTANT_GROUP_STD == losses.CONSTANT_GROUP_STD
    stds, pop_stds, sizes, all_constant = [], [], set(), False
    for case in _cases("dynamic-sampling"):
        R = case.inputs["rewards"].view(-1, case.inputs["group_size"])
        sizes.add(case.inputs["group_size"])
        if case.inputs["eps"] == grpo_r1.CONSTANT_GROUP_STD:
            stds.append(R.std(1))
            pop_stds.append(R.std(1, correction=0))
        all_constant |= bool((R.std(1) == 0).all())
    stds, pop_stds, eps = torch.cat(stds), torch.cat(pop_stds), grpo_r1.CONSTANT_GROUP_STD
    assert ((stds > 0) & (stds < eps)).any()  # float noise: dropped
    assert ((stds >= eps) & (pop_stds < eps)).any()  # kept by the sample std only
    assert 2 in sizes and all_constant


def test_gspo_cases_have_padding_a_one_token_row_an_empty_row_and_unequal_token_ratios():
    lengths, unequal = set(), False
    for case in _cases("gspo-ratio"):
        mask = case.inputs["mask"].bool()
        lengths |= set(mask.sum(-1).tolist())
        log_ratio = (case.inputs["logp"] - case.inputs["old_logp"]).masked_fill(~mask, float("nan"))
        spread = log_ratio.nan_to_num(0).amax(-1) - log_ratio.nan_to_num(0).amin(-1)
        unequal |= bool((spread > 0.5).any())
        assert (~mask).any() or case.inputs["mask"].shape[1] > 1
    assert {0, 1} <= lengths and unequal


def test_numpy_wrong_version_is_refused_not_crashed(capsys):
    def numpy_ratio(logp, old_logp, mask):
        return torch.from_numpy(np.exp(((logp.numpy() - old_logp.numpy()) * mask.numpy()).sum(-1)))
    out = _refused("gspo-ratio", numpy_ratio, capsys)
    assert "numpy leaves autograd" in out
