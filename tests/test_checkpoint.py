"""Checkpoints: a run killed and resumed is the same run (metrics and bit-identical weights), for every trainer;
checkpoints are written atomically, loaded without pickle, and refuse to resume into something else."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
import torch
from _checkpoints import restamp_checkpoint
from safetensors.torch import load_file

from minirlhf.data import load_preference_pairs
from minirlhf.errors import CheckpointDamaged
from minirlhf.tasks import Task, arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.kto import train_kto
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model
from minirlhf.trainers.run.checkpoint import Checkpointer, find_checkpoint, list_checkpoints, release_run_folder
from minirlhf.trainers.run.manifest import read_manifest
from minirlhf.trainers.sft import SFTConfig, train_sft

REPO = Path(__file__).resolve().parent.parent
HELD_OUT = arithmetic.problems("test")[:16]


def _held_out_accuracy(model, tokenizer) -> dict[str, float]:
    return {"accuracy": arithmetic.accuracy(model, tokenizer, HELD_OUT)}


def _quick_task() -> Task:
    """Arithmetic with a 16-problem held-out set, so that the tests spend their time training."""
    return dataclasses.replace(arithmetic.task(), evaluate=_held_out_accuracy)


def _length_task() -> Task:
    """A reward of the answer's length in characters: it varies across a batch, so PPO's value head and REINFORCE's
    baseline have something to learn (within a GRPO group of 4-token answers it ties: see _content_task)."""
    return dataclasses.replace(_quick_task(), reward_fn=lambda p, completions, **_: [len(c) / 4 for c in completions])


def _content_task() -> Task:
    """A reward that differs between the answers of one group, so that GRPO's advantages are not all 0."""
    return dataclasses.replace(_quick_task(), reward_fn=lambda p, completions, **_: [
        sum(map(ord, c)) % 5 / 4 for c in completions])


PAIRS = load_preference_pairs("sentiment")[:24]
ONLINE = dict(model="tiny-sft", device="cpu", prompts_per_step=2, group_size=4, max_new_tokens=4, eval_every=2,
              progress=False)
# method -> (config class, settings, run(config) -> history, files of trained weights)
METHODS = {
    "sft": (SFTConfig, dict(model="tiny", batch_size=4, eval_every=1000),
            lambda c: train_sft(arithmetic.sft_examples()[:64], c)[2], ["model"]),
    "reinforce-ema": (ReinforceConfig, dict(ONLINE, baseline="ema", beta=0.05),
                      lambda c: train_reinforce(_length_task(), c)[2], ["model"]),
    "grpo": (GRPOConfig, dict(ONLINE, beta=0.04, epochs=2, minibatch_size=4),
             lambda c: train_grpo(_content_task(), c)[2], ["model"]),
    # a sampler μ that is not p_θold (top-p, bf16) and its importance weight
    "grpo-sampler-correction": (GRPOConfig, dict(ONLINE, epochs=2, minibatch_size=4, top_p=0.9,
                                                 sampling_precision="bf16", behaviour_correction="sequence-mask"),
                                lambda c: train_grpo(_content_task(), c)[2], ["model"]),
    # a sampler two steps behind: the stale weights it samples from are in the checkpoint
    "grpo-sampler-lag": (GRPOConfig, dict(ONLINE, epochs=2, minibatch_size=4, sampler_lag=2, lr=5e-3,
                                          behaviour_correction="token-truncate"),
                         lambda c: train_grpo(_content_task(), c)[2], ["model"]),
    # Clip-Cov draws its tokens from torch's global generator, and the entropy bonus has a gradient of its own
    "grpo-clip-cov": (GRPOConfig, dict(ONLINE, epochs=2, minibatch_size=4, policy_loss="clip-cov", cov_ratio=0.3,
                                       clip_cov_lb=0.01, entropy_coef=0.05),
                      lambda c: train_grpo(_length_task(), c)[2], ["model"]),
    "grpo-kl-cov": (GRPOConfig, dict(ONLINE, epochs=2, minibatch_size=4, policy_loss="kl-cov", cov_ratio=0.3),
                    lambda c: train_grpo(_length_task(), c)[2], ["model"]),
    "ppo": (PPOConfig, dict(ONLINE, group_size=1, prompts_per_step=8, minibatch_size=4, epochs=2),
            lambda c: train_ppo(_length_task(), c)[2], ["model", "value_head"]),
    "reward-model": (RewardModelConfig, dict(model="tiny", batch_size=10, eval_every=1000, progress=False),
                     lambda c: train_reward_model(PAIRS, c)[2], ["model"]),
    "dpo": (DPOConfig, dict(batch_size=10, eval_every=2, eval_prompts=2, eval_samples=2, max_new_tokens=4,
                            progress=False),
            lambda c: train_dpo(PAIRS, c)[2], ["model"]),
    "kto": (DPOConfig, dict(loss_type="kto", batch_size=5, eval_every=2, eval_prompts=2, eval_samples=2,
                            max_new_tokens=4, progress=False),
            lambda c: train_kto(PAIRS, c)[2], ["model"]),
}


def _weights(out: Path, names: list[str]) -> dict[str, torch.Tensor]:
    latest = list_checkpoints(out)[-1]
    return {f"{name}/{k}": v for name in names for k, v in load_file(latest / f"{name}.safetensors").items()}


@pytest.mark.parametrize("method", list(METHODS))
def test_interrupted_and_resumed_run_is_the_same_run(method, tmp_path):
    """Run 5 steps with a checkpoint every 2; stop another run after 3 steps (its checkpoint is at step 2, and it
    logged a step after it, as a killed run does); resume it to 5. Same metrics, bit-identical weights (PPO: and
    value head), a metrics.jsonl without duplicates, and one more run from scratch is identical too (determinism)."""
    config_cls, settings, run, names = METHODS[method]
    full = config_cls(**settings, steps=5, save_every=2, out_dir=str(tmp_path / "full"))
    expected = run(full)

    stopped = config_cls(**settings, steps=3, save_every=2, out_dir=str(tmp_path / "resumed"))
    run(stopped)
    resumed = run(config_cls(**settings, steps=5, save_every=2, resume=str(tmp_path / "resumed")))

    assert resumed == expected
    on_disk = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert on_disk == expected
    assert [p.name for p in list_checkpoints(tmp_path / "resumed")] == ["step-000002", "step-000004"]
    a, b = _weights(tmp_path / "full", names), _weights(tmp_path / "resumed", names)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert run(config_cls(**settings, steps=5)) == expected  # same seed and config: the same numbers


def _cli(out: Path, steps: int, *extra: str) -> list[str]:
    return [sys.executable, "-m", "minirlhf", "grpo", "--model", "tiny-sft", "--device", "cpu", "--steps", str(steps),
            "--prompts-per-step", "2", "--group-size", "4", "--max-new-tokens", "4", "--beta", "0.04",
            "--eval-every", "1000", "--progress", "false", "--save-every", "2", "--out-dir", str(out), *extra]


@pytest.mark.slow  # three CLI processes, each importing torch and transformers
def test_grpo_killed_with_sigkill_resumes_to_bit_identical_weights(tmp_path):
    """The real thing: `python -m minirlhf grpo --save-every 2` killed with SIGKILL once a checkpoint exists, then
    resumed with --resume, ends with the metrics and bit-identical weights of a run that was never interrupted."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    steps = 12
    subprocess.run(_cli(tmp_path / "full", steps), env=env, cwd=REPO, check=True, capture_output=True)

    killed = subprocess.Popen(_cli(tmp_path / "run", steps), env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not list_checkpoints(tmp_path / "run") and time.time() < deadline:
        time.sleep(0.02)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL
    checkpoint = find_checkpoint(tmp_path / "run")
    assert not (tmp_path / "run" / "model").exists(), "the run finished before it could be killed"

    subprocess.run(_cli(tmp_path / "run", steps, "--resume", str(tmp_path / "run")), env=env, cwd=REPO, check=True,
                   capture_output=True)
    metrics = [(tmp_path / d / "metrics.jsonl").read_text() for d in ("full", "run")]
    assert metrics[0] == metrics[1] and metrics[0].count("\n") == steps + 1
    weights = [load_file(tmp_path / d / "model" / "model.safetensors") for d in ("full", "run")]
    assert weights[0].keys() == weights[1].keys()
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert int(checkpoint.name.removeprefix("step-")) < steps  # it did resume from the middle


def _tiny_checkpointer(tmp_path, **overrides) -> Checkpointer:
    """The Checkpointer of a tiny module; a fresh one belongs to the run of tmp_path (started here when there is
    none yet: its manifest, whose run id the checkpoints carry)."""
    config = GRPOConfig(out_dir=str(tmp_path), save_every=1, **overrides)
    module = torch.nn.Linear(3, 2)
    checkpointer = Checkpointer(config, torch.optim.AdamW(module.parameters()), {}, model=module)
    manifest = read_manifest(tmp_path)
    if config.resume is None and manifest is None:
        checkpointer.resume()
        release_run_folder(tmp_path)
    elif config.resume is None:
        checkpointer.run_id = manifest["run_id"]
    return checkpointer


def test_a_save_that_dies_midway_leaves_no_checkpoint_and_the_last_one_intact(tmp_path, monkeypatch):
    checkpointer = _tiny_checkpointer(tmp_path)
    checkpointer.save(1, [{"step": 0}])

    def disk_full(*args, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    with pytest.raises(OSError, match="No space"):
        checkpointer.save(2, [{"step": 0}, {"step": 1}])
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000001"]  # step 2 is absent, not half there
    assert find_checkpoint(tmp_path).name == "step-000001"
    monkeypatch.undo()
    checkpointer.save(2, [{"step": 0}, {"step": 1}])
    leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir()]
    assert sorted(leftovers) == ["step-000001", "step-000002"]  # the unfinished folder was cleaned up


def test_only_the_newest_checkpoints_are_kept(tmp_path):
    checkpointer = _tiny_checkpointer(tmp_path, keep_checkpoints=2)
    for step in range(1, 5):
        checkpointer.save(step, [])
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000003", "step-000004"]


def test_trainer_state_is_loaded_without_pickle(tmp_path):
    """A trainer_state.pt holding an arbitrary python object is refused by torch.load(weights_only=True)."""
    checkpointer = _tiny_checkpointer(tmp_path)
    folder = checkpointer.save(1, [])
    torch.save({"optimizer": Path("not/a/tensor")}, folder / "trainer_state.pt")
    with pytest.raises(CheckpointDamaged, match="trainer_state.pt is not the file this checkpoint was saved with"):
        _tiny_checkpointer(tmp_path, resume=str(folder)).resume()
    restamp_checkpoint(folder)  # a state.json that vouches for it too: torch.load itself must refuse the pickle
    with pytest.raises(Exception, match="[Ww]eights only load failed"):
        _tiny_checkpointer(tmp_path, resume=str(folder)).resume()


def test_resuming_into_a_different_model_is_a_clear_error(tmp_path):
    folder = _tiny_checkpointer(tmp_path).save(1, [])
    config = GRPOConfig(out_dir=str(tmp_path), resume=str(folder))
    wider = torch.nn.Linear(4, 2)
    before = wider.bias.detach().clone()  # its shape matches the file's, yet it must stay untouched
    checkpointer = Checkpointer(config, torch.optim.AdamW(wider.parameters()), {}, model=wider)
    with pytest.raises(ValueError, match=r"different model: weight has shape \(2, 3\) there, shape \(2, 4\) here"):
        checkpointer.resume()
    assert torch.equal(wider.bias, before)  # the check runs before any weight is loaded


def test_resume_errors_and_warnings_name_the_problem(tmp_path):
    folder = _tiny_checkpointer(tmp_path).save(1, [])
    with pytest.raises(FileExistsError, match="already holds checkpoints.*resume="):
        _tiny_checkpointer(tmp_path).resume()  # a fresh run must not overwrite a run's checkpoints
    with pytest.raises(FileNotFoundError, match="no checkpoint at"):
        _tiny_checkpointer(tmp_path / "elsewhere", resume=str(tmp_path / "nothing-here")).resume()
    module = torch.nn.Linear(3, 2)
    dpo = DPOConfig(out_dir=str(tmp_path), resume=str(folder))
    with pytest.raises(ValueError, match="written by a GRPOConfig run; this run is a DPOConfig"):
        Checkpointer(dpo, torch.optim.AdamW(module.parameters()), {}, model=module).resume()
    with pytest.warns(UserWarning, match=r"other settings \(lr: 0.0003 -> 0.1\)"):
        _tiny_checkpointer(tmp_path, resume=str(folder), lr=0.1).resume()
    state = json.loads((folder / "state.json").read_text())
    state["config"]["bta"] = 0.1
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(ValueError, match="no field 'bta' \\(did you mean 'beta'\\?\\)"):
        _tiny_checkpointer(tmp_path, resume=str(folder)).resume()


def test_resume_without_out_dir_keeps_writing_into_the_run_folder(tmp_path):
    folder = _tiny_checkpointer(tmp_path).save(1, [])
    assert GRPOConfig(resume=str(folder)).out_dir == str(tmp_path)
    assert GRPOConfig(resume=str(tmp_path)).out_dir == str(tmp_path)


def test_an_error_mid_run_keeps_the_metrics_and_checkpoints_written_so_far(tmp_path):
    """A reward function that breaks at step 3 stops the run with its error; the metrics of steps 0-2 and the
    checkpoints stay, and the run resumes from them once the reward is fixed."""
    calls = []

    def flaky_reward(prompts, completions, **_):
        calls.append(1)
        return [float("nan") if len(calls) == 4 else 1.0] * len(completions)

    task = dataclasses.replace(_quick_task(), reward_fn=flaky_reward)
    config = GRPOConfig(**ONLINE, steps=5, save_every=1, out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="flaky_reward returned nan"):
        train_grpo(task, config)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1, 2]
    assert find_checkpoint(tmp_path).name == "step-000003"
    _, _, history = train_grpo(dataclasses.replace(task, reward_fn=lambda p, c, **_: [1.0] * len(c)),
                               dataclasses.replace(config, resume=str(tmp_path)))
    assert [r["step"] for r in history] == [0, 1, 2, 3, 4, 5]


def test_fp16_loss_scale_is_saved_and_restored(tmp_path):
    """fp16 training adapts its loss scale as it goes; a resumed run must continue from the same scale."""
    model = torch.nn.Linear(3, 2)
    config = GRPOConfig(out_dir=str(tmp_path), save_every=1, progress=False)

    def checkpointer(scale: float) -> tuple[Checkpointer, torch.amp.GradScaler]:
        scaler = torch.amp.GradScaler("cpu", init_scale=scale)
        scaler.scale(torch.ones(()))  # the scale tensor is created lazily, at the first use
        return Checkpointer(config, torch.optim.AdamW(model.parameters()), {}, scaler, model=model), scaler

    saving, _ = checkpointer(scale=1024.0)
    saving.save(1, [])
    resuming, scaler = checkpointer(scale=2.0**16)
    resuming.restore(find_checkpoint(tmp_path))
    assert scaler.get_scale() == 1024.0


def test_cli_resume_continues_with_the_runs_own_settings(tmp_path, capsys):
    """`--resume DIR` starts from the interrupted run's config; only the flags given again change it."""
    from minirlhf.__main__ import main

    run = ["grpo", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "3", "--eval-every", "100",
           "--save-every", "2", "--progress", "false"]
    main([*run, "--steps", "2", "--out-dir", str(tmp_path)])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a changed setting would warn
        main(["grpo", "--resume", str(tmp_path), "--steps=4"])
    config = json.loads((tmp_path / "config.json").read_text())
    assert (config["prompts_per_step"], config["group_size"], config["steps"]) == (2, 2, 4)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-000002", "step-000004"]


@pytest.mark.parametrize("before, after", [
    ({}, {"report_to": "tensorboard"}),
    ({}, {"gradient_accumulation_steps": 2}),
    ({"task": "lab", "task_option": ["mix=.5,.5,0"]}, {"task": "lab", "task_option": ["mix=0.5,0.5,0.0"]}),
    ({"task": "lab", "task_option": ["filler=true", "tolerance=0"]}, {"task": "lab"}),
])
def test_resuming_with_what_changes_nothing_computed_does_not_warn(tmp_path, before, after):
    folder = _tiny_checkpointer(tmp_path, **before).save(1, [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _tiny_checkpointer(tmp_path, resume=str(folder), **after).resume()


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_resuming_a_decaying_schedule_with_other_steps_warns(tmp_path, schedule):
    folder = _tiny_checkpointer(tmp_path, lr_schedule=schedule, steps=4).save(1, [])
    with pytest.warns(UserWarning, match=rf"steps: 4 -> 8, over which the {schedule} lr schedule decays"):
        _tiny_checkpointer(tmp_path, resume=str(folder), lr_schedule=schedule, steps=8).resume()


def test_resuming_a_constant_lr_with_more_steps_does_not_warn(tmp_path):
    folder = _tiny_checkpointer(tmp_path, steps=4).save(1, [])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _tiny_checkpointer(tmp_path, resume=str(folder), steps=8).resume()
