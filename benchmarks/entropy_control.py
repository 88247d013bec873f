"""Entropy control on the lab task: GRPO from the lab model, the batch reused for several updates, with and without
an entropy control (the entropy bonus, Clip-Cov, KL-Cov: minirlhf.losses.entropy), on several seeds.

Every arm trains on the lab task's own verifier (its rewards sharpen p_θ) with the same settings; only the control
differs. Logged per step: the policy's next-token entropy (mean over the real tokens of each update, nats), the
reward, and the share of tokens the covariance controls acted on (cov_frac).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/entropy_control.py --seeds 0,1,2 --steps 20
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/entropy_control.py --quick     # smoke test

Writes results/entropy_control.json (after every seed): the settings, and for each seed and arm the per-step
entropy, reward and cov_frac, the first step's entropy and the mean of the last FINAL steps' entropy and reward,
with wall and CPU time and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from _bench import machine_info

from minirlhf.lab.effect import MODEL, grpo_run
from minirlhf.lab.observe import column, tail_mean

FINAL = 5  # the last steps averaged for an arm's final entropy and reward
RESULTS = Path(__file__).resolve().parent / "results"
ARMS = {
    "none": {},
    "entropy bonus 0.02": {"entropy_coef": 0.02},
    "clip-cov 5 %": {"policy_loss": "clip-cov", "cov_ratio": 0.05, "clip_cov_lb": 0.1},
    "kl-cov 5 %": {"policy_loss": "kl-cov", "cov_ratio": 0.05},
}


def settings(quick: bool, steps: int) -> dict:
    prompts = 4 if quick else 8
    return {"model": MODEL, "task": {"mix": (0.25, 0.5, 0.25), "max_new_tokens": 40},
            "grpo": {"steps": 3 if quick else steps, "lr": 1e-3, "beta": 0.0, "prompts_per_step": prompts,
                     "group_size": 8, "epochs": 4, "minibatch_size": prompts * 8 // 4, "aggregation": "token-mean"},
            "arms": ARMS}


def run_arm(s: dict, seed: int, fields: dict) -> dict:
    started, cpu, load = time.perf_counter(), time.process_time(), os.getloadavg()[0]
    history, _, _, _ = grpo_run(s, seed, **fields)
    entropy, reward = column(history, "entropy"), column(history, "reward")
    cov = column(history, "cov_frac") if "policy_loss" in fields else []
    return {"entropy": entropy, "reward": reward, "cov_frac": cov, "start_entropy": entropy[0],
            "final_entropy": tail_mean(entropy, FINAL), "final_reward": tail_mean(reward, FINAL),
            "mean_cov_frac": statistics.fmean(cov) if cov else None,
            "wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(time.process_time() - cpu, 1),
            "load_before": round(load, 2), "load_after": round(os.getloadavg()[0], 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", help="comma-separated seeds (default 0,1,2; --quick: 0)")
    parser.add_argument("--arms", default=",".join(ARMS), help="comma-separated arm names")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for entropy_control.json")
    args = parser.parse_args(argv)
    s = settings(args.quick, args.steps)
    arms = args.arms.split(",")
    seeds = {}
    for seed in [int(x) for x in (args.seeds or ("0" if args.quick else "0,1,2")).split(",")]:
        seeds[seed] = {}
        for arm in arms:
            seeds[seed][arm] = result = run_arm(s, seed, ARMS[arm])
            cov = "" if result["mean_cov_frac"] is None else f"  cov_frac {result['mean_cov_frac']:.3f}"
            print(f"seed {seed} {arm:>20}: entropy {result['start_entropy']:.3f} -> {result['final_entropy']:.3f}"
                  f"  reward -> {result['final_reward']:.3f}{cov}  cpu {result['cpu_s']:.0f} s  "
                  f"load {result['load_before']:.1f}", flush=True)
        args.out.mkdir(parents=True, exist_ok=True)  # after every seed: a stopped run keeps what it did
        (args.out / "entropy_control.json").write_text(
            json.dumps({"settings": s, "machine": machine_info(), "seeds": seeds}, indent=1) + "\n")
    print(f"wrote {args.out / 'entropy_control.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
