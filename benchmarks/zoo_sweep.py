"""The hyperparameter sweep behind notebook 05b's zoo section: SimPO (β, γ), ORPO (λ) and KTO (β) at the section's
budget, on the shipped sentiment pairs. Prints one line per run: held-out VADER sentiment, KL(p_θ || p_ref) and
response length of the sampled continuations, and held-out implicit-reward accuracy; writes them all to
zoo_sweep.json in --out (default benchmarks/results).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/zoo_sweep.py            # 6 runs
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/zoo_sweep.py --quick    # 2 steps each, to check it runs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from minirlhf.data import load_preference_pairs
from minirlhf.tasks.registry import shipped_preference_data
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.kto import train_kto

# The notebook's full-mode budget (notebooks/05b_dpo_family.ipynb, "The zoo").
BUDGET = dict(model="tiny", steps=40, batch_size=16, lr=5e-4, eval_every=40, eval_prompts=50, eval_samples=2,
              progress=False)
CANDIDATES = [
    dict(loss_type="simpo", beta=2.0, gamma=1.0),
    dict(loss_type="simpo", beta=5.0, gamma=2.5),
    dict(loss_type="orpo", orpo_lambda=0.1),
    dict(loss_type="orpo", orpo_lambda=1.0),
    dict(loss_type="kto", beta=0.1),
    dict(loss_type="kto", beta=0.5),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    args = parser.parse_args()
    budget = dict(BUDGET, steps=2, eval_every=2, eval_prompts=2) if args.quick else BUDGET
    held_out = load_preference_pairs("sentiment", "test")[:64]
    data = dataclasses.replace(shipped_preference_data("sentiment"), test=held_out)
    results = []
    for settings in CANDIDATES:
        start = time.perf_counter()
        train = train_kto if settings["loss_type"] == "kto" else train_dpo
        _, _, history = train(data, DPOConfig(**budget, **settings))
        last = history[-1]
        print(f"{settings}: sentiment {last['eval/sentiment']:+.3f}, KL {last['eval/kl']:.2f}, "
              f"length {last['eval/response_length']:.1f}, pair accuracy {last['eval/rewards/accuracy']:.3f} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        results.append({"settings": settings, "budget": budget, "wall_s": time.perf_counter() - start,
                        "final": {k: v for k, v in last.items() if k.startswith("eval/")}})
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "zoo_sweep.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
