"""SFT, DPO, GRPO and PPO for a few steps on the tiny model, for tests/test_distributed.py.

    python tests/_dist_job.py OUT                                                   # one process
    accelerate launch --multi_gpu --num_processes 2 tests/_dist_job.py OUT          # two (gloo on CPU)

Every process writes OUT/rank<r>-of<n>.pt: each method's logged rows and its final parameters (flattened).
The global batches are the same whatever the number of processes, so the runs must agree.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import torch

from minirlhf.data import load_preference_pairs
from minirlhf.distributed import Runtime
from minirlhf.models import disable_dropout, load_model
from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.sft import SFTConfig, train_sft

COMMON = dict(device="cpu", eval_every=1000, progress=False)


def small_task():
    """The arithmetic task with a 32-problem held-out set (evaluation is not what is tested here)."""
    held_out = arithmetic.problems("test")[:32]
    return dataclasses.replace(
        arithmetic.task(), evaluate=lambda m, t: {"accuracy": arithmetic.accuracy(m, t, held_out)}
    )


def run_all() -> dict[str, dict]:
    results = {}

    model, tokenizer = load_model("tiny", device="cpu")
    disable_dropout(model)  # dropout masks are per row: with dropout, a share of a batch is not the same batch
    _, _, history = train_sft(
        arithmetic.sft_examples()[:64], SFTConfig(steps=3, batch_size=8, lr=1e-3, **COMMON), model=model,
        tokenizer=tokenizer,
    )
    results["sft"] = (history, model)

    pairs = load_preference_pairs("sentiment", "train")[:40]
    model, _, history = train_dpo(pairs, DPOConfig(steps=3, batch_size=8, eval_prompts=0, **COMMON))
    results["dpo"] = (history, model)

    config = GRPOConfig(steps=3, prompts_per_step=4, group_size=4, beta=0.04, scale="batch", **COMMON)
    model, _, history = train_grpo(small_task(), config)
    results["grpo"] = (history, model)

    config = PPOConfig(steps=2, prompts_per_step=8, group_size=2, minibatch_size=None, epochs=2, **COMMON)
    model, _, history = train_ppo(small_task(), config)
    results["ppo"] = (history, model)

    return {
        name: {"history": list(history), "params": torch.cat([p.detach().flatten() for p in model.parameters()])}
        for name, (history, model) in results.items()
    }


if __name__ == "__main__":
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    runtime = Runtime(device="cpu")
    torch.save(run_all(), out / f"rank{runtime.rank}-of{runtime.world_size}.pt")
