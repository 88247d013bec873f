"""pass@k: the chance that at least one of k sampled answers to a problem is right, estimated without bias from
n ≥ k samples per problem (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", arXiv:2107.03374).

pass@1 is the accuracy of one sample; pass@k for large k asks whether the right answer is anywhere in what the
policy can sample. RL on a 0/1 reward mostly sharpens (pass@1 rises, as probability moves onto answers the model
could already reach) more than it widens (pass@k for large k, the set of reachable answers, may even shrink).

`pass_at_k` is the estimator of one problem; `count_correct` samples n answers per prompt and counts the right
ones; `mean_pass_at_k` averages the estimator over problems. The tasks apply them to their held-out split:
`arithmetic.held_out_pass_at_k`, `lab.held_out_pass_at_k`; `held_out.run_pass_at_k` names them by plain values, as
`python -m minirlhf pass-at-k` does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from minirlhf.checks import check_count, check_interval, check_positive
from minirlhf.sampling import sample
from minirlhf.tasks import RewardFn, call_reward

PASS_REWARD = 1.0  # a sample passes when its reward reaches this: the verifiers' 1.0 for a right answer


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from n samples of which c are right (Chen et al. 2021, eq. 1):

        pass@k = 1 - C(n - c, k) / C(n, k) = 1 - Π_{i = n - c + 1}^{n} (1 - k / i)

    C(n - c, k) / C(n, k) is the chance that k samples drawn without replacement from the n are all wrong. The
    product is the same ratio without the huge binomials (C(2000, 1000) has 600 digits; as floats they overflow
    from n ≈ 1030). It is 1 when n - c < k: every k-subset then holds a right sample. k = 1 gives c / n. Not
    1 - (1 - c/n)^k, which draws with replacement and is biased low.
    """
    check_count("n", n)
    check_count("c", c, minimum=0)
    check_count("k", k)
    if c > n or k > n:
        raise ValueError(f"pass_at_k needs c ≤ n and k ≤ n (n samples, c right, subsets of k), got n={n}, c={c}, "
                         f"k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def mean_pass_at_k(counts: Sequence[int], n: int, ks: Sequence[int]) -> dict[str, float]:
    """pass@k averaged over problems, {"pass@k": value} for each k of ``ks``: ``counts`` holds the number of right
    answers among the n samples of each problem."""
    if not counts:
        raise ValueError("counts is empty: pass@k needs at least one problem")
    check_ks(ks, n)
    return {f"pass@{k}": sum(pass_at_k(n, c, k) for c in counts) / len(counts) for k in ks}


@torch.no_grad()
def count_correct(
    model,
    tokenizer,
    prompts: Sequence[str],
    reward_fn: RewardFn,
    n: int,
    max_new_tokens: int,
    temperature: float = 1.0,
    seed: int = 0,
    prompts_per_batch: int = 64,
    pass_reward: float = PASS_REWARD,
) -> list[int]:
    """For each prompt, how many of n answers sampled at ``temperature`` earn a reward ≥ ``pass_reward``. The
    samples of one prompt share its forward pass (``sample(group_size=n)``); one seeded generator draws them all,
    so a (model, prompts, seed) gives the same counts every time."""
    check_count("n", n)
    check_count("prompts_per_batch", prompts_per_batch)
    check_positive("temperature", temperature)
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    counts = []
    for start in range(0, len(prompts), prompts_per_batch):
        chunk = list(prompts[start : start + prompts_per_batch])
        rollout = sample(model, tokenizer, chunk, group_size=n, max_new_tokens=max_new_tokens,
                         temperature=temperature, generator=generator)
        rewards = call_reward(reward_fn, rollout.prompts, rollout.completions)  # (len(chunk) · n,)
        counts += (rewards >= pass_reward).view(len(chunk), n).sum(-1).tolist()
    return counts


def check_ks(ks: Sequence[int], n: int) -> None:
    """Each k of pass@k is a count in [1, n]: no estimate of k samples exists from fewer than k."""
    if not ks:
        raise ValueError("ks is empty: give at least one k")
    for k in ks:
        check_count("k", k)
        check_interval("k", k, 1, n, why=f"pass@k is estimated from the n = {n} samples of each problem")
