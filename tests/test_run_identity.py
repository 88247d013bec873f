"""A run folder knows what it is (docs/checkpoints.md, "One folder, one run"): each rule tested through the command
line, in a subprocess, as a user would meet it. Tiny budgets: GRPO for 2 steps of 2 prompts x 2 completions of 4
tokens."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirlhf.errors import CheckpointDamaged
from minirlhf.trainers.grpo import GRPOConfig
from minirlhf.trainers.run.checkpoint import LOCK_FILE, list_checkpoints
from minirlhf.trainers.run.manifest import MANIFEST_FILE, RUN_FILES, absolute_data_paths, fingerprints, read_manifest

REPO = Path(__file__).resolve().parent.parent
GRPO = ["grpo", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4", "--eval-every", "0",
        "--save-every", "1", "--progress", "false"]


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("MINIRLHF_TRACEBACK", None)
    return subprocess.run([sys.executable, "-m", "minirlhf", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def refused(result: subprocess.CompletedProcess, message: str) -> None:
    """A user error: exit status 2, and one line on stderr (after any progress output), no traceback."""
    assert result.returncode == 2, result.stderr[-2000:]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("python -m minirlhf ") and ": error: " in last, last
    assert message in last, last


def files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def steps(folder: Path) -> list[int]:
    return [json.loads(line)["step"] for line in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    """One GRPO run of 2 steps with a checkpoint after each: run/ (copy it before changing it)."""
    root = tmp_path_factory.mktemp("runs")
    result = cli(*GRPO, "--steps", "2", "--out-dir", "run", cwd=root)
    assert result.returncode == 0, result.stderr[-2000:]
    return root / "run"


def copy_of(run: Path, tmp_path: Path, name: str = "run") -> Path:
    shutil.copytree(run, tmp_path / name)
    return tmp_path / name


def test_a_run_writes_its_manifest_and_its_checkpoints_carry_its_id(finished_run):
    manifest = json.loads((finished_run / MANIFEST_FILE).read_text())
    assert manifest["method"] == "GRPOConfig" and len(manifest["run_id"]) == 16
    assert sorted(manifest["files"]) == sorted([MANIFEST_FILE, "metrics.jsonl", "checkpoints", "model",
                                                "config.json"])
    assert {p.name for p in finished_run.iterdir()} == set(manifest["files"])  # what it wrote, nothing else
    for checkpoint in list_checkpoints(finished_run):
        assert json.loads((checkpoint / "state.json").read_text())["run_id"] == manifest["run_id"]


def test_a_checkpoint_copied_out_of_its_run_is_refused_or_forked_when_asked(finished_run, tmp_path):
    (tmp_path / "Downloads").mkdir()
    shutil.copytree(finished_run / "checkpoints" / "step-000001", tmp_path / "Downloads" / "step-000001")
    (tmp_path / "config.json").write_text('{"an app": 1}')  # the grandparent's own files stay untouched
    before = files(tmp_path)
    refused(cli("grpo", "--resume", "Downloads/step-000001", "--steps", "3", cwd=tmp_path),
            "is not inside its own run's folder")
    assert files(tmp_path) == before
    forked = cli("grpo", "--resume", "Downloads/step-000001", "--steps", "3", "--fork-to", "fork", cwd=tmp_path)
    assert forked.returncode == 0, forked.stderr[-2000:]
    assert steps(tmp_path / "fork") == [0, 1, 2]  # the checkpoint's history, then the fork's own steps
    manifest = json.loads((tmp_path / "fork" / MANIFEST_FILE).read_text())
    original = json.loads((finished_run / MANIFEST_FILE).read_text())
    assert manifest["forked_from"]["run_id"] == original["run_id"] != manifest["run_id"]
    assert {k: v for k, v in files(tmp_path).items() if not k.startswith("fork/")} == before
    # a fork continues as its own run: resuming it needs no flag
    assert cli("grpo", "--resume", "fork", "--steps", "4", cwd=tmp_path).returncode == 0
    assert steps(tmp_path / "fork") == [0, 1, 2, 3]


def test_a_checkpoint_of_another_run_in_a_run_folder_is_refused(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    (run / MANIFEST_FILE).write_text(json.dumps(manifest | {"run_id": "0" * 16}))
    refused(cli("grpo", "--resume", "run", "--steps", "3", cwd=tmp_path), f"belongs to run {manifest['run_id']}")


def test_a_rewind_moves_the_abandoned_branch_aside_and_the_next_resume_continues_the_new_one(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    abandoned = files(run / "checkpoints" / "step-000002")
    result = cli("grpo", "--resume", "run/checkpoints/step-000001", "--steps", "2", "--seed", "7", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "rewinding" in result.stderr
    aside = [p for p in (run / "checkpoints").iterdir() if p.name.startswith("abandoned-")]
    assert len(aside) == 1 and files(aside[0] / "step-000002") == abandoned  # moved, never deleted
    assert (aside[0] / "model").is_dir() and steps(aside[0]) == [0, 1]
    new_branch = json.loads((run / "checkpoints" / "step-000002" / "state.json").read_text())
    assert new_branch["config"]["seed"] == 7  # step-000002 is the new branch's
    assert cli("grpo", "--resume", "run", "--steps", "3", cwd=tmp_path).returncode == 0
    continued = json.loads((run / "checkpoints" / "step-000003" / "state.json").read_text())
    assert continued["history"][:2] == new_branch["history"] and continued["config"]["seed"] == 7


def test_resume_with_fewer_steps_than_done_is_refused_and_changes_nothing(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    before = files(run)
    refused(cli("grpo", "--resume", "run", "--steps", "1", cwd=tmp_path), "is at step 2, but steps=1")
    assert files(run) == before


def test_overwrite_deletes_only_what_the_manifest_lists(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    (run / "notes.txt").write_text("mine")
    assert cli(*GRPO, "--steps", "1", "--out-dir", "run", "--overwrite", cwd=tmp_path).returncode == 0
    assert (run / "notes.txt").read_text() == "mine" and steps(run) == [0]
    app = tmp_path / "app"
    (app / "model").mkdir(parents=True)
    (app / "model" / "__init__.py").write_text("x = 1\n")
    (app / "config.json").write_text("{}")
    before = files(app)
    refused(cli(*GRPO, "--steps", "1", "--out-dir", "app", "--overwrite", cwd=tmp_path),
            "holds config.json, model, which no minirlhf run wrote there")
    assert files(app) == before


def test_overwrite_never_deletes_a_name_a_tampered_manifest_adds(finished_run, tmp_path):
    (tmp_path / "victim").mkdir()
    (tmp_path / "victim" / "keep.txt").write_text("mine")
    run = copy_of(finished_run, tmp_path)
    (run / "notes.txt").write_text("mine")
    manifest = json.loads((run / MANIFEST_FILE).read_text())
    for added in ("notes.txt", "../victim"):
        (run / MANIFEST_FILE).write_text(json.dumps({**manifest, "files": [*manifest["files"], added]}))
        before = files(tmp_path)
        refused(cli(*GRPO, "--steps", "1", "--out-dir", "run", "--overwrite", cwd=tmp_path),
                f"field 'files' lists {added!r}, which no run writes")
        assert files(tmp_path) == before


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(added=st.one_of(st.text(min_size=0, max_size=12), st.sampled_from(["..", ".", "/", "../x", "a/../..", "~",
                                                                          ".run.lock", "model/..", "Model"])))
def test_a_manifest_may_list_only_the_names_a_run_writes(tmp_path, added):
    """Whatever else `files` lists (a path, a user's file, an empty name), the manifest is damaged, so --overwrite
    deletes nothing: only the names of RUN_FILES are ever deleted."""
    manifest = {"run_id": "r", "method": "GRPOConfig", "data": {}, "fingerprints": {}, "rewinds": [],
                "files": [*RUN_FILES, added]}
    (tmp_path / MANIFEST_FILE).write_text(json.dumps(manifest))
    if added in RUN_FILES:
        assert read_manifest(tmp_path)["files"][-1] == added
    else:
        with pytest.raises(CheckpointDamaged, match="which no run writes"):
            read_manifest(tmp_path)


def test_a_fork_never_writes_into_the_checkpoint_or_its_runs_checkpoints(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    before = files(run)
    for inside in ("run/checkpoints", "run/checkpoints/fork", "run/checkpoints/step-000002/model"):
        with pytest.raises(ValueError, match="a folder of the run it forks"):
            GRPOConfig(resume=str(run), steps=3, fork_to=str(tmp_path / inside))
    refused(cli("grpo", "--resume", "run", "--steps", "3", "--fork-to", "run/checkpoints/step-000002", cwd=tmp_path),
            "a folder of the run it forks")
    assert files(run) == before


def test_an_out_dir_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "afile").write_text("mine")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        GRPOConfig(out_dir=str(tmp_path / "afile"))
    assert (tmp_path / "afile").read_text() == "mine"


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(st.characters(whitelist_categories=("Ll", "Nd")), min_size=1, max_size=8),
       depth=st.integers(0, 2))
def test_a_data_file_named_relatively_or_absolutely_is_one_file(tmp_path, name, depth, monkeypatch):
    """The command line records data files by absolute path: a resume from another folder finds them, and the same
    file spelled either way is the same data."""
    folder = tmp_path.joinpath(*["d"] * depth)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text('{"prompt": "1+1="}\n')
    (folder / f"{name}.py").write_text("def f(prompts, completions): return [0.0] * len(completions)\n")
    monkeypatch.chdir(tmp_path)
    relative = {"prompts": str(Path(*["d"] * depth, f"{name}.jsonl")), "reward": [f"{Path(*['d'] * depth, name)}.py:f"],
                "steps": 3, "task": "sentiment"}
    absolute = absolute_data_paths(relative)
    assert absolute["prompts"] == str((folder / f"{name}.jsonl").resolve())
    assert absolute["reward"] == [f"{(folder / f'{name}.py').resolve()}:f"]
    assert absolute_data_paths(absolute) == absolute and (absolute["steps"], absolute["task"]) == (3, "sentiment")
    monkeypatch.chdir(folder)
    assert fingerprints(absolute) == fingerprints(absolute_data_paths({"prompts": f"{name}.jsonl",
                                                                       "reward": [f"{name}.py:f"]}))


def test_the_module_of_a_module_task_is_fingerprinted(tmp_path, monkeypatch):
    (tmp_path / "my_task_mod.py").write_text("def make():\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = fingerprints({"task": "my_task_mod:make"})
    assert list(before) == ["task"]
    (tmp_path / "my_task_mod.py").write_text("def make():\n    return 1\n")
    assert fingerprints({"task": "my_task_mod:make"}) != before
    found = fingerprints({"task": "no_such_module_here:make", "reward": ["json.decoder:JSONDecoder"]})
    assert list(found) == ["reward[0]"]


def test_the_model_folder_trained_from_is_never_the_out_dir(finished_run, tmp_path):
    run = copy_of(finished_run, tmp_path)
    before = files(run)
    for out_dir in ("run/model", "run"):
        refused(cli(*GRPO, "--steps", "1", "--model", "run/model", "--out-dir", out_dir, "--overwrite", cwd=tmp_path),
                "GRPOConfig.model='run/model'")
    assert files(run) == before
    refused(cli(*GRPO, "--steps", "1", "--out-dir", "run/model", "--overwrite", cwd=tmp_path),
            "(it is a model folder, not a run's out_dir)")


def test_resuming_with_other_data_or_a_changed_data_file_is_refused(tmp_path):
    pairs = [{"prompt": f"p{i}", "chosen": " good", "rejected": " bad"} for i in range(4)]
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    shutil.copy(tmp_path / "pairs.jsonl", tmp_path / "other.jsonl")
    dpo = ["dpo", "--model", "tiny", "--batch-size", "2", "--eval-every", "0", "--save-every", "1", "--progress",
           "false", "--max-new-tokens", "4"]
    assert cli(*dpo, "--pairs", "pairs.jsonl", "--steps", "1", "--out-dir", "run", cwd=tmp_path).returncode == 0
    refused(cli("dpo", "--resume", "run", "--steps", "2", "--pairs", "other.jsonl", cwd=tmp_path),
            f"the run learns from other data (pairs: {str(tmp_path / 'pairs.jsonl')!r} -> "
            f"{str(tmp_path / 'other.jsonl')!r})")
    (tmp_path / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs[::-1]))
    refused(cli("dpo", "--resume", "run", "--steps", "2", cwd=tmp_path),
            f"data file pairs={str(tmp_path / 'pairs.jsonl')!r} changed since the run started")


DIES_IN_A_LIVE_PROCESS = textwrap.dedent("""
    import dataclasses, subprocess, sys
    from minirlhf.tasks import arithmetic
    from minirlhf.trainers.grpo import GRPOConfig, train_grpo

    def broken(prompts, completions, **columns):
        raise ZeroDivisionError("a bug in the reward")

    task = dataclasses.replace(arithmetic.task(), reward_fn=broken, evaluate=None)
    config = GRPOConfig(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=4, eval_every=0, save_every=1,
                        progress=False, out_dir="run")
    try:
        train_grpo(task, config)
    except ZeroDivisionError:
        kept = sys.exc_info()  # as a notebook keeps it (sys.last_traceback): the dead run's frames stay alive
    other = subprocess.run([sys.executable, "-m", "minirlhf", *sys.argv[1:]], capture_output=True, text=True)
    print("other run:", other.returncode, other.stderr.strip().splitlines()[-1:])
""")


def test_a_run_that_died_inside_a_live_process_lets_go_of_its_folder(tmp_path):
    (tmp_path / "kernel.py").write_text(DIES_IN_A_LIVE_PROCESS)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    result = subprocess.run([sys.executable, "kernel.py", *GRPO, "--steps", "1", "--out-dir", "run", "--overwrite"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "other run: 0 " in result.stdout, result.stdout + result.stderr[-2000:]
    assert not (tmp_path / "run" / LOCK_FILE).exists()


def test_a_manifest_naming_a_file_relatively_accepts_the_same_file_named_absolutely(tmp_path, monkeypatch):
    """Runs recorded before data paths were absolute: the same file, spelled either way, is the same data."""
    from minirlhf.errors import UserError
    from minirlhf.trainers.run.manifest import check_same_data, new_manifest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "p.jsonl").write_text('{"prompt": "1+1="}\n')
    (tmp_path / "q.jsonl").write_text('{"prompt": "2+2="}\n')
    manifest = new_manifest({"prompts": "p.jsonl", "task": None}, "GRPOConfig")
    check_same_data(manifest, {"prompts": str(tmp_path / "p.jsonl"), "task": None}, "the run")
    with pytest.raises(UserError, match="the run learns from other data"):
        check_same_data(manifest, {"prompts": str(tmp_path / "q.jsonl"), "task": None}, "the run")
