"""Best-of-N sampling as a baseline on the reward–KL plane.

Draw N answers from p, keep the one with the highest reward. The policy this defines, p_N, moves away from p by

    KL(p_N || p) <= log N - (N - 1) / N                  (Stiennon et al., 2020; Beirami et al., 2024)

for every base policy p. The right-hand side, long quoted as the KL itself, is an upper bound (Beirami et al.,
arXiv:2401.01879): it is reached only in the limit where no single outcome keeps a non-negligible probability (many
outcomes, each unlikely), and it overstates the KL wherever some answer is likely, distinct rewards or not.
`best_of_n_probs` gives p_N exactly for a categorical p (the chance that outcome k is the best of N draws is
F(k)^N - F(k-1)^N, F the cumulative probability in reward order), so the bound and the exact KL can be compared on
a toy.
"""

from __future__ import annotations

import math

import torch

from minirlhf.checks import check_count, check_interval


def kl_bound(n: int) -> float:
    """log N - (N - 1)/N: an upper bound on the KL of best-of-N from any base policy, reached only when no single
    outcome keeps a non-negligible probability (Beirami et al., 2024)."""
    check_count("n", n)
    return math.log(n) - (n - 1) / n


def best_of_n_probs(probs: torch.Tensor, rewards: torch.Tensor, n: int) -> torch.Tensor:
    """p_N(k) = F(k)^N - F(k-1)^N for a categorical `probs` (K,) whose outcomes have distinct `rewards` (K,)."""
    check_count("n", n)
    if torch.unique(rewards).numel() != rewards.numel():
        raise ValueError("rewards must be distinct: with ties, which answer best-of-N keeps is up to the tie-break")
    order = torch.argsort(rewards)
    cdf = torch.cumsum(probs[order], 0).clamp(max=1.0)  # F(k) in reward order
    below = torch.cat([cdf.new_zeros(1), cdf[:-1]])  # F(k - 1)
    out = torch.empty_like(probs)
    out[order] = cdf**n - below**n
    return out


def kl(p: torch.Tensor, q: torch.Tensor) -> float:
    """KL(p || q) = Σ p log p/q over the outcomes where p > 0."""
    support = p > 0
    return float((p[support] * (p[support].log() - q[support].log())).sum())


def expected_best_of_n(proxy: torch.Tensor, gold: torch.Tensor, n: int) -> tuple[float, float]:
    """E[proxy] and E[gold] of the answer that best-of-`n` keeps when it ranks by `proxy`, estimated without bias
    from M >= n samples per prompt, `proxy` and `gold` (P, M), averaged over the P prompts.

    Instead of drawing subsets, every sample is weighted by the chance that it is the proxy's best of n drawn
    without replacement from the M: the i-th lowest (i = 1..M) is the best when the other n - 1 come from the
    i - 1 below it, C(i-1, n-1) / C(M, n) (Nakano et al., 2021, WebGPT). Ties are broken by position."""
    if proxy.shape != gold.shape or proxy.dim() != 2:
        raise ValueError(f"proxy and gold must both be (P, M), got {tuple(proxy.shape)} and {tuple(gold.shape)}")
    M = proxy.shape[1]
    check_count("n", n)
    check_interval("n", n, 1, M, why="M, the samples per prompt")
    order = torch.argsort(proxy, dim=1, stable=True)  # (P, M) ascending
    weights = torch.tensor([math.comb(i, n - 1) / math.comb(M, n) for i in range(M)], dtype=torch.float64)
    expected = [float((x.gather(1, order).double() * weights).sum(1).mean()) for x in (proxy, gold)]
    return expected[0], expected[1]
