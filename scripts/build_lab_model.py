"""Build the lab model ("tiny-lab"): the arithmetic SFT model, its context widened to 128 positions, SFT'd on the lab
task (minirlhf.tasks.lab), written to data/tiny-gpt2-lab.

    OMP_NUM_THREADS=1 python scripts/build_lab_model.py        # a few minutes on one CPU core

The base is `tiny-sft` (scripts/build_sft_model.py: it already writes sums, "17+25=" -> "42") with its tokenizer;
the 64 new position embeddings start as GPT-2 initialises them. SFT imitates the lab demonstrations: easy, medium
and hard problems in the shares of `lab.SFT_WEIGHTS`, each answer followed by a filler run of 0-30 tokens (a broad
length distribution), with several right answers when the prompt allows them. Long enough that easy prompts are
almost always right and medium ones some of the time. Reproducible from the seed for the same torch version and
thread count (the shipped model: one thread); the script prints the held-out metrics by difficulty class.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _shipped import write_model
from transformers import GPT2LMHeadModel

from minirlhf.models import SHIPPED, load_model
from minirlhf.tasks import lab
from minirlhf.trainers.sft import SFTConfig, train_sft


def widened(model: GPT2LMHeadModel, n_positions: int, seed: int) -> GPT2LMHeadModel:
    """`model` with `n_positions` position embeddings: its own first, the new ones freshly initialised."""
    old = model.config.n_positions
    if n_positions < old:
        raise ValueError(f"n_positions={n_positions} would drop some of the model's {old} positions")
    config = model.config.__class__.from_dict(model.config.to_dict() | {"n_positions": n_positions})
    torch.manual_seed(seed)
    wide = GPT2LMHeadModel(config)
    state = model.state_dict()
    wpe = wide.transformer.wpe.weight.detach().clone()
    wpe[:old] = state["transformer.wpe.weight"]
    wide.load_state_dict(state | {"transformer.wpe.weight": wpe})
    return wide


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SHIPPED["tiny-lab"])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    t0 = time.time()
    base, tokenizer = load_model("tiny-sft", device="cpu")
    model = widened(base, lab.LAB_CONTEXT, args.seed)
    config = SFTConfig(model="tiny-sft", steps=args.steps, lr=args.lr, seed=args.seed,
                       eval_every=max(1, args.steps // 5), device="cpu", progress=False)
    model, tokenizer, history = train_sft(lab.sft_data(), config, model=model, tokenizer=tokenizer)
    for row in history:
        if any(key.startswith("eval/") for key in row):
            print({key: round(value, 3) for key, value in row.items() if key.startswith("eval/") or key == "step"})
    write_model(model, tokenizer, args.out, t0)


if __name__ == "__main__":
    main()
