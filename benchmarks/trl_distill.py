"""Cross-check of on-policy distillation's loss against TRL's own code (TRL 1.16; not a dependency of minirlhf).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trl_distill.py --check-only --out /tmp/distill.json

minirlhf's `generalized_jsd_loss` (token-mean over the real tokens) on random logits with padding, against
- `GKDTrainer.generalized_jsd_loss` (trl.experimental.gkd), with labels = -100 on the padding;
- the core `DistillationTrainer`'s loss, `_chunked_divergence_loss`, which takes hidden states and the LM head
  weights (logits = h Wᵀ) and projects them chunk by chunk: the loss, and its gradient with respect to the
  student's hidden states,
for β = 0 (forward KL), 0.5 (JSD) and 1 (reverse KL), at temperatures 1 and 0.7. Tolerance 1e-6 (float64).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import torch
from _trl_common import check_row, max_abs_diff, quiet, report_checks

from minirlhf.losses import generalized_jsd_loss

TOLERANCE = 1e-6  # stricter than the other cross-checks' 1e-5: float64 on both sides, no model in between
BETAS = (0.0, 0.5, 1.0)
TEMPERATURES = (1.0, 0.7)
B, T, H, V = 3, 6, 8, 11  # rows, response tokens, hidden size, vocabulary


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    """Hidden states and LM heads of a student and a teacher (float64), and a mask with padding."""
    g = torch.Generator().manual_seed(seed)
    mask = torch.ones(B, T)
    mask[0, 4:] = 0  # rows of 4, 6 and 2 real tokens
    mask[2, 2:] = 0
    return {"h_s": torch.randn(B, T, H, generator=g, dtype=torch.float64),
            "h_t": torch.randn(B, T, H, generator=g, dtype=torch.float64),
            "w_s": torch.randn(V, H, generator=g, dtype=torch.float64),
            "w_t": torch.randn(V, H, generator=g, dtype=torch.float64), "mask": mask}


def row(quantity: str, setting: str, ours: torch.Tensor, theirs: torch.Tensor) -> dict:
    diff = max_abs_diff(ours.detach(), theirs.detach())
    return check_row(quantity, setting, diff) | {"status": "match" if diff <= TOLERANCE else "MISMATCH"}


def cross_check() -> list[dict]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TRL's warning on importing from trl.experimental
        from trl.experimental.gkd.gkd_trainer import GKDTrainer
        from trl.trainer.distillation_trainer import _chunked_divergence_loss

    x = inputs()
    rows = []
    for beta in BETAS:
        for tau in TEMPERATURES:
            setting = f"beta={beta}, temperature={tau}, random logits, 12 of 18 tokens real"
            h_s = x["h_s"].clone().requires_grad_()
            logits, teacher_logits = h_s @ x["w_s"].T, x["h_t"] @ x["w_t"].T  # (B, T, V)
            ours = generalized_jsd_loss(logits, teacher_logits, x["mask"], beta, tau)
            (ours_grad,) = torch.autograd.grad(ours, h_s)
            labels = torch.where(x["mask"].bool(), 0, -100)
            gkd = GKDTrainer.generalized_jsd_loss(logits, teacher_logits, labels=labels, beta=beta, temperature=tau)
            rows.append(row("distillation loss vs GKDTrainer.generalized_jsd_loss", setting, ours, gkd))

            h_s_trl = x["h_s"].clone().requires_grad_()
            core, _, _ = _chunked_divergence_loss(h_s_trl, x["h_t"], x["w_s"], x["w_t"], x["mask"], beta,
                                                  temperature=tau)
            (core_grad,) = torch.autograd.grad(core, h_s_trl)
            rows.append(row("distillation loss vs DistillationTrainer (_chunked_divergence_loss)", setting, ours,
                            core))
            rows.append(row("∂loss/∂ student hidden states vs DistillationTrainer", setting, ours_grad, core_grad))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check-only", action="store_true", help="the cross-check (the only thing this script does)")
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    args.check_only = True
    quiet()
    return 1 if report_checks("Distillation", cross_check(), args) else 0


if __name__ == "__main__":
    sys.exit(main())
