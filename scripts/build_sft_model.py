"""Build the shipped SFT checkpoint: the arithmetic reference policy p_ref ("tiny-sft"), written to data/.

    python scripts/build_sft_model.py        # well under a minute on 2 CPU cores

SFT starts from the base tiny GPT-2 and imitates "a+b=" -> "c<EOS>" on train-split problems only. It is kept
deliberately short, so the reference policy is right only some of the time and RL has room to improve it;
the script prints its held-out accuracy.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from _shipped import write_model

from minirlhf.models import SHIPPED
from minirlhf.tasks import arithmetic
from minirlhf.trainers.sft import SFTConfig, train_sft


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SHIPPED["tiny-sft"])
    parser.add_argument("--steps", type=int, default=SFTConfig.steps)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    t0 = time.time()
    config = SFTConfig(model="tiny", steps=args.steps, seed=args.seed, eval_every=max(1, args.steps // 5),
                       device="cpu", progress=False)
    model, tokenizer, history = train_sft(arithmetic.sft_data(), config)
    for step, acc in zip(*history.column("eval/accuracy")):
        print(f"step {step:4d}  held-out accuracy {acc:.3f}")
    write_model(model, tokenizer, args.out, t0)


if __name__ == "__main__":
    main()
