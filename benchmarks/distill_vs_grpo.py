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
import dataclasses
import json
import time
from pathlib import Path

from minirlhf.models import load_model
from minirlhf.tasks import lab
from minirlhf.trainers.distill import DistillConfig, train_distill
from minirlhf.trainers.grpo import GRPOConfig, train_grpo

RESULTS = Path(__file__).resolve().parent / "results" / "distill_vs_grpo.json"
LAB = lab.LabConfig(mix=(1, 0, 0))  # the easy sums only


def held_out(model, tokenizer) -> dict[str, float]:
    return lab.lab_metrics(model, tokenizer, LAB, per_kind=200, kinds=("easy",))


def run(method: str, seed: int, steps: int, eval_every: int, grpo_lr: float) -> dict:
    """One run: accuracy/easy at each evaluation, against the answers sampled before it."""
    task = dataclasses.replace(lab.task(LAB), evaluate=held_out)
    common = dict(device="cpu", steps=steps, eval_every=eval_every, seed=seed, progress=False, task="lab",
                  task_option=["mix=1,0,0"])
    start = time.process_time()
    if method == "distill":  # 32 prompts x 1 answer: every answer is scored per token, no group needed
        history = train_distill(task, DistillConfig(**common, jsd_beta=1.0, lr=1e-3, prompts_per_step=32,
                                                    group_size=1))[2]
    else:  # 8 prompts x 4 answers: the group is GRPO's baseline
        history = train_grpo(task, GRPOConfig(**common, model="tiny-sft", lr=grpo_lr, prompts_per_step=8,
                                              group_size=4))[2]
    rows = [row for row in history if "eval/accuracy/easy" in row]
    return {"method": method, "seed": seed, "samples": [row["step"] * 32 for row in rows],
            "accuracy": [row["eval/accuracy/easy"] for row in rows], "cpu_s": time.process_time() - start}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--eval-every", type=int, default=15)
    parser.add_argument("--grpo-lr", type=float, default=3e-4, help="GRPO's learning rate (its default: 3e-4)")
    parser.add_argument("--methods", default="distill,grpo")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    teacher, tokenizer = load_model("tiny-lab", device="cpu")
    results = {"teacher_accuracy": held_out(teacher, tokenizer)["accuracy/easy"], "settings": vars(args) | {
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
