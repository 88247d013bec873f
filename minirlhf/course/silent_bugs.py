"""Find the silent bug: short GRPO runs on the tiny GPT-2 with a bug planted, read from their diagnostic curves.

    from minirlhf.course import silent_bugs
    curves = silent_bugs.run("A", steps=8)           # run A has one planted bug (or none); a dict of curves
    silent_bugs.name_the_bug("A", "stale-old-logprobs")  # prints right or wrong, and what gives the bug away

Each run is GRPO with β > 0 (a reference model), two epochs over each batch, and the loss of minirlhf.losses: nothing
crashes, the loss stays finite. Only the curves differ. They are the ones a trainer logs: the sampled reward,
`kl` (the k3 estimate against the reference the run uses), `clip_frac` and `ratio_mean` over the second epoch's
update (where the policy has moved since sampling), and `kl_to_start`, the sampled KL to the starting policy,
measured apart from the run.
"""

from __future__ import annotations

import torch

from minirlhf import losses
from minirlhf.logprobs import response_logprobs
from minirlhf.models import disable_dropout, frozen_copy, load_model
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic

BUGS = {
    "none": "no bug: the reference run.",
    "sign-flipped": "the advantages have the wrong sign: the sampled reward falls from the first steps, while "
                    "every other curve looks healthy.",
    "reference-drifts": "p_ref is the live policy, rescored at every step, instead of a frozen copy of the start: "
                        "the logged kl stays near 0 however far the policy goes, while kl_to_start grows. The "
                        "leash is attached to the dog.",
    "stale-old-logprobs": "the old log-probs are recomputed with the current weights right before each update, "
                          "instead of kept from sampling time: ratio_mean is exactly 1 and clip_frac exactly 0 even "
                          "in the second epoch, so the clip never acts.",
}
RUNS = {"A": "stale-old-logprobs", "B": "none", "C": "sign-flipped", "D": "reference-drifts"}  # what the student sees
CURVES = ("reward", "kl", "kl_to_start", "clip_frac", "ratio_mean")


def run(name: str, steps: int = 8, prompts_per_step: int = 16, group_size: int = 8, epochs: int = 2,
        beta: float = 0.1, lr: float = 1e-3, seed: int = 0, model_name: str = "tiny-sft") -> dict[str, list[float]]:
    """Train a fresh copy of `model_name` for `steps` GRPO steps with the bug of run `name` (a key of RUNS, or of
    BUGS to plant one by name); return each curve of CURVES, one value per step."""
    bug = RUNS.get(name, name)
    if bug not in BUGS:
        raise ValueError(f"unknown run {name!r}; runs: {', '.join(RUNS)}; bugs: {', '.join(BUGS)}")
    model, tokenizer = load_model(model_name, device="cpu")
    disable_dropout(model)
    start, ref = frozen_copy(model), frozen_copy(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(seed)
    pool = arithmetic.problems("train")
    order = torch.randint(len(pool), (steps, prompts_per_step), generator=torch.Generator().manual_seed(seed + 1))
    curves: dict[str, list[float]] = {key: [] for key in CURVES}
    for i in range(steps):
        rollout = sample(model, tokenizer, [pool[j].prompt for j in order[i].tolist()], group_size=group_size,
                         max_new_tokens=arithmetic.MAX_NEW_TOKENS, generator=generator)
        rewards = torch.tensor(arithmetic.correctness_reward(rollout.prompts, rollout.completions))
        advantages = losses.grpo_advantages(rewards, group_size) * (-1 if bug == "sign-flipped" else 1)
        batch = (rollout.input_ids, rollout.attention_mask, rollout.response_mask)
        mask = rollout.response_mask
        with torch.no_grad():
            ref_logp = response_logprobs(model if bug == "reference-drifts" else ref, *batch)
            start_logp = response_logprobs(start, *batch)
        for _ in range(epochs):
            logp = response_logprobs(model, *batch)
            old_logp = logp.detach() if bug == "stale-old-logprobs" else rollout.logprobs
            loss, stats = losses.grpo_loss(logp, old_logp, ref_logp, advantages, mask, eps=0.2, beta=beta,
                                           aggregation="token-mean")
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
        curves["reward"].append(rewards.mean().item())
        curves["kl"].append(stats["kl"])
        curves["kl_to_start"].append(losses.masked_mean(losses.kl_k1(rollout.logprobs, start_logp), mask).item())
        curves["clip_frac"].append(stats["clip_frac"])  # of the last epoch's update
        curves["ratio_mean"].append(stats["ratio_mean"])
    return curves


def name_the_bug(name: str, answer: str) -> bool:
    """Print whether `answer` (a key of BUGS) is the bug planted in run `name`, and what gives it away."""
    if name not in RUNS:
        raise ValueError(f"unknown run {name!r}; runs: {', '.join(RUNS)}")
    if answer not in BUGS:
        print(f"{answer!r} is not one of the bugs: {', '.join(BUGS)}")
        return False
    if answer == RUNS[name]:
        print(f"✓ run {name}: {BUGS[answer]}")
        return True
    print(f"✗ run {name} is not '{answer}'. Compare its curves with the healthy ones again: which one is flat, "
          f"exactly 1 or 0, or going the wrong way?")
    return False
