"""The multi-process share, without launching processes: the weight `Runtime.share` puts on each process's loss,
the door that makes every batch share out in equal parts, and the launcher's environment variables.

The two-process runs themselves (every trainer, the same steps as one process) are tests/test_distributed.py."""

from __future__ import annotations

import random
import socket
import types

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirlhf import distributed
from minirlhf.data import load_preference_pairs
from minirlhf.distributed import Runtime, is_main_process, launched_processes, setup_runtime
from minirlhf.errors import UserError
from minirlhf.losses import AGGREGATIONS, aggregate
from minirlhf.models import hub_reachable
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.kto import KTOConfig, train_kto
from minirlhf.trainers.preference import next_rows, preference_loss
from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model
from minirlhf.trainers.run.checkpoint import Checkpointer, release_run_folder
from minirlhf.trainers.sft import SFTConfig, train_sft


class Group:
    """Stands in for Accelerate's process group: `counts` are what the other processes pass to reduce(..., "sum");
    this process passes its own `x`."""

    def __init__(self, rank: int, world_size: int, counts: list[float]):
        self.process_index, self.num_processes, self.counts = rank, world_size, counts

    def reduce(self, x: torch.Tensor, op: str) -> torch.Tensor:
        assert op == "sum"
        others = sum(count for rank, count in enumerate(self.counts) if rank != self.process_index)
        return x + torch.tensor(others, dtype=x.dtype)


def process(rank: int, world_size: int, counts: list[float]) -> Runtime:
    runtime = Runtime(device="cpu")
    runtime.accelerator = Group(rank, world_size, counts)
    return runtime


@st.composite
def split_batches(draw):
    """A global batch of per-token values and masks, cut into equal shares of rows for 2-4 processes."""
    world_size = draw(st.integers(2, 4))
    rows, width = world_size * draw(st.integers(1, 3)), draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=g, dtype=torch.float64)
    mask = (torch.rand(rows, width, generator=g) < draw(st.floats(0.2, 1.0))).double()
    mask[:, 0] = 1  # every row has a real token (an empty row has no per-sequence mean)
    return world_size, x, mask


@settings(max_examples=60, deadline=None)
@given(split_batches(), st.sampled_from(AGGREGATIONS))
def test_the_shared_losses_average_to_the_loss_of_the_global_batch(batch, aggregation):
    """What DDP computes, (1/N) Σ_p share_p · L_p, equals the loss one process would take on the whole batch."""
    world_size, x, mask = batch
    parts = [(x[rows], mask[rows]) for rows in torch.arange(len(x)).chunk(world_size)]
    counts = [float(m.sum()) if aggregation == "token-mean" else len(m) for _, m in parts]
    weighted = [process(rank, world_size, counts).share(m, aggregation) * aggregate(xp, m, aggregation)
                for rank, (xp, m) in enumerate(parts)]
    torch.testing.assert_close(sum(weighted) / world_size, aggregate(x, mask, aggregation))


@settings(max_examples=60, deadline=None)
@given(split_batches(), st.sampled_from(AGGREGATIONS), st.integers(1, 3), st.booleans())
def test_accumulated_micro_batches_on_every_process_sum_to_the_loss_of_the_global_batch(batch, aggregation, k,
                                                                                         alone):
    """Gradient accumulation, on one process (`alone`) or several: each process cuts its rows into k micro-batches
    and weighs each by `share(micro, of=its rows)`; (1/N) Σ_p Σ_j share_pj · L_pj is the global batch's loss. The
    mean of the micro-batches' own means (weight 1/k) is not, for a token mean over rows of unequal lengths."""
    world_size, x, mask = batch
    if alone:
        world_size = 1
    parts = [(x[rows], mask[rows]) for rows in torch.arange(len(x)).chunk(world_size)]
    counts = [float(m.sum()) if aggregation == "token-mean" else len(m) for _, m in parts]
    weighted = []
    for rank, (xp, m) in enumerate(parts):
        runtime = Runtime(device="cpu") if alone else process(rank, world_size, counts)
        for micro in torch.arange(len(xp)).tensor_split(k):
            if len(micro):
                weighted.append(runtime.share(m[micro], aggregation, of=m) * aggregate(xp[micro], m[micro],
                                                                                        aggregation))
    torch.testing.assert_close(sum(weighted) / world_size, aggregate(x, mask, aggregation))


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.lists(st.integers(1, 6), min_size=2, max_size=4))
def test_a_mean_over_rows_is_weighted_by_its_rows(world_size, sizes):
    """`over` = a number of rows: unequal shares weigh by their rows (the door keeps them equal; the rule holds)."""
    sizes = (sizes * world_size)[:world_size]
    values = [torch.randn(n, dtype=torch.float64) for n in sizes]
    weighted = [process(rank, world_size, [float(n) for n in sizes]).share(len(v)) * v.mean()
                for rank, v in enumerate(values)]
    torch.testing.assert_close(sum(weighted) / world_size, torch.cat(values).mean())


def test_one_process_weighs_nothing_and_every_aggregation_is_checked():
    runtime = Runtime(device="cpu")
    assert runtime.share(torch.ones(2, 3)) == 1.0 and runtime.share(5, "seq-mean") == 1.0
    with pytest.raises(ValueError, match="aggregation.*'token_mean'"):
        runtime.share(torch.ones(2, 3), "token_mean")


def batch_sizes(n: int, size: int, steps: int) -> list[int]:
    """The global batches a pair trainer draws, from `next_rows` itself on one process."""
    order, rng, one, sizes = [], random.Random(0), Runtime(device="cpu"), []
    for _ in range(steps):
        rows, order = next_rows(order, size, n, rng, one)
        sizes.append(len(rows))
    return sizes


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(1, 12), st.integers(1, 4))
def test_check_epoch_refuses_exactly_the_runs_that_would_draw_an_unequal_batch(n, size, steps, world_size):
    runtime = process(0, world_size, [])
    unequal = [b for b in batch_sizes(n, size, steps) if b % world_size]
    if unequal:
        with pytest.raises(ValueError, match=rf"DPOConfig.batch_size={size} over {n} rows draws a batch of "
                                             rf"{min(unequal)}\b.*{world_size} processes"):
            runtime.check_epoch(n, size, steps, "DPOConfig.batch_size")
    else:
        runtime.check_epoch(n, size, steps, "DPOConfig.batch_size")


@pytest.fixture
def two_processes(monkeypatch):
    """This process as rank 0 of 2: what `accelerate launch --num_processes 2` sets, and a stand-in group."""
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(distributed, "_accelerator", lambda device: types.SimpleNamespace(
        process_index=0, num_processes=2, device=torch.device("cpu")))


PAIRS = None


def pairs(n: int):
    global PAIRS
    PAIRS = PAIRS or load_preference_pairs("sentiment", "train")[:40]
    return PAIRS[:n]


@pytest.mark.parametrize("start, message", [
    (lambda out: train_sft([("1+1=", "2")] * 4, SFTConfig(batch_size=3, out_dir=out)), r"SFTConfig.batch_size=3 must"),
    (lambda out: train_dpo(pairs(8), DPOConfig(batch_size=3, out_dir=out)), r"DPOConfig.batch_size=3 must"),
    (lambda out: train_dpo(pairs(9), DPOConfig(batch_size=4, steps=3, out_dir=out)),
     r"DPOConfig.batch_size=4 over 9 rows draws a batch of 1"),
    (lambda out: train_dpo(pairs(9), DPOConfig(batch_size=4, epochs=1, out_dir=out)), r"draws a batch of 1"),
    (lambda out: train_kto(pairs(8), KTOConfig(batch_size=3, out_dir=out)), r"KTOConfig.batch_size=3 must"),
    (lambda out: train_reward_model(pairs(9), RewardModelConfig(batch_size=4, steps=3, out_dir=out)),
     r"RewardModelConfig.batch_size=4 over 9 rows draws a batch of 1"),
    (lambda out: train_grpo(config=GRPOConfig(prompts_per_step=3, out_dir=out)), r"prompts_per_step=3 must"),
    (lambda out: train_grpo(config=GRPOConfig(dynamic_sampling=True, out_dir=out)), r"dynamic_sampling runs on one"),
    (lambda out: train_grpo(config=GRPOConfig(drop_dead_groups=True, out_dir=out)), r"drop_dead_groups runs on one"),
])
def test_batches_that_cannot_share_out_equally_are_refused_before_anything_is_written(
    two_processes, tmp_path, start, message
):
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=message):
        start(str(out))
    assert not out.exists() or not any(out.iterdir())


@settings(max_examples=100, deadline=None)
@given(st.text(max_size=6), st.sampled_from(["RANK", "WORLD_SIZE"]))
def test_the_launchers_variables_are_whole_numbers_with_rank_below_world_size(value, name):
    with pytest.MonkeyPatch.context() as env:
        env.delenv("RANK", raising=False)
        env.delenv("WORLD_SIZE", raising=False)
        if "\x00" in value:
            return  # not a value an environment can hold
        env.setenv(name, value)
        rank = int(value) if name == "RANK" and value.isascii() and value.isdigit() else 0
        world = int(value) if name == "WORLD_SIZE" and value.isascii() and value.isdigit() else 1
        fine = value.isascii() and value.isdigit() and rank < world
        if fine:
            assert (launched_processes(), is_main_process()) == (world, rank == 0)
        else:
            with pytest.raises(UserError, match=rf"environment variable.*{'RANK' if name == 'RANK' else 'WORLD_SIZE'}"):
                launched_processes()


@pytest.mark.parametrize("value, offline", [
    ("1", True), ("true", True), ("YES", True), ("on", True), ("0", False), ("", False), ("false", False),
])
def test_hf_hub_offline_is_read_as_huggingface_hub_reads_it(monkeypatch, value, offline):
    """HF_HUB_OFFLINE=0 is off (it used to count as on: any non-empty value did); on, the hub is not even probed."""
    probed = []
    monkeypatch.setenv("HF_HUB_OFFLINE", value)

    class Connection:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(socket, "create_connection", lambda *a, **k: probed.append(a) or Connection())
    assert hub_reachable("https://hub.example") is (not offline)
    assert bool(probed) is (not offline)


@settings(max_examples=60, deadline=None)
@given(st.integers(2, 4), st.integers(1, 3), st.integers(0, 2**31 - 1), st.sampled_from(["sigmoid", "ipo", "hinge"]))
def test_rpo_shares_average_to_the_nll_per_chosen_token_of_the_global_batch(world_size, pairs_each, seed, loss_type):
    """RPO's NLL term is normalised by the mean |y_w| of the batch: each process's share normalises by the global
    batch's (`all_chosen_lengths`, what train_dpo gathers), else the processes average their own token means."""
    g = torch.Generator().manual_seed(seed)
    n = world_size * pairs_each
    logps = [-10 * torch.rand(n, generator=g, dtype=torch.float64) for _ in range(4)]
    lengths = torch.randint(1, 9, (2, n), generator=g)
    config = DPOConfig(loss_type=loss_type, rpo_alpha=0.7)
    whole = preference_loss(config, *logps, *lengths)[0].mean()
    shares = [preference_loss(config, *(x[rows] for x in logps), *(x[rows] for x in lengths),
                              all_chosen_lengths=lengths[0])[0].mean()
              for rows in torch.arange(n).chunk(world_size)]  # equal shares of rows: share = 1
    torch.testing.assert_close(sum(shares) / world_size, whole)


def files_under(folder) -> dict:
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


@pytest.mark.parametrize("fork", [False, True])
def test_a_process_other_than_the_main_one_resumes_without_writing(monkeypatch, tmp_path, fork):
    """--resume of an older checkpoint (a rewind) or --resume --fork-to under several processes: the main process
    checks the run folders and writes; every other one (out_dir None, `setup_runtime`) loads the checkpoint and
    touches no file (it used to move the newer checkpoints aside too, and crashed on a fork)."""
    run, module = tmp_path / "run", torch.nn.Linear(3, 2)
    saver = Checkpointer(GRPOConfig(out_dir=str(run)), torch.optim.AdamW(module.parameters()), {}, model=module)
    saver.resume()  # a fresh run: its manifest
    older = saver.save(1, [{"step": 0}])
    saver.save(2, [{"step": 0}, {"step": 1}])
    release_run_folder(run)
    before = files_under(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setattr(distributed, "_accelerator", lambda device: types.SimpleNamespace(
        process_index=1, num_processes=2, device=torch.device("cpu")))
    _, config = setup_runtime(GRPOConfig(resume=str(older), fork_to=str(tmp_path / "fork") if fork else None,
                                         device="cpu"))
    assert config.out_dir is None and not config.progress  # the main process writes, and shows the progress bar
    step, history, _ = Checkpointer(config, torch.optim.AdamW(module.parameters()), {}, model=module).resume()
    assert (step, history) == (1, [{"step": 0}])
    assert files_under(tmp_path) == before
