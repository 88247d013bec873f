"""Data-parallel training through Accelerate: 2 CPU processes (gloo) take the same steps as 1 process."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minirlhf.distributed import Runtime, setup_runtime
from minirlhf.trainers.grpo import GRPOConfig
from minirlhf.trainers.online import minibatches

ROOT = Path(__file__).resolve().parent.parent


def test_a_single_process_runtime_changes_nothing():
    runtime, config = setup_runtime(GRPOConfig(device="cpu", out_dir="somewhere"))
    assert (runtime.rank, runtime.world_size, runtime.is_main) == (0, 1, True)
    assert config.out_dir == str(Path("somewhere").resolve()) and config.device == "cpu"  # made absolute once
    x = torch.arange(6.0)
    assert runtime.gather(x) is x and torch.equal(runtime.local(x), x) and runtime.share(3) == 1.0
    assert runtime.sampling_rows(8) is None and runtime.reduce({"loss": 1.5}) == {"loss": 1.5}


def test_gradient_checkpointing_skips_a_module_without_a_transformer():
    """PPO prepares its value head too: with gradient_checkpointing it has nothing to recompute (it used to raise
    StopIteration before the first step)."""
    head = torch.nn.Linear(4, 1)
    assert Runtime(device="cpu", gradient_checkpointing=True).prepare(head) is head


def test_processes_split_the_global_minibatches_by_rows():
    """Each process takes its own rows of the one global permutation (rows of the batch, its share's); together
    they cover the batch once."""

    class Rank:
        def __init__(self, rank):
            self.rank, self.world_size = rank, 2

        local_rows = Runtime.local_rows

    parts = [minibatches(8, 4, torch.Generator().manual_seed(0), Rank(r)) for r in (0, 1)]
    assert [len(p) for p in parts] == [2, 2] and all(len(mb) == 2 for p in parts for mb in p)
    assert all(4 * r <= int(i) < 4 * (r + 1) for r, p in enumerate(parts) for mb in p for i in mb)
    assert sorted(int(i) for p in parts for mb in p for i in mb) == list(range(8))


@pytest.mark.slow
def test_two_processes_match_one_process(tmp_path):
    """SFT, DPO (with RPO's NLL per chosen token), KTO, the reward model (an epoch's short last batch), GRPO (β > 0,
    batch-std advantages, token-mean loss; and with gradient accumulation), Dr. GRPO (B · T_max), REINFORCE++
    (per-token advantages) and PPO (whitened advantages): the same losses, rewards and gradient norms at every step,
    and the same final weights, on every process."""
    sys.path.insert(0, str(ROOT / "tests"))
    from _dist_job import run_all

    one = run_all()  # this process: WORLD_SIZE is not set
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    env.pop("WORLD_SIZE", None)
    subprocess.run(
        [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
         "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
         str(ROOT / "tests" / "_dist_job.py"), str(tmp_path)],
        check=True, env=env, cwd=ROOT, timeout=300,
    )
    ranks = [torch.load(tmp_path / f"rank{r}-of2.pt") for r in (0, 1)]
    for method, expected in one.items():
        for two in ranks:
            # every process ends with the single-process weights (Adam magnifies float rounding a little)
            torch.testing.assert_close(two[method]["params"], expected["params"], atol=1e-3, rtol=0, msg=method)
            assert len(two[method]["history"]) == len(expected["history"])
            for row_1, row_2 in zip(expected["history"], two[method]["history"]):
                # reward_std, advantage_std, PPO's explained_variance, KTO's kl (z_ref) and class means are taken
                # over the gathered batch: exact as well (NaN, logged as None, when the global batch lacks a class)
                for key in ("loss", "grad_norm", "reward", "reward_std", "advantage_std", "explained_variance",
                            "rewards/accuracy", "accuracy", "eval/accuracy") + (
                    ("kl", "rewards/desirable", "rewards/undesirable", "logps/desirable", "logps/undesirable")
                    if method == "kto" else ()
                ):
                    if row_1.get(key) is None:
                        assert row_2.get(key) is None, (method, row_1["step"], key)
                    else:
                        assert row_2[key] == pytest.approx(row_1[key], rel=1e-3, abs=1e-5), (method, row_1["step"], key)
