"""The losses' contract: the validity rules every chapter shares, checked before anything is computed.

Shapes and masks
----------------
B is the number of sequences (completions) in the batch, T the number of response positions.
Per-token tensors are (B, T); per-sequence tensors are (B,). ``mask`` is a (B, T) float or
bool tensor that is 1/True on real response tokens and 0/False on padding. Padding can hold
anything, even inf or NaN: every function first overwrites padded entries with 0 using
``torch.where`` (a multiplication would turn ``0 * inf`` into NaN), so padding never changes a
value, and the gradient that flows back into a padded entry is exactly 0.

Empty and non-finite inputs
---------------------------
One rule for every function: what is computed elementwise (advantages, ``gae``, ``kl_k*``) maps an
empty batch to an empty result; a loss (every function named ``*_loss``, the per-token and per-pair ones
included) raises a ValueError naming the argument when it is empty (a mean over nothing is 0/0). An inf or
NaN on a REAL token of a loss's input is an error naming the argument and the first such position, since it
would turn the loss and every gradient into NaN; padding may hold anything, as said above.
"""

from __future__ import annotations

import torch
from torch import Tensor

from minirlhf.checks import check_count


def _check_same_shape(**tensors: Tensor | None) -> None:
    """Raise a ValueError listing every argument and its shape unless all shapes agree."""
    shapes = {name: tuple(t.shape) for name, t in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        listing = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise ValueError(f"shape mismatch: {listing} must all have the same shape")


def _check_real_tokens(mask: Tensor | None, allow_empty: bool = False, **tensors: Tensor | None) -> None:
    """Raise a ValueError naming the argument that is empty (unless `allow_empty`: an elementwise function maps
    empty to empty), or that holds inf/NaN on a real token (mask = 1); without a mask every entry counts as real."""
    for name, t in tensors.items():
        if t is None:
            continue
        if t.numel() == 0 and not allow_empty:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)}): a loss needs at least one sequence")
        bad = ~torch.isfinite(t.detach())
        if mask is not None:
            bad = bad & mask.bool()
        if bad.any():
            first = tuple(int(i) for i in bad.nonzero()[0])
            raise ValueError(f"{name} holds {int(bad.sum())} inf/NaN value(s) on real tokens, first at index {first} "
                             f"({t[first].item()})")


def _check_finite_result(loss_name: str, result: Tensor, mask: Tensor | None = None, **log_ratios: Tensor) -> None:
    """A loss of finite inputs may still overflow float32: exp of a log-ratio beyond ~88 (PPO's and GRPO's r_t), or
    the square or difference of values beyond ~1e19 (IPO, Bradley–Terry). Raise a ValueError naming the loss and the
    largest |log-ratio| on a real token, instead of returning an inf that turns every gradient into NaN."""
    if torch.isfinite(result.detach()).all():
        return
    sizes = []
    for name, t in log_ratios.items():
        t = t.detach()
        real = t[mask.bool()] if mask is not None else t.reshape(-1)
        sizes.append(f"|{name}| reaches {real.abs().max().item():.3g}")
    raise ValueError(f"{loss_name} overflows float32 on finite inputs ({'; '.join(sizes)}): the two policies it "
                     "compares are too far apart for this loss (a stale or mismatched p_θold / p_ref, or scores of "
                     "another scale)")


def _zero_padding(mask: Tensor, *tensors: Tensor | None) -> tuple[Tensor | None, ...]:
    """Replace padded entries with 0 (torch.where, so inf/NaN there cannot leak into gradients).
    A None passes through unchanged."""
    keep = mask.bool()
    return tuple(None if t is None else torch.where(keep, t, torch.zeros_like(t)) for t in tensors)


def _per_token_advantages(advantages: Tensor, mask: Tensor) -> Tensor:
    """Accept (B,) sequence-level or (B, T) token-level advantages; return a detached (B, T)."""
    if advantages.dim() == 1 and advantages.shape[0] == mask.shape[0]:
        advantages = advantages[:, None].expand_as(mask)  # (B,) -> (B, T)
    _check_same_shape(advantages=advantages, mask=mask)
    return advantages.detach()


def check_group_size(group_size: int) -> None:
    """G >= 2: the group is the baseline (GRPO's mean and std, RLOO's mean of the others), and one answer has none."""
    check_count("group_size", group_size, minimum=2, why="a group of one has no baseline")


def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """Check a (B,) reward vector and reshape it to (B / G, G): one row per prompt."""
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (B,), got shape {tuple(rewards.shape)}")
    if not torch.isfinite(rewards).all():
        raise ValueError("rewards contain NaN or inf")
    check_group_size(group_size)
    if rewards.numel() % group_size:
        raise ValueError(f"group_size must divide the batch size {rewards.numel()}, got {group_size!r}")
    return rewards.view(-1, group_size)


def _check_overflow(advantages: Tensor, rewards: Tensor) -> Tensor:
    """Finite rewards can still overflow float32 when summed for a mean (|R| near 3.4e38): say so."""
    if not torch.isfinite(advantages).all():
        raise ValueError(
            f"advantages overflow float32: rewards reach {rewards.abs().max().item():.3g}, too large to average; "
            f"rescale the reward function (|R| within ~1e3 is plenty)"
        )
    return advantages
