"""The main job (`make demo` = `python -m minirlhf demo`): both halves of the lecture, end to end, in minutes.

1. Verifiable reward: GRPO on arithmetic from the shipped SFT checkpoint; held-out exact-match before/after, and
   KL(p_θ || p_ref) at evaluation (eval/kl_ref: measured even at β = 0, where p_ref is the frozen start).
2. Preferences: DPO on the shipped sentiment pairs from the base policy; held-out ground-truth sentiment
   (VADER) and KL(p_θ || p_ref) before/after; chosen/rejected log-probs over training.

Writes `summary.md`, `summary.json` and each run's `metrics.jsonl` into the output folder (default outputs/demo/).
The core trains without matplotlib, so the figures are drawn from those files by the course:
`python -m minirlhf.course demo-figures outputs/demo` (what `make demo` runs next).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo


def run_demo(out_dir: str | Path = "outputs/demo", quick: bool = False, progress: bool = True) -> list[dict]:
    """Run both showcases; return the before/after rows that are also printed and written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rows = []

    t0 = time.time()
    grpo_config = GRPOConfig(steps=3 if quick else GRPOConfig.steps, eval_every=1 if quick else 20,
                             progress=progress, out_dir=str(out / "grpo"), overwrite=True)  # the demo redoes its runs
    _, _, grpo_history = train_grpo(arithmetic.task(), grpo_config)
    rows.append({
        "method": "GRPO", "task": "arithmetic (held-out exact match)",
        "before": grpo_history[0]["eval/accuracy"], "after": grpo_history[-1]["eval/accuracy"],
        "kl_after": grpo_history.last("eval/kl_ref"), "seconds": time.time() - t0,
    })

    t0 = time.time()
    dpo_config = DPOConfig(steps=3 if quick else DPOConfig.steps, eval_every=2 if quick else DPOConfig.eval_every,
                           eval_prompts=10 if quick else DPOConfig.eval_prompts, progress=progress,
                           out_dir=str(out / "dpo"), overwrite=True)
    _, _, dpo_history = train_dpo(None, dpo_config)
    evals = [r for r in dpo_history if "eval/sentiment" in r]
    rows.append({
        "method": "DPO", "task": "review sentiment (held-out VADER score)",
        "before": evals[0]["eval/sentiment"], "after": evals[-1]["eval/sentiment"],
        "kl_after": evals[-1].get("eval/kl"), "seconds": time.time() - t0,
    })

    table = _markdown(rows)
    (out / "summary.md").write_text(table + "\n")
    (out / "summary.json").write_text(json.dumps(rows, indent=2))
    print("\n" + table)
    print(f"\nsummary and metrics written to {out}/; figures: python -m minirlhf.course demo-figures {out}")
    return rows


def _markdown(rows: list[dict]) -> str:
    lines = ["| method | task | before | after | KL(p_θ‖p_ref) after | time (s) |", "|---|---|---|---|---|---|"]
    for r in rows:
        kl = "n/a" if r["kl_after"] is None else f"{r['kl_after']:.2f}"
        before, after = f"{r['before']:.3f}", f"{r['after']:.3f}"
        lines.append(f"| {r['method']} | {r['task']} | {before} | {after} | {kl} | {r['seconds']:.0f} |")
    return "\n".join(lines)
