"""What a run refuses or names, as its own cause, before it trains on or writes something wrong: a model that starts
with non-finite weights, a full disk, a checkpoint holding a file of another run, a NaN read back from a checkpoint's
history, a reference or reward model other than the run's own on resume, an unbounded number of sampling rounds, and
a final metrics row with nothing in it."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from minirlhf.errors import CheckpointDamaged, UserError
from minirlhf.models import load_model
from minirlhf.tasks import Task, arithmetic
from minirlhf.tasks.sentiment import sentiment_task
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import MAX_SAMPLING_ROUNDS, GRPOConfig, train_grpo
from minirlhf.trainers.run import checkpoint
from minirlhf.trainers.run.guard import NonFiniteError
from minirlhf.trainers.run.history import History

QUIET = dict(seed=0, device="cpu", eval_every=0, progress=False)
ONLINE = dict(QUIET, prompts_per_step=2, group_size=2, max_new_tokens=4)


def _strict_json(line: str):
    def refuse(constant):
        raise ValueError(f"bare {constant} in JSON")

    return json.loads(line, parse_constant=refuse)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([math.nan, math.inf, -math.inf]), st.integers(0, 10**6))
def test_a_model_that_starts_non_finite_is_named_as_the_cause(bad, where):
    model, tokenizer = load_model("tiny-sft")
    params = list(model.parameters())
    param = params[where % len(params)]
    with torch.no_grad():
        param.view(-1)[where % param.numel()] = bad
    with pytest.raises(NonFiniteError, match="the model given to the trainer: its weights hold inf or NaN before "
                                             "training starts") as err:
        train_grpo(arithmetic.task(), GRPOConfig(**ONLINE, steps=1), model=model, tokenizer=tokenizer)
    assert "learning rate" not in str(err.value).split("no reward")[0]


def test_a_full_disk_is_named_with_the_checkpoint_and_the_previous_one_stays(tmp_path, monkeypatch):
    config = GRPOConfig(**ONLINE, steps=2, save_every=1, out_dir=str(tmp_path / "run"))
    real_save = torch.save
    calls = {"n": 0}

    def filling_save(obj, f, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:  # the second checkpoint finds the disk full
            monkeypatch.setattr(shutil, "disk_usage", lambda _: shutil._ntuple_diskusage(10**9, 10**9, 0))
            raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", filling_save)
    with pytest.raises(OSError, match=r"cannot write .*step-000002: no space left on device \(0 bytes free .*; the "
                                      r"previous checkpoint is intact"):
        train_grpo(arithmetic.task(), config)
    folder = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in folder.iterdir()) == ["step-000001"]  # no partial folder left behind


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    out = tmp_path_factory.mktemp("runs")
    for seed in (0, 1):
        train_grpo(arithmetic.task(), GRPOConfig(**(ONLINE | {"seed": seed}), steps=1, save_every=1, beta=0.04,
                                                 out_dir=str(out / f"run{seed}")))
    return out


@pytest.mark.parametrize("name", ["model.safetensors", "trainer_state.pt"])
def test_a_file_swapped_in_from_another_run_is_refused_on_resume(two_runs, tmp_path, name):
    run = tmp_path / "run"
    shutil.copytree(two_runs / "run0", run)
    shutil.copy(two_runs / "run1/checkpoints/step-000001" / name, run / "checkpoints/step-000001" / name)
    with pytest.raises(CheckpointDamaged, match=rf"{name} is not the file this checkpoint was saved with"):
        train_grpo(arithmetic.task(), GRPOConfig(**ONLINE, steps=2, beta=0.04, resume=str(run)))


def test_a_reference_model_other_than_the_runs_own_is_refused_on_resume(two_runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(two_runs / "run0", run)
    other, tokenizer = load_model("tiny")  # the run's p_ref is a copy of tiny-sft
    with pytest.raises(UserError, match="the reference model is not the one the run started with"):
        train_grpo(arithmetic.task(), GRPOConfig(**ONLINE, steps=2, beta=0.04, resume=str(run)), model=other,
                   tokenizer=tokenizer)
    train_grpo(arithmetic.task(), GRPOConfig(**ONLINE, steps=2, beta=0.04, resume=str(run)))  # its own: resumes


class ScoreModel(nn.Module):
    """A stand-in learned reward: a weight times the completion's length."""

    def __init__(self, weight: float):
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(weight))

    def score(self, prompts, completions, tokenizer=None):
        return [float(self.weight) * len(c) for c in completions]


def _scored_task(weight: float) -> Task:
    model = ScoreModel(weight)
    return Task("scored", arithmetic.train_prompts, lambda p, c, **_: model.score(p, c), 4,
                models={"reward_model": model})


def test_a_reward_model_other_than_the_runs_own_is_refused_on_resume(tmp_path):
    run = tmp_path / "run"
    train_grpo(_scored_task(1.0), GRPOConfig(**ONLINE, steps=1, save_every=1, out_dir=str(run)))
    with pytest.raises(UserError, match="the reward_model is not the one the run started with"):
        train_grpo(_scored_task(2.0), GRPOConfig(**ONLINE, steps=2, resume=str(run)))
    train_grpo(_scored_task(1.0), GRPOConfig(**ONLINE, steps=2, resume=str(run)))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.sampled_from([0.5, math.nan, math.inf, -math.inf]), min_size=1, max_size=4))
def test_a_nan_read_back_from_a_checkpoint_history_is_written_as_null(tmp_path_factory, values):
    path = tmp_path_factory.mktemp("h") / "metrics.jsonl"
    History(path, rows=[{"step": i, "loss": v} for i, v in enumerate(values)])
    rows = [_strict_json(line) for line in path.read_text().splitlines()]
    for row, value in zip(rows, values):
        assert row["loss"] == (value if math.isfinite(value) else None)
        assert ("nonfinite" in row) == (not math.isfinite(value))


def test_dynamic_sampling_rounds_are_bounded():
    GRPOConfig(dynamic_sampling=True, max_sampling_rounds=MAX_SAMPLING_ROUNDS)
    with pytest.raises(ValueError, match=rf"GRPOConfig.max_sampling_rounds must lie in \[1, {MAX_SAMPLING_ROUNDS}\]"):
        GRPOConfig(dynamic_sampling=True, max_sampling_rounds=10**9)


def test_a_preference_run_without_evaluation_ends_without_an_empty_row(tmp_path):
    _, _, history = train_dpo("sentiment", DPOConfig(**QUIET, steps=2, batch_size=4, out_dir=str(tmp_path / "d")))
    assert all(set(row) - {"step"} for row in history)
    rows = [_strict_json(line) for line in (tmp_path / "d/metrics.jsonl").read_text().splitlines()]
    assert all(set(row) - {"step"} for row in rows) and len(rows) == 2


def test_checkpoint_digests_cover_every_file_but_the_state(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"1")
    (tmp_path / checkpoint.STATE_FILE).write_text("{}")
    assert set(checkpoint.file_digests(tmp_path)) == {"a.bin"}


class LengthScorer:
    """A learned reward as `sentiment_task` documents it: anything with `.score`, here with no weights at all."""

    def score(self, prompts, completions, tokenizer=None):
        return [float(len(c)) for c in completions]


def test_a_reward_model_without_weights_saves_and_resumes(tmp_path):
    run = tmp_path / "run"
    task = sentiment_task(LengthScorer())
    train_grpo(task, GRPOConfig(**ONLINE, steps=1, save_every=1, out_dir=str(run)))
    train_grpo(task, GRPOConfig(**ONLINE, steps=2, resume=str(run)))
