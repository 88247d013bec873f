"""Live diagnostics for online RL: cheap checks that catch the classic silent bugs, each warning naming its cause.

Off by default (they cost one extra forward pass per step); the online trainers run them with `debug=True`
(CLI `--debug`), log their numbers under "debug/..." and warn with a `DiagnosticWarning` when one looks wrong:

    check_logprobs    before the first update p_θ = p_θold: the training forward must reproduce the sampling
                      log-probs (max |Δ log p| ~ 0, importance ratio 1). Padding/position ids, a temperature
                      that differs between sampling and loss, dropout left on, or shifted masks all break it.
    check_groups      share of groups whose rewards are all equal (no signal), and whether the advantages
                      average to zero within each group (group-relative baselines must).
    check_endings     EOS and truncation rates: most completions cut at max_new_tokens is rarely intended.
    check_kl_sign     the sampled k1 estimate of KL(p_θ || p_ref) must not be negative on average.
"""

from __future__ import annotations

import math
import warnings

import torch

from minirlhf.losses import CONSTANT_GROUP_STD, kl_k1, masked_mean, masked_sum

LOGP_TOLERANCE = 1e-3  # float32 recomputation differs by ~1e-6; bf16/fp16 autocast by up to ~1e-2
ZERO_VARIANCE_LIMIT = 0.9  # warn when almost no group carries a signal (~40% is normal on arithmetic)
TRUNCATION_LIMIT = 0.5  # warn when more than half of the completions never reached EOS


class DiagnosticWarning(UserWarning):
    """A live diagnostic found something that usually means a bug or a misconfigured run."""


def _warn(message: str) -> None:
    warnings.warn(message, DiagnosticWarning, stacklevel=3)


def check_logprobs(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Training-forward log-probs (B, N) vs the sampling ones (B, N), before any update: they must agree."""
    diff = torch.where(mask.bool(), (logp - old_logp).abs(), 0.0)
    metrics = {
        "debug/logp_max_abs_diff": diff.max().item() if diff.numel() else 0.0,
        "debug/logp_mismatch_frac": masked_mean((diff > LOGP_TOLERANCE).float(), mask).item(),
        "debug/ratio_mean": masked_mean(torch.exp(logp - old_logp), mask).item(),
    }
    if metrics["debug/logp_max_abs_diff"] > LOGP_TOLERANCE:
        _warn(
            f"the training forward does not reproduce the sampling log-probs before any update (max |Δ log p| = "
            f"{metrics['debug/logp_max_abs_diff']:.3g}, mean ratio {metrics['debug/ratio_mean']:.4f}, should be 1): "
            "likely position ids that count padding, a temperature that differs between sampling and the loss, "
            "dropout left on in the training forward, or a response mask shifted by one token"
        )
    return metrics


def zero_std_groups(rewards: torch.Tensor, group_size: int) -> float:
    """The share of groups (consecutive runs of G rewards) whose rewards are all equal (std below
    `losses.CONSTANT_GROUP_STD`, the rule `grpo_advantages` applies): their advantages are 0."""
    return (rewards.view(-1, group_size).std(-1) < CONSTANT_GROUP_STD).float().mean().item()


def check_groups(rewards: torch.Tensor, advantages: torch.Tensor | None, group_size: int) -> dict[str, float]:
    """Rewards (B,) in consecutive groups of G: the share of groups with no reward variance and, for group-relative
    advantages (B,) (GRPO, RLOO; None for others), the largest group mean, which must be 0."""
    if group_size < 2:
        return {}
    metrics = {"zero_std_groups": zero_std_groups(rewards, group_size)}
    if metrics["zero_std_groups"] > ZERO_VARIANCE_LIMIT:
        _warn(
            f"{metrics['zero_std_groups']:.0%} of the groups give every completion the same reward, "
            "so their advantages are 0 and they teach nothing: the task is too hard or too easy for this policy, "
            "the reward ignores the completion, or the temperature is too low for the group to differ"
        )
    if advantages is not None:
        means = advantages.view(-1, group_size).mean(-1).abs()
        metrics["debug/group_advantage_mean_max"] = means.max().item()
        if metrics["debug/group_advantage_mean_max"] > 1e-4 * max(1.0, advantages.abs().max().item()):
            _warn(
                f"advantages do not average to zero within groups (largest |group mean| = "
                f"{metrics['debug/group_advantage_mean_max']:.3g}): the rows of a group are not consecutive, or the "
                "advantages were computed with another group_size than the sampling used"
            )
    return metrics


def check_endings(ended_with_eos: torch.Tensor) -> dict[str, float]:
    """(B,) bool: did each completion end with EOS, or was it cut at max_new_tokens?"""
    eos_rate = ended_with_eos.float().mean().item()
    metrics = {"debug/eos_rate": eos_rate, "debug/truncation_rate": 1.0 - eos_rate}
    if metrics["debug/truncation_rate"] > TRUNCATION_LIMIT:
        _warn(
            f"{metrics['debug/truncation_rate']:.0%} of the completions were cut at max_new_tokens without EOS: "
            "max_new_tokens is too small for the task, or the tokenizer's EOS is not the token the model learned "
            "to end with; cut completions are scored as they are"
        )
    return metrics


def check_kl_sign(old_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """The k1 estimate Σ_t log p_θ/p_ref per sampled sequence has mean KL(p_θ || p_ref) >= 0 when the samples come
    from p_θ: significantly negative (mean + 3 standard errors < 0) means they do not, or p_ref is scored wrong."""
    per_sequence = masked_sum(kl_k1(old_logp, ref_logp), mask, dim=-1)  # (B,)
    mean = per_sequence.mean().item()
    stderr = per_sequence.std().item() / math.sqrt(per_sequence.numel()) if per_sequence.numel() > 1 else 0.0
    if mean + 3 * stderr < 0:
        _warn(
            f"the sampled estimate of KL(p_θ || p_ref) is negative ({mean:.3g} ± {stderr:.2g} nats per sequence): "
            "the samples were not drawn from p_θ (stale or reused rollouts), p_ref is scored at another "
            "temperature or with other position ids than p_θ, or the masks of the two disagree"
        )
    return {"debug/kl_k1_mean": mean}
