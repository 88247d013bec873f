"""The correctness cross-checks of the TRL side-by-side benchmarks (benchmarks/trl_dpo.py, benchmarks/trl_grpo.py)
and of the distillation loss (benchmarks/trl_distill.py).

Each script's `--check-only` runs in a fresh process: minirlhf's DPO loss, implicit rewards, sequence log-probs and
gradients, and its GRPO advantages, loss and gradients, must equal TRL's own code within 1e-5 wherever the two
define the same quantity; where they define something differently (IPO length normalisation, the eps of the
advantage denominator, TRL's ratio-weighted KL, position ids of left-padded prompts) the difference is reported
and must be visible (not zero). TRL is not a dependency of minirlhf: without it these tests are skipped.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
TOLERANCE = 1e-5


def run_cross_check(script: str, out: Path) -> list[dict]:
    pytest.importorskip("trl", reason="TRL is not installed (pip install trl==1.16.0 to run the TRL cross-checks)")
    env = os.environ | {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    proc = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), "--check-only", "--out", str(out)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads(out.read_text())["cross_check"]


def check(rows: list[dict]) -> dict[str, list[dict]]:
    by_status: dict[str, list[dict]] = {"match": [], "differs by definition": [], "MISMATCH": []}
    for row in rows:
        by_status[row["status"]].append(row)
    assert not by_status["MISMATCH"], by_status["MISMATCH"]
    for row in by_status["match"]:
        assert row["max_abs_diff"] <= TOLERANCE, row
    for row in by_status["differs by definition"]:
        assert row["max_abs_diff"] > TOLERANCE and row["note"], row  # a real, explained difference
    return by_status


@pytest.mark.slow
def test_dpo_cross_check_against_trl(tmp_path):
    rows = check(run_cross_check("trl_dpo.py", tmp_path / "dpo.json"))
    matched = {(r["quantity"], r["setting"].split(",")[0]) for r in rows["match"]}
    for quantity in ("DPO loss (per pair)", "DPO loss (batch mean)", "∂loss/∂ per-token log-probs",
                     "implicit reward β·log p_θ/p_ref (chosen)", "implicit reward β·log p_θ/p_ref (rejected)"):
        assert (quantity, "fixed log-prob tensors") in matched, quantity
    for quantity in ("sequence log p_θ(y|x), chosen + rejected", "DPO loss (batch mean)",
                     "implicit rewards, per pair (chosen, rejected)", "gradient of every parameter"):
        assert (quantity, "same model and batch: tiny GPT-2 (perturbed) vs frozen copy") in matched, quantity
    assert all("ipo" in r["setting"] for r in rows["differs by definition"])


@pytest.mark.slow
def test_grpo_cross_check_against_trl(tmp_path):
    rows = check(run_cross_check("trl_grpo.py", tmp_path / "grpo.json"))
    matched = {r["quantity"] for r in rows["match"]}
    assert {"advantages", "advantages, eps convention converted", "GRPO loss", "∂loss/∂ per-token log-probs",
            "GRPO loss (loss_type=grpo vs seq-mean, k3, β=0.04)", "gradient of every parameter"} <= matched
    losses = [r["setting"] for r in rows["match"] if r["quantity"] == "GRPO loss"]
    for pair in ("loss_type=grpo vs aggregation=seq-mean", "loss_type=bnpo vs aggregation=token-mean",
                 "loss_type=dapo vs aggregation=token-mean", "loss_type=dr_grpo vs aggregation=constant"):
        assert any(pair in setting for setting in losses), pair
    zoo = [r["setting"] for r in rows["match"] if r["quantity"].endswith("ratio zoo")]
    for pair in ("loss_type=cispo", "policy_loss=cispo"), ("loss_type=sapo", "policy_loss=sapo"), (
            "delta=1.25", "policy_loss=dual-clip"):
        assert sum(all(part in setting for part in pair) for setting in zoo) == 2, pair  # loss and gradient
    sampler = [r["setting"] for r in rows["match"] if r["quantity"].endswith("sampler correction")
               or r["quantity"] == "sampler importance weight p_θold/μ"]
    for mode in ("token-truncate", "token-mask", "sequence-truncate", "sequence-mask"):  # weight, loss, gradient
        assert sum(f"behaviour_correction={mode}," in setting for setting in sampler) == 3, mode
    bonus = {r["quantity"] for r in rows["match"] if "entropy_coef=" in r["setting"] and "token-mean" in r["setting"]}
    assert bonus == {"GRPO loss + entropy bonus", "∂loss/∂ per-token log-probs, entropy bonus",
                     "∂loss/∂ per-token entropy"}
    differs = {r["quantity"] for r in rows["differs by definition"]}
    assert differs == {"advantages", "GRPO loss", "∂loss/∂ per-token log-probs",
                       "per-token log-probs, rows WITH left padding", "GRPO loss + entropy bonus",
                       "∂loss/∂ per-token entropy"}


@pytest.mark.slow
def test_distillation_cross_check_against_trl(tmp_path):
    """The generalized JSD against TRL's GKD loss and its DistillationTrainer's chunked loss (and gradient), to 1e-6
    for β = 0, 0.5, 1."""
    rows = check(run_cross_check("trl_distill.py", tmp_path / "distill.json"))
    assert len(rows["match"]) == 18 and not rows["differs by definition"]
    assert all(row["max_abs_diff"] <= 1e-6 for row in rows["match"])
    for beta in ("beta=0.0", "beta=0.5", "beta=1.0"):
        assert sum(beta in row["setting"] for row in rows["match"]) == 6, beta
