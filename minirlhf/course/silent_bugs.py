"""Find the silent bug: short GRPO runs on the tiny GPT-2 with a bug planted, read from their diagnostic curves.

    from minirlhf.course import silent_bugs
    curves = silent_bugs.run("A", steps=8)           # run A has one planted bug (or none); a dict of curves
    silent_bugs.name_the_bug("A", "stale-old-logprobs")  # prints right or wrong, and what gives the bug away

Each run is GRPO with β > 0 (a reference model), two epochs over each batch, and the loss of minirlhf.losses: nothing
crashes, the loss stays finite. Only the curves differ. They are the ones a trainer logs: the sampled reward,
`kl` (the k3 estimate against the reference the run uses), `clip_frac` and `ratio_mean` over the second epoch's
update (where the policy has moved since sampling), `kl_to_start`, the sampled KL to the starting policy,
measured apart from the run, and `logp_max_abs_diff`, the `--debug` check `diagnostics.check_logprobs` of the
first epoch (before any update the training forward must reproduce the sampling log-probs). What a `--debug` run
would print, its warnings at the first step that had any, is kept per run in `DEBUG_WORDS`.
"""

from __future__ import annotations

import warnings

import torch

from minirlhf import diagnostics, losses
from minirlhf.logprobs import logprobs_on_response, response_logprobs
from minirlhf.models import disable_dropout, frozen_copy, load_model
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic

BUGS = {
    "none": "no bug: the reference run.",
    "padding-counted": "the training forward leaves out the position ids, so GPT-2 counts the left padding of a "
                       "short prompt as positions: on every batch that holds a left-padded prompt its log-probs "
                       "differ from the sampling ones before any update (logp_max_abs_diff far above 1e-3, and "
                       "--debug warns 'position ids that count padding').",
    "sign-flipped": "the advantages have the wrong sign: the sampled reward falls from the first steps, while "
                    "every other curve looks healthy.",
    "reference-drifts": "p_ref is the live policy, rescored at every step, instead of a frozen copy of the start: "
                        "the logged kl stays near 0 however far the policy goes, while kl_to_start grows. The "
                        "leash is attached to the dog.",
    "stale-old-logprobs": "the old log-probs are recomputed with the current weights right before each update, "
                          "instead of kept from sampling time: ratio_mean is exactly 1 and clip_frac exactly 0 even "
                          "in the second epoch, so the clip never acts.",
}
RUNS = {"A": "stale-old-logprobs", "B": "none", "C": "sign-flipped", "D": "reference-drifts",
        "E": "padding-counted"}  # what the student sees
CURVES = ("reward", "kl", "kl_to_start", "clip_frac", "ratio_mean", "logp_max_abs_diff")
DEBUG_WORDS: dict[str, list[str]] = {}  # run name -> the DiagnosticWarning messages of its first step that had any


def logprobs_counting_padding(model: torch.nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                              response_mask: torch.Tensor) -> torch.Tensor:
    """The padding bug: a forward without position ids, so GPT-2 numbers the columns 0, 1, 2, ... padding included,
    and a left-padded prompt is seen shifted by its padding (sampling counted real tokens only). (B, T)."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits
    return logprobs_on_response(logits, input_ids, response_mask)


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
    score = logprobs_counting_padding if bug == "padding-counted" else response_logprobs
    curves: dict[str, list[float]] = {key: [] for key in CURVES}
    words: list[str] = []
    for i in range(steps):
        rollout = sample(model, tokenizer, [pool[j].prompt for j in order[i].tolist()], group_size=group_size,
                         max_new_tokens=arithmetic.MAX_NEW_TOKENS, generator=generator)
        rewards = torch.tensor(arithmetic.correctness_reward(rollout.prompts, rollout.completions))
        advantages = losses.grpo_advantages(rewards, group_size) * (-1 if bug == "sign-flipped" else 1)
        batch = (rollout.input_ids, rollout.attention_mask, rollout.response_mask)
        mask = rollout.response_mask
        with torch.no_grad():
            ref_logp = score(model if bug == "reference-drifts" else ref, *batch)
            start_logp = response_logprobs(start, *batch)  # measured apart from the run, without its bugs
        for epoch in range(epochs):
            logp = score(model, *batch)
            if epoch == 0:  # what `--debug` checks before the first update
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", diagnostics.DiagnosticWarning)
                    debug = diagnostics.check_logprobs(logp.detach(), rollout.logprobs, mask)
                words = words or [str(w.message) for w in caught]
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
        curves["logp_max_abs_diff"].append(debug["debug/logp_max_abs_diff"])
    DEBUG_WORDS[name] = words
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
          f"exactly 1 or 0, far above 0 before any update, or going the wrong way?")
    return False
