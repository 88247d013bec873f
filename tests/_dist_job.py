"""Every trainer for a few steps on the tiny model, for tests/test_distributed.py: between them they weigh every
kind of loss `Runtime.share` knows (token mean, mean over rows, Dr. GRPO's constant B · T_max).

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
from minirlhf.trainers.kto import train_kto
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.reward_model import RewardModel, RewardModelConfig, train_reward_model
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
    # RPO's NLL term is per chosen token of the global batch (a normaliser over every process's pairs)
    model, _, history = train_dpo(pairs, DPOConfig(steps=3, batch_size=8, eval_prompts=0, rpo_alpha=0.5, **COMMON))
    results["dpo"] = (history, model)
    model, _, history = train_kto(pairs[:12], DPOConfig(loss_type="kto", steps=2, batch_size=4, eval_prompts=0,
                                                        **COMMON))
    results["kto"] = (history, model)
    # 4 pairs a step from 10: the third batch is the epoch's last 2, one on each process
    torch.manual_seed(0)  # the score head's initial weights
    reward_model = RewardModel.from_pretrained_lm("tiny", device="cpu")
    disable_dropout(reward_model)
    reward_model, _, history = train_reward_model(pairs[:10], RewardModelConfig(steps=3, batch_size=4, **COMMON),
                                                  model=reward_model)
    results["reward_model"] = (history, reward_model)

    config = GRPOConfig(steps=3, prompts_per_step=4, group_size=4, beta=0.04, scale="batch", **COMMON)
    model, _, history = train_grpo(small_task(), config)
    results["grpo"] = (history, model)

    config = GRPOConfig.from_recipe("dr-grpo", steps=2, prompts_per_step=4, group_size=4, **COMMON)  # B · T_max
    model, _, history = train_grpo(small_task(), config)
    results["dr-grpo"] = (history, model)

    # gradient accumulation on top of the processes: each process's 8 rows in two micro-batches, a token mean
    config = GRPOConfig(steps=2, prompts_per_step=4, group_size=4, gradient_accumulation_steps=2, **COMMON)
    model, _, history = train_grpo(small_task(), config)
    results["grpo-accumulated"] = (history, model)

    config = ReinforceConfig(baseline="reinforce++", steps=2, prompts_per_step=4, group_size=2, beta=0.05, **COMMON)
    model, _, history = train_reinforce(small_task(), config)  # per-token advantages, a token mean
    results["reinforce++"] = (history, model)

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
