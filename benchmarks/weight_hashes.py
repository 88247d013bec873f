"""The ten-run training harness: a refactor that claims "behaviour unchanged" must leave these hashes unchanged.

Ten short runs (3 steps each, the tiny model, CPU, seed 0, one thread), one SHA-256 of the final weights each:
SFT, REINFORCE with the EMA baseline, RLOO, GRPO β=0 with minibatches and 2 epochs, GRPO β=0.04 seq-mean, PPO,
the reward model, DPO with a live p_ref, DPO with precomputed p_ref, KTO. Run it on two commits and compare:

    python benchmarks/weight_hashes.py            # one line per run: name, hash
"""

from __future__ import annotations

import hashlib

import torch

from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.kto import KTOConfig, train_kto
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model
from minirlhf.trainers.sft import SFTConfig, train_sft

QUIET = dict(steps=3, seed=0, device="cpu", eval_every=0, progress=False)
ONLINE = dict(QUIET, prompts_per_step=4, group_size=4, max_new_tokens=5)


def weight_hash(module: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(module.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def runs():
    task = arithmetic.task()
    yield "sft", lambda: train_sft(arithmetic.sft_data(), SFTConfig(**QUIET, batch_size=8))
    yield "reinforce-ema", lambda: train_reinforce(task, ReinforceConfig(**ONLINE, baseline="ema"))
    yield "rloo", lambda: train_reinforce(task, ReinforceConfig(**ONLINE, baseline="rloo"))
    yield "grpo-beta0-mb-2ep", lambda: train_grpo(task, GRPOConfig(**ONLINE, minibatch_size=8, epochs=2))
    yield "grpo-beta0.04-seqmean", lambda: train_grpo(task, GRPOConfig(**ONLINE, beta=0.04, aggregation="seq-mean"))
    yield "ppo", lambda: train_ppo(task, PPOConfig(**ONLINE, minibatch_size=8, epochs=2))
    yield "reward-model", lambda: train_reward_model("sentiment", RewardModelConfig(**QUIET, batch_size=8))
    yield "dpo-live-ref", lambda: train_dpo("sentiment", DPOConfig(**QUIET, batch_size=8))
    yield "dpo-precomputed-ref", lambda: train_dpo("sentiment", DPOConfig(**QUIET, batch_size=8, precompute_ref=True))
    yield "kto", lambda: train_kto("sentiment", KTOConfig(**QUIET, batch_size=8))


def main() -> None:
    torch.set_num_threads(1)
    for name, train in runs():
        model = train()[0]
        print(f"{name:24s} {weight_hash(model)}", flush=True)


if __name__ == "__main__":
    main()
