"""The task is part of the run: config.json records it, `--resume DIR` continues on it, and a resume that names
another task is refused with a one-line error, through the command line in a subprocess."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from minirlhf.trainers.grpo import GRPOConfig
from minirlhf.trainers.online import online_task

TINY = ["--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4", "--save-every", "1",
        "--eval-every", "0", "--progress", "false", "--device", "cpu"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "minirlhf", "grpo", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def saved(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def test_a_resume_continues_on_its_task_and_refuses_another(tmp_path):
    out = tmp_path / "run"
    first = cli("--task", "sentiment", *TINY, "--out-dir", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert saved(out)["task"] == "sentiment"

    resumed = cli("--resume", str(out), "--steps", "3", cwd=tmp_path)  # no --task: the run's own
    assert resumed.returncode == 0, resumed.stderr
    assert saved(out)["task"] == "sentiment" and [row["step"] for row in metrics(out)] == [0, 1, 2]

    other = cli("--resume", str(out), "--steps", "4", "--task", "arithmetic", cwd=tmp_path)
    assert other.returncode != 0
    last = other.stderr.strip().splitlines()[-1]
    assert "the run learns from other data (task: 'sentiment' -> 'arithmetic')" in last, other.stderr
    assert "Traceback" not in other.stderr
    assert [row["step"] for row in metrics(out)] == [0, 1, 2]  # nothing was trained


def test_a_resume_keeps_the_users_prompts_and_reward(tmp_path):
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": f"{a}+1="}) + "\n" for a in range(5)))
    (tmp_path / "rewards.py").write_text("def quarter(prompts, completions, **columns):\n"
                                         "    return [0.25] * len(completions)\n")
    out = tmp_path / "run"
    first = cli("--prompts", "prompts.jsonl", "--reward", "rewards.py:quarter", *TINY, "--out-dir", str(out),
                cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    prompts, reward = str((tmp_path / "prompts.jsonl").resolve()), f"{(tmp_path / 'rewards.py').resolve()}:quarter"
    assert (saved(out)["prompts"], saved(out)["reward"], saved(out)["task"]) == (prompts, [reward], None)

    (tmp_path / "elsewhere").mkdir()  # a resume from another folder finds the files the run started with
    resumed = cli("--resume", str(out), "--steps", "3", cwd=tmp_path / "elsewhere")
    assert resumed.returncode == 0, resumed.stderr
    assert saved(out)["reward"] == [reward]
    assert [row["reward"] for row in metrics(out)] == [0.25, 0.25, 0.25]  # the user's reward, not arithmetic's

    other = cli("--resume", str(out), "--steps", "4", "--task", "arithmetic", cwd=tmp_path)
    # the saved --prompts and a --task given on resume cannot both hold: refused before the run starts
    assert other.returncode != 0 and "give either --task or --prompts" in other.stderr.strip().splitlines()[-1]


def test_a_task_object_is_recorded_by_name_and_compared_on_resume(tmp_path):
    from minirlhf.tasks import arithmetic, sentiment
    from minirlhf.trainers.grpo import train_grpo

    config = GRPOConfig(steps=1, prompts_per_step=2, group_size=2, max_new_tokens=4, save_every=1, eval_every=0,
                        progress=False, device="cpu", out_dir=str(tmp_path))
    train_grpo(arithmetic.task(), config)
    assert saved(tmp_path)["task"] == "arithmetic"  # the object's name: what a resume compares
    resume = dataclasses.replace(config, out_dir=None, resume=str(tmp_path), steps=2)
    with pytest.raises(ValueError, match="other data .task: 'arithmetic' -> 'sentiment'"):
        train_grpo(sentiment.vader_task(), resume)
    assert online_task(arithmetic.task(), resume)[1].task == "arithmetic"
    assert online_task(None, resume)[0].name == "arithmetic"  # no object: config.task's (None = arithmetic)


def test_what_a_run_learns_from_is_checked_once_when_it_starts(tmp_path, monkeypatch):
    """The command line's route to a resumed run calls the identity check once (`run.begin`), and a resume with
    other data is refused by it before the model is loaded."""
    from minirlhf.__main__ import main
    from minirlhf.trainers.run import manifest

    out = tmp_path / "run"
    main(["grpo", *TINY, "--out-dir", str(out)])
    calls = []
    check = manifest.check_same_data
    monkeypatch.setattr(manifest, "check_same_data", lambda *args: calls.append(args) or check(*args))
    main(["grpo", "--resume", str(out), "--steps", "3"])
    assert len(calls) == 1 and calls[0][0]["data"]["task"] == calls[0][1]["task"] == "arithmetic"
    calls.clear()
    monkeypatch.setattr("minirlhf.trainers.online.setup_policy", lambda *args: pytest.fail("the model was loaded"))
    with pytest.raises(SystemExit):
        main(["grpo", "--resume", str(out), "--steps", "4", "--task", "sentiment"])
    assert len(calls) == 1


def test_the_two_sentiment_tasks_have_two_names_and_the_learned_one_is_not_rebuilt_from_its_name():
    from minirlhf.tasks import sentiment
    from minirlhf.tasks.registry import resolve_task

    class FakeRM:
        def score(self, prompts, completions, tokenizer=None):
            return [0.0] * len(completions)

    assert sentiment.vader_task().name == "sentiment" != sentiment.sentiment_task(FakeRM()).name
    assert resolve_task(GRPOConfig(task="sentiment")).reward_fn is sentiment.sentiment_reward  # --task sentiment
    with pytest.raises(ValueError, match=r"task 'sentiment-learned-reward' is made in Python by "
                                         r"minirlhf.tasks.sentiment.sentiment_task\(reward_model\)"):
        resolve_task(GRPOConfig(task=sentiment.LEARNED_REWARD_TASK))
