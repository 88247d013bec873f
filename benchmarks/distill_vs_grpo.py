"""Dense per-token supervision against a 0/1 reward: held-out accuracy against samples seen, for on-policy
distillation (tiny-sft distilled from tiny-lab, reverse KL) and GRPO (tiny-sft on the lab's verifier), on the lab's
easy sums, same student, 32 answers per step each (distillation: 32 prompts x 1; GRPO: 8 prompts x a group of 4).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distill_vs_grpo.py --seeds 0,1,2

Held-out accuracy: 200 held-out easy sums, one answer sampled at temperature 1 each (`lab.lab_metrics`), every
`--eval-every` steps; the teacher's on the same problems is measured once. Writes
benchmarks/results/distill_vs_grpo.json (per method and seed: samples, accuracies, CPU seconds).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from minirlhf.lab.distillation import DISTILL, GRPO, run_arm, settings, teacher_accuracy

RESULTS = Path(__file__).resolve().parent / "results" / "distill_vs_grpo.json"
ARMS = settings(quick=False)["arms"]  # distillation: 32 prompts x 1 answer, lr 1e-3; GRPO: 8 prompts x a group of 4


def run(method: str, seed: int, steps: int, eval_every: int, grpo_lr: float) -> dict:
    """One arm of the lab's effect (2) (`minirlhf.lab.distillation`), GRPO at `grpo_lr`: accuracy/easy at each
    evaluation, against the answers sampled before it."""
    arm = DISTILL if method == "distill" else GRPO
    fields = ARMS[arm] | ({"lr": grpo_lr} if arm == GRPO else {})
    return {"method": method, "seed": seed} | run_arm(arm, seed, steps, eval_every, **fields)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=15)
    parser.add_argument("--grpo-lr", type=float, default=3e-4, help="GRPO's learning rate (its default: 3e-4)")
    parser.add_argument("--methods", default="distill,grpo")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    results = {"teacher_accuracy": teacher_accuracy(200), "settings": vars(args) | {
        "out": str(args.out)}, "runs": []}
    for method in args.methods.split(","):
        for seed in (int(s) for s in args.seeds.split(",")):
            results["runs"].append(run(method, seed, args.steps, args.eval_every, args.grpo_lr))
            print(json.dumps(results["runs"][-1]), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1))
    print(f"teacher {results['teacher_accuracy']}; wrote {args.out}")


if __name__ == "__main__":
    main()
