"""Build the lab model ("tiny-lab"): the arithmetic SFT model, its context widened to 128 positions, SFT'd on the lab
task (minirlhf.tasks.lab), written to data/tiny-gpt2-lab. Or, with `--variant chain`, the lab-chain model
("tiny-lab-chain"): the lab model SFT'd on the chain problems (minirlhf.tasks.lab_chain), written to
data/tiny-gpt2-lab-chain.

    OMP_NUM_THREADS=1 python scripts/build_lab_model.py                                # a few minutes on one core
    OMP_NUM_THREADS=1 python scripts/build_lab_model.py --variant chain --steps 400     # after the lab model

The base is `tiny-sft` (scripts/build_sft_model.py: it already writes sums, "17+25=" -> "42") with its tokenizer;
the 64 new position embeddings start as GPT-2 initialises them. SFT imitates the lab demonstrations: easy, medium
and hard problems in the shares of `lab.SFT_WEIGHTS`, each answer followed by a filler run of 0-30 tokens (a broad
length distribution), with several right answers when the prompt allows them. Long enough that easy prompts are
almost always right and medium ones some of the time. Reproducible from the seed for the same torch version and
thread count (the shipped model: one thread); the script prints the held-out metrics by difficulty class.

The chain variant starts from the lab model (it already writes sums and filler runs) and imitates the chain
demonstrations: a filler run of 0-12 tokens, then every total of "keep adding b to a while below 100", the last one
the answer; it prints the held-out accuracy on the long (7-9 steps) and the short problems.

    OMP_NUM_THREADS=1 python scripts/build_lab_model.py --variant coin   # "tiny-lab-coin", from tiny-lab

builds the length-bias model (effect (a) of minirlhf.lab): `tiny-lab` SFT'd COIN_STEPS steps on the coin task
(minirlhf.tasks.coin): a guess, the environment's flip and verdict, then a tail of "." after a right guess and ","
after a wrong one, its length uniform in 0..coin.MAX_TAIL either way. It prints the share of right guesses and the
mean tail after right and after wrong ones.

    OMP_NUM_THREADS=1 python scripts/build_lab_model.py --variant calculator   # "tiny-calculator", from tiny-lab

builds the tool-use model (minirlhf.tasks.calculator): `tiny-lab` SFT'd CALCULATOR_STEPS steps on long sums (4-5
digit numbers), a share `calculator.CALL_SHARE` of the demonstrations calling the calculator and ending after
its result ("[a+b]=s"), the others answering in the head ("s"): the model sometimes calls and sometimes does not, so
RL has a choice to learn. It prints the held-out accuracy and share of calls with the calculator.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from _shipped import write_model
from transformers import GPT2LMHeadModel

from minirlhf.models import SHIPPED, load_model
from minirlhf.tasks import calculator, coin, lab, lab_chain
from minirlhf.trainers.sft import SFTConfig, train_sft

COIN_STEPS = 200  # SFT steps of the coin model from tiny-lab: its format is three fixed tokens and a tail
CALCULATOR_STEPS = 1000  # SFT steps of the calculator model from tiny-lab
VARIANTS = {"lab": ("tiny-lab", "tiny-sft"), "chain": ("tiny-lab-chain", "tiny-lab"),
            "coin": ("tiny-lab-coin", "tiny-lab"),
            "calculator": ("tiny-calculator", "tiny-lab")}  # --variant: the model built, and what it starts from
STEPS = {"coin": COIN_STEPS, "calculator": CALCULATOR_STEPS}  # default --steps, else 1000


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
    parser.add_argument("--variant", choices=tuple(VARIANTS), default="lab")
    parser.add_argument("--out", type=Path, help="default: the shipped folder of the model built")
    parser.add_argument("--steps", type=int, help=f"default: 1000, or {STEPS} by variant")
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    name, base_name = VARIANTS[args.variant]
    steps = args.steps or STEPS.get(args.variant, 1000)
    t0 = time.time()
    if args.variant != "lab":
        data = {"chain": lab_chain.sft_data, "calculator": calculator.sft_data, "coin": coin.sft_data}[args.variant]()
        model, tokenizer = load_model(base_name, device="cpu")
    else:
        base, tokenizer = load_model(base_name, device="cpu")
        model = widened(base, lab.LAB_CONTEXT, args.seed)
        data = lab.sft_data()
    config = SFTConfig(model=base_name, steps=steps, lr=args.lr, seed=args.seed,
                       eval_every=max(1, steps // 5), device="cpu", progress=False)
    model, tokenizer, history = train_sft(data, config, model=model, tokenizer=tokenizer)
    for row in history:
        if any(key.startswith("eval/") for key in row):
            print({key: value if value is None else round(value, 3)  # None: a metric with nothing to average
                   for key, value in row.items() if key.startswith("eval/") or key == "step"})
    write_model(model, tokenizer, args.out or SHIPPED[name], t0)


if __name__ == "__main__":
    main()
