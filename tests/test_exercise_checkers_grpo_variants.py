"""The checkers of notebook 07's exercises (clip-higher, dynamic-sampling, gspo-ratio) cannot be fooled: wrong
versions written the way students write them, independently of the catalogue, are refused with the hint that
names their mistake; correct rewrites pass; and the cases hold the inputs where each kind of mistake shows.

The generic mutations (an argument ignored or frozen, a detached input, swapped arguments, inputs shifted, the
output negated, rescaled, reshaped, ...) run on these exercises too, in tests/test_exercise_checkers.py.
"""

from __future__ import annotations

import math

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


def ch_log_ratio_clipped(ratio, advantages, eps_low, eps_high):
    clipped = torch.exp(torch.log(ratio).clamp(-eps_low, eps_high))
    return torch.min(ratio * advantages, clipped * advantages)


def ch_min_of_ratios(ratio, advantages, eps_low, eps_high):
    return advantages * torch.min(ratio, torch.clamp(ratio, 1 - eps_low, 1 + eps_high))


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


def ds_mean_absolute_deviation(rewards, group_size, eps):
    R = rewards.view(-1, group_size)
    return (R - R.mean(1, keepdim=True)).abs().mean(1) >= eps


def ds_no_filter(rewards, group_size, eps):
    return torch.full((len(rewards) // group_size,), True)


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


def gs_mask_only_in_count(logp, old_logp, mask):
    return torch.exp((logp.sum(-1) - old_logp.sum(-1)) / mask.sum(-1).clamp(min=1))


def gs_over_batch_tokens(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum())


def gs_zero_over_zero(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1))


# ---------------------------------------------------------------------------------------------------------
# More students' wrong versions (a second student, attack07), written before the cases that catch them
# ---------------------------------------------------------------------------------------------------------


def ch_range_without_one(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(eps_low, eps_high) * advantages)


def ch_upper_edge_without_one(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(1 - eps_low, eps_high) * advantages)


def ch_product_clipped(ratio, advantages, eps_low, eps_high):
    surrogate = ratio * advantages
    return torch.min(surrogate, surrogate.clamp(1 - eps_low, 1 + eps_high))


def ch_dual_clip(ratio, advantages, eps_low, eps_high):
    surrogate = torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)
    return torch.where(advantages < 0, torch.max(surrogate, 3.0 * advantages), surrogate)


def ch_ratio_read_as_log_ratio(ratio, advantages, eps_low, eps_high):
    r = torch.exp(ratio)
    return torch.min(r * advantages, r.clamp(1 - eps_low, 1 + eps_high) * advantages)


def ch_dapo_numbers(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(0.8, 1.28) * advantages)


def ch_edges_by_sign_swapped(ratio, advantages, eps_low, eps_high):
    bounded = torch.where(advantages > 0, ratio.clamp(min=1 - eps_low), ratio.clamp(max=1 + eps_high))
    return bounded * advantages


def ch_where_sign_ignored(ratio, advantages, eps_low, eps_high):
    out = torch.where(ratio > 1 + eps_high, (1 + eps_high) * advantages, ratio * advantages)
    return torch.where(ratio < 1 - eps_low, (1 - eps_low) * advantages, out)


def ch_where_signs_swapped(ratio, advantages, eps_low, eps_high):
    out = torch.where((ratio > 1 + eps_high) & (advantages < 0), (1 + eps_high) * advantages, ratio * advantages)
    return torch.where((ratio < 1 - eps_low) & (advantages > 0), (1 - eps_low) * advantages, out)


def ch_abs_advantage(ratio, advantages, eps_low, eps_high):
    size = advantages.abs()
    return torch.min(ratio * size, ratio.clamp(1 - eps_low, 1 + eps_high) * size) * advantages.sign()


def ch_library_eps_swapped(ratio, advantages, eps_low, eps_high):
    return losses.clipped_surrogate(ratio, advantages, eps_high, eps_low)


def ch_loss_per_token(ratio, advantages, eps_low, eps_high):
    return torch.max(-ratio * advantages, -ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)


def ds_strictly_above(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1) > eps


def ds_chunk(rewards, group_size, eps):
    return torch.stack([group.std() >= eps for group in rewards.chunk(group_size)])


def ds_view_g_rows(rewards, group_size, eps):
    return rewards.view(group_size, -1).std(1) >= eps


def ds_hard_coded_threshold(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1) >= 1e-4


def ds_advantages_without_eps(rewards, group_size, eps):
    advantages = losses.grpo_advantages(rewards, group_size)  # eps not passed on: the library's default
    return (advantages.view(-1, group_size) != 0).any(1)


def ds_std_of_advantages(rewards, group_size, eps):
    return losses.grpo_advantages(rewards, group_size).view(-1, group_size).std(1) >= eps


def ds_some_right(rewards, group_size, eps):
    return (rewards.view(-1, group_size) > 0).any(1)


def ds_mean_nonzero(rewards, group_size, eps):
    return rewards.view(-1, group_size).mean(1) != 0


def ds_not_all_right(rewards, group_size, eps):
    return ~(rewards.view(-1, group_size) == 1).all(1)


def ds_tiny_threshold(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1) > 1e-6


def ds_isclose_to_first(rewards, group_size, eps):
    R = rewards.view(-1, group_size)
    return ~torch.isclose(R, R[:, :1]).all(1)


def ds_mean_differs_from_first(rewards, group_size, eps):
    R = rewards.view(-1, group_size)
    return R.mean(1) != R[:, 0]


def ds_largest_deviation(rewards, group_size, eps):
    R = rewards.view(-1, group_size)
    return (R - R.mean(1, keepdim=True)).abs().amax(1) >= eps


def ds_sum_between(rewards, group_size, eps):
    correct = rewards.view(-1, group_size).sum(1)
    return (correct > 0) & (correct < group_size)


def ds_population_var_against_eps_squared(rewards, group_size, eps):
    return rewards.view(-1, group_size).var(1, unbiased=False) >= eps**2


def gs_count_plus_one(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum(-1) / (mask.sum(-1) + 1))


def gs_clipped_like_gspo(logp, old_logp, mask):
    s = torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1))
    return s.clamp(1 - 3e-4, 1 + 4e-4)


def gs_logps_divided(logp, old_logp, mask):
    return ((logp / old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1) + (mask.sum(-1) == 0)


def gs_empty_row_zero(logp, old_logp, mask):
    n = mask.sum(-1)
    s = torch.exp(((logp - old_logp) * mask).sum(-1) / n.clamp(min=1))
    return torch.where(n > 0, s, torch.zeros_like(s))


def gs_nanmean(logp, old_logp, mask):
    return torch.exp((logp - old_logp).masked_fill(~mask.bool(), float("nan")).nanmean(-1))


STUDENT_MISTAKES = [
    ("clip-higher", "symmetric clip at ε_low", ch_symmetric_low),
    ("clip-higher", "symmetric clip at ε_high", ch_symmetric_high),
    ("clip-higher", "ε_low and ε_high swapped", ch_swapped),
    ("clip-higher", "ε_low and ε_high swapped", ch_by_sign_swapped),
    ("clip-higher", "log-ratio clipped", ch_log_ratio_clipped),
    ("clip-higher", "min of the ratios, then times Â", ch_min_of_ratios),
    ("clip-higher", "clamp without the min", ch_clamp_only),
    ("clip-higher", "clamp without the min", ch_clip_when_outside),
    ("clip-higher", "min without the clamp", ch_min_no_clamp),
    ("clip-higher", "max instead of min", ch_max),
    ("clip-higher", "detached ratio", ch_detached),
    ("clip-higher", "detached ratio", ch_rebuilt_with_torch_tensor),
    ("clip-higher", "clip on the upper side only", ch_upper_only),
    ("clip-higher", "clip on the lower side only", ch_lower_only),
    ("clip-higher", "clip range without the 1", ch_minus_eps_range),
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
    ("dynamic-sampling", "mean absolute deviation instead of std", ds_mean_absolute_deviation),
    ("dynamic-sampling", "every group kept", ds_no_filter),
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
    ("gspo-ratio", "divided by the batch's token count", gs_over_batch_tokens),
    ("gspo-ratio", "padding summed, real tokens counted", gs_mask_only_in_count),
    ("gspo-ratio", "detached", gs_no_grad),
    ("gspo-ratio", "per-token ratios", gs_token_ratios),
    ("gspo-ratio", "one ratio for the whole batch", gs_batch),
    ("gspo-ratio", "0/0 for an answer without tokens", gs_zero_over_zero),
    ("clip-higher", "clip range without the 1", ch_range_without_one),
    ("clip-higher", "clip range without the 1", ch_upper_edge_without_one),
    ("clip-higher", "the product r Â clipped", ch_product_clipped),
    ("clip-higher", "dual clip's floor added", ch_dual_clip),
    ("clip-higher", "ratio exponentiated", ch_ratio_read_as_log_ratio),
    ("clip-higher", "DAPO's 0.2 and 0.28 written in", ch_dapo_numbers),
    ("clip-higher", "max instead of min", ch_edges_by_sign_swapped),
    ("clip-higher", "clamp without the min", ch_where_sign_ignored),
    ("clip-higher", "max instead of min", ch_where_signs_swapped),
    ("clip-higher", "min of the ratios, then times Â", ch_abs_advantage),
    ("clip-higher", "ε_low and ε_high swapped", ch_library_eps_swapped),
    ("clip-higher", "sign flipped", ch_loss_per_token),
    ("dynamic-sampling", "std > eps: a group at exactly eps dropped", ds_strictly_above),
    ("dynamic-sampling", "G groups of B/G rewards", ds_chunk),
    ("dynamic-sampling", "G groups of B/G rewards", ds_view_g_rows),
    ("dynamic-sampling", "eps not used: a fixed threshold", ds_hard_coded_threshold),
    ("dynamic-sampling", "eps not used: a fixed threshold", ds_advantages_without_eps),
    ("dynamic-sampling", "eps not used: a fixed threshold", ds_std_of_advantages),
    ("dynamic-sampling", "only the all-wrong groups dropped", ds_some_right),
    ("dynamic-sampling", "only the all-wrong groups dropped", ds_mean_nonzero),
    ("dynamic-sampling", "only the all-right groups dropped", ds_not_all_right),
    ("dynamic-sampling", "constant only when std is exactly 0", ds_tiny_threshold),
    ("dynamic-sampling", "constant only when std is exactly 0", ds_isclose_to_first),
    ("dynamic-sampling", "constant only when std is exactly 0", ds_mean_differs_from_first),
    ("dynamic-sampling", "constant only when std is exactly 0", ds_largest_deviation),
    ("dynamic-sampling", "success rate strictly between 0 and 1", ds_sum_between),
    ("dynamic-sampling", "population std", ds_population_var_against_eps_squared),
    ("gspo-ratio", "|y_i| + 1 in the denominator", gs_count_plus_one),
    ("gspo-ratio", "s_i clipped", gs_clipped_like_gspo),
    ("gspo-ratio", "log-probs divided", gs_logps_divided),
    ("gspo-ratio", "0 for an answer without tokens", gs_empty_row_zero),
    ("gspo-ratio", "0/0 for an answer without tokens", gs_nanmean),
]


@pytest.mark.parametrize("exercise_id, name, wrong", STUDENT_MISTAKES,
                         ids=[f"{e}: {n} ({w.__name__})" for e, n, w in STUDENT_MISTAKES])
def test_a_students_wrong_version_gets_the_hint_that_names_it(exercise_id, name, wrong, capsys):
    mistake = next(m for m in exercises.EXERCISES[exercise_id].mistakes if m.name == name)
    assert engine.names_mistake(_refused(exercise_id, wrong, capsys), mistake), "the hint does not name it"


def test_every_catalogued_mistake_of_07_is_written_by_a_student_here():
    written = {(e, n) for e, n, _ in STUDENT_MISTAKES}
    for exercise_id in exercises.list_exercises(grpo_r1.TOPIC):
        for mistake in exercises.EXERCISES[exercise_id].mistakes:
            assert (exercise_id, mistake.name) in written, (exercise_id, mistake.name)


# Rarer wrong versions: no catalogued mistake names them, the generic hint (or the gradient's) is enough; each is
# refused all the same.


def ch_clipped_term_detached(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high).detach() * advantages)


def ch_upper_edge_eps_summed(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_low + eps_high) * advantages)


def ch_lower_edge_divided(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(1 / (1 + eps_low), 1 + eps_high) * advantages)


def ch_row_mean(ratio, advantages, eps_low, eps_high):
    return torch.min(ratio * advantages, ratio.clamp(1 - eps_low, 1 + eps_high) * advantages).mean(-1)


def ds_keepdim(rewards, group_size, eps):
    return rewards.view(-1, group_size).std(1, keepdim=True) >= eps


def ds_relative_std(rewards, group_size, eps):
    R = rewards.view(-1, group_size)
    return R.std(1) >= eps * R.abs().mean(1)


def gs_ratio_of_probability_sums(logp, old_logp, mask):
    return (logp.exp() * mask).sum(-1) / (old_logp.exp() * mask).sum(-1).clamp(min=1e-12) + (mask.sum(-1) == 0)


def gs_mean_logps_divided(logp, old_logp, mask):
    n = mask.sum(-1).clamp(min=1)
    return torch.where(mask.sum(-1) > 0, ((logp * mask).sum(-1) / n) / ((old_logp * mask).sum(-1) / n), 1.0)


def gs_over_length_squared(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum(-1) / mask.sum(-1).clamp(min=1) ** 2)


def gs_square_root(logp, old_logp, mask):
    return torch.exp(((logp - old_logp) * mask).sum(-1)).sqrt()


def gs_first_token_dropped(logp, old_logp, mask):
    m = mask[:, 1:]
    return torch.exp(((logp[:, 1:] - old_logp[:, 1:]) * m).sum(-1) / m.sum(-1).clamp(min=1))


def gs_largest_token_ratio(logp, old_logp, mask):
    largest = torch.where(mask.bool(), logp - old_logp, torch.full_like(logp, -torch.inf)).amax(-1)
    return torch.where(mask.sum(-1) > 0, torch.exp(largest), 1.0)


def gs_median(logp, old_logp, mask):
    return torch.stack([torch.exp((lp[m] - old[m]).median()) if m.any() else torch.ones((), dtype=lp.dtype)
                        for lp, old, m in zip(logp, old_logp, mask.bool())])


def gs_only_logp_masked(logp, old_logp, mask):
    return torch.exp(((logp * mask).sum(-1) - old_logp.sum(-1)) / mask.sum(-1).clamp(min=1))


RARE_WRONG = [("clip-higher", ch_clipped_term_detached), ("clip-higher", ch_upper_edge_eps_summed),
              ("clip-higher", ch_lower_edge_divided), ("clip-higher", ch_row_mean), ("dynamic-sampling", ds_keepdim),
              ("dynamic-sampling", ds_relative_std), ("gspo-ratio", gs_ratio_of_probability_sums),
              ("gspo-ratio", gs_mean_logps_divided), ("gspo-ratio", gs_over_length_squared),
              ("gspo-ratio", gs_square_root), ("gspo-ratio", gs_first_token_dropped),
              ("gspo-ratio", gs_largest_token_ratio), ("gspo-ratio", gs_median), ("gspo-ratio", gs_only_logp_masked)]


@pytest.mark.parametrize("exercise_id, wrong", RARE_WRONG, ids=[f"{e}: {w.__name__}" for e, w in RARE_WRONG])
def test_a_rarer_wrong_version_is_refused(exercise_id, wrong, capsys):
    _refused(exercise_id, wrong, capsys)


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


def ch_where_by_condition(ratio, advantages, eps_low, eps_high):
    high = (ratio > 1 + eps_high) & (advantages > 0)
    low = (ratio < 1 - eps_low) & (advantages < 0)
    out = torch.where(high, (1 + eps_high) * advantages, ratio * advantages)
    return torch.where(low, (1 - eps_low) * advantages, out)


def ch_negated_max(ratio, advantages, eps_low, eps_high):
    return -torch.max(-ratio * advantages, -ratio.clamp(1 - eps_low, 1 + eps_high) * advantages)


def ch_numpy_picks_the_branch(ratio, advantages, eps_low, eps_high):
    r, a = ratio.detach().numpy(), advantages.numpy()
    bound = np.clip(r, 1 - eps_low, 1 + eps_high)
    clipped_smaller = torch.from_numpy(bound * a < r * a)
    return torch.where(clipped_smaller, torch.from_numpy(bound) * advantages, ratio * advantages)


def ch_star_args(*args):
    ratio, advantages, *eps = args
    return torch.minimum(ratio * advantages, ratio.clip(1 - eps[0], 1 + eps[1]) * advantages)


def ch_in_place_on_a_copy(ratio, advantages, eps_low, eps_high):
    clipped = ratio.clone()
    clipped.clamp_(1 - eps_low, 1 + eps_high)
    return torch.minimum(ratio * advantages, clipped * advantages)


def ch_float64_tensors_for_the_edges(ratio, advantages, eps_low, eps_high):
    r, a = ratio.to(torch.float64), advantages.double()
    low, high = torch.tensor(1 - eps_low, dtype=torch.float64), torch.tensor(1 + eps_high, dtype=torch.float64)
    return torch.minimum(r * a, torch.maximum(torch.minimum(r, high), low) * a)


def ds_via_grpo_advantages(rewards, group_size, eps):
    advantages = losses.grpo_advantages(rewards, group_size, eps=eps)  # zeroes exactly the groups with std < eps
    return (advantages.view(-1, group_size) != 0).any(1)


def ds_unfold(rewards, group_size, eps):
    return ~(rewards.unfold(0, group_size, group_size).std(dim=-1) < eps)


def ds_std_by_hand(rewards, group_size, eps):
    R = rewards.reshape(len(rewards) // group_size, group_size)
    return (((R - R.mean(1, keepdim=True)) ** 2).sum(1) / (group_size - 1)).sqrt() >= eps


def ds_python_floats(rewards, group_size, eps):
    keep = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start:start + group_size].tolist()
        mean = sum(group) / len(group)
        keep.append(math.sqrt(sum((x - mean) ** 2 for x in group) / (len(group) - 1)) >= eps)
    return torch.tensor(keep, dtype=torch.bool)


def ds_std_mean_and_extra_keywords(rewards, group_size, eps, **unused):
    std, _ = torch.std_mean(rewards.view(-1, group_size), dim=1)
    return std.ge(eps)


def gs_nanmean_then_zero(logp, old_logp, mask):
    mean = (logp - old_logp).masked_fill(~mask.bool(), float("nan")).nanmean(-1)
    return torch.exp(torch.nan_to_num(mean, nan=0.0))


def gs_two_masked_sums(logp, old_logp, mask):
    keep = mask.bool()
    new, old = torch.where(keep, logp, 0.0).sum(-1), torch.where(keep, old_logp, 0.0).sum(-1)
    return torch.exp((new - old) / keep.sum(-1).clamp(min=1e-8))


def gs_empty_rows_replaced(logp, old_logp, mask):
    n = mask.sum(-1)
    s = torch.exp(((logp - old_logp) * mask).sum(-1) / n)  # 0/0 = NaN on an empty row, replaced just below
    return torch.where(n > 0, s, torch.ones_like(s))


def gs_float64_loop_into_a_copy(logp, old_logp, mask):
    out = torch.ones(logp.shape[0], dtype=torch.float64).clone()
    for i in range(logp.shape[0]):
        real = mask[i] > 0
        if real.any():
            out[i] = torch.exp((logp[i][real].double() - old_logp[i][real].double()).mean())
    return out


def gs_log_of_token_ratios(logp, old_logp, mask):
    keep = mask.bool()
    token_ratios = torch.where(keep, (logp - old_logp).exp(), torch.ones_like(logp))
    return torch.exp(token_ratios.log().sum(-1) / keep.sum(-1).clamp(min=1))


def gs_einsum(logp, old_logp, mask):
    m = mask.to(logp.dtype)
    return torch.exp(torch.einsum("bt,bt->b", logp - old_logp, m) / m.sum(-1).clamp(min=1))


CORRECT += [("clip-higher", ch_where_by_condition), ("clip-higher", ch_negated_max),
            ("clip-higher", ch_numpy_picks_the_branch), ("clip-higher", ch_star_args),
            ("clip-higher", ch_in_place_on_a_copy), ("clip-higher", ch_float64_tensors_for_the_edges),
            ("dynamic-sampling", ds_via_grpo_advantages), ("dynamic-sampling", ds_unfold),
            ("dynamic-sampling", ds_std_by_hand), ("dynamic-sampling", ds_python_floats),
            ("dynamic-sampling", ds_std_mean_and_extra_keywords), ("gspo-ratio", gs_nanmean_then_zero),
            ("gspo-ratio", gs_two_masked_sums), ("gspo-ratio", gs_empty_rows_replaced),
            ("gspo-ratio", gs_float64_loop_into_a_copy), ("gspo-ratio", gs_log_of_token_ratios),
            ("gspo-ratio", gs_einsum)]


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


def test_a_dynamic_sampling_case_has_a_group_exactly_at_eps():
    """The filter keeps std ≥ ε, as grpo_advantages zeroes only std < ε: a group exactly at ε has a signal (nonzero
    Â) and must be kept. With 0/1 rewards the boundary is reachable, not float noise: 1 right of 4 has sample std
    exactly 0.5 in floating point, so a case at ε = 0.5 tells `std > eps` from `std >= eps` with no rounding."""
    at_eps = False
    for case in _cases("dynamic-sampling"):
        std = case.inputs["rewards"].view(-1, case.inputs["group_size"]).std(1)
        at_eps |= bool((std == case.inputs["eps"]).any())
    assert at_eps


def _in_float32(fn):
    def wrapped(*args):
        return fn(*(a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args)).double()
    return wrapped


@pytest.mark.parametrize("exercise_id", ["clip-higher", "gspo-ratio"])
def test_float32_arithmetic_is_accepted_where_it_loses_no_visible_digit(exercise_id, capsys):
    """As for kl-reward and grpo-loss (unlike ppo-clip, dpo-loss, bradley-terry, whose cases cancel large numbers):
    clip-higher multiplies given numbers, r·Â, so float32 is off by ~1e-7 relative, inside the tolerance; GSPO's
    s_i ≈ 1 is off by at most float32's spacing at |log p| (relative), under 1e-6 for per-token log-probs above -16.
    A case that refused it would need inputs no rollout gives: sampled tokens below log p = -16 rounded the wrong
    way, or r within 1e-7 of a clip edge (refused then by its gradient, with no word about float32)."""
    assert exercises.check_function(exercise_id, _in_float32(exercises.EXERCISES[exercise_id].solution_fn))
    assert "✓" in capsys.readouterr().out
