"""No command writes or deletes what it reads, and a run is bound to the exact data it learned from.

For every trainer's config, what it reads (the checkpoint it resumes, a model folder, a prompt or pair file or
folder) and what it writes (out_dir, a fork's folder) are generated on a real tree, under many spellings: a config
whose write place overlaps a read place is refused before anything is touched, naming both. A pairs or prompts folder
is fingerprinted (an edit inside it is seen on resume) and made absolute when the run starts (a resume from another
working folder reads the run's own data, not a folder of the same name there).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirlhf.errors import UserError
from minirlhf.trainers.dpo import DPOConfig
from minirlhf.trainers.grpo import GRPOConfig
from minirlhf.trainers.kto import KTOConfig
from minirlhf.trainers.ppo import PPOConfig
from minirlhf.trainers.reinforce import ReinforceConfig
from minirlhf.trainers.reward_model import RewardModelConfig
from minirlhf.trainers.run.manifest import absolute_data_paths, data_identity, fingerprints
from minirlhf.trainers.sft import SFTConfig

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
ONLINE = [GRPOConfig, PPOConfig, ReinforceConfig]
PAIRS = [DPOConfig, KTOConfig, RewardModelConfig]
CONFIGS = [*ONLINE, *PAIRS, SFTConfig]
PAIR = {"prompt": "Hi", "chosen": " good", "rejected": " bad"}


@pytest.fixture
def tree(tmp_path, monkeypatch):
    """run/ with a checkpoint, a model folder, a prompts file and a pairs folder, each inside folders of its own."""
    (tmp_path / "run/checkpoints/step-000002").mkdir(parents=True)
    (tmp_path / "run/checkpoints/step-000002/state.json").write_text("{}")
    (tmp_path / "models/mine").mkdir(parents=True)
    (tmp_path / "models/mine/config.json").write_text("{}")
    (tmp_path / "data/pairs").mkdir(parents=True)
    (tmp_path / "data/pairs/train.jsonl").write_text(json.dumps(PAIR) + "\n")
    (tmp_path / "data/prompts.jsonl").write_text(json.dumps({"prompt": "1+1="}) + "\n")
    (tmp_path / "link").symlink_to(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


READS = {"model": "models/mine", "prompts": "data/prompts.jsonl", "pairs": "data/pairs"}
WRITES = ["out", "models", "models/mine", "models/mine/sub", "data", "data/pairs/x", "link", "link/pairs", ".",
          "run/checkpoints/step-000002/x", "elsewhere/deep"]


def _spell(tree: Path, place: str, how: str) -> str:
    return {"relative": place, "absolute": str(tree / place), "home": f"~/{place}",
            "dotdot": f"run/../{place}"}[how]


def _overlaps(tree: Path, a: str, b: str) -> bool:
    a, b = Path(os.path.realpath(tree / a)).parts, Path(os.path.realpath(tree / b)).parts
    return a[:len(b)] == b or b[:len(a)] == a


@FUZZ
@given(st.sampled_from(CONFIGS), st.sampled_from(sorted(READS)), st.sampled_from(WRITES),
       st.sampled_from(["relative", "absolute", "home", "dotdot"]))
def test_a_run_never_writes_where_it_reads(tree, config_cls, field, write, how):
    if field == "prompts" and config_cls in PAIRS or field == "pairs" and config_cls not in PAIRS:
        field = "model"
    before = sorted(str(p) for p in tree.rglob("*"))
    values = {field: READS[field], "out_dir": _spell(tree, write, how)}
    if _overlaps(tree, READS[field], write):
        with pytest.raises(UserError, match=rf"{config_cls.__name__}\.out_dir=.* {config_cls.__name__}\.{field}="):
            config_cls(**values)
    else:
        config = config_cls(**values)
        assert Path(config.out_dir).is_absolute() and "~" not in config.out_dir
    assert sorted(str(p) for p in tree.rglob("*")) == before  # nothing written or deleted


@pytest.mark.parametrize("fork", ["run", "~/run", "./run/", "run/checkpoints/..", "."])
@pytest.mark.parametrize("config_cls", [GRPOConfig, DPOConfig])
def test_a_fork_into_the_run_it_forks_is_refused_before_anything_is_touched(tree, fork, config_cls):
    """Found: `--resume RUN --fork-to RUN --overwrite` deleted the run, the forked checkpoint included, then blamed
    a damaged checkpoint."""
    before = sorted(str(p) for p in tree.rglob("*"))
    with pytest.raises(UserError, match=rf"{config_cls.__name__}\.fork_to=.* holds {config_cls.__name__}\.resume="):
        config_cls(resume="run", fork_to=fork, overwrite=True)
    assert sorted(str(p) for p in tree.rglob("*")) == before


def test_a_resume_in_place_writes_into_its_own_run(tree):
    config = GRPOConfig(resume="run")
    assert config.out_dir == str(tree / "run")


def test_a_pairs_folder_is_fingerprinted_and_an_edit_inside_it_is_seen(tree):
    """Found: chosen and rejected swapped inside a pairs folder between a run and its resume went unseen."""
    data = data_identity({"pairs": "data/pairs"})
    before = fingerprints(data)
    assert set(before) == {"pairs"}
    swapped = {**PAIR, "chosen": PAIR["rejected"], "rejected": PAIR["chosen"]}
    (tree / "data/pairs/train.jsonl").write_text(json.dumps(swapped) + "\n")
    assert fingerprints(data) != before
    (tree / "data/pairs/train.jsonl").write_text(json.dumps(PAIR) + "\n")
    assert fingerprints(data) == before
    (tree / "data/pairs/test.jsonl").write_text(json.dumps(PAIR) + "\n")  # a new split is an edit too
    assert fingerprints(data) != before


def test_a_relative_data_folder_is_made_absolute_when_the_run_starts(tree, monkeypatch):
    """Found: a run on a relative pairs folder, resumed from another working folder holding its own folder of that
    name, trained on the other data."""
    recorded = absolute_data_paths({"pairs": "data/pairs", "prompts": "data/prompts.jsonl", "task": "arithmetic"})
    assert recorded == {"pairs": str(tree / "data/pairs"), "prompts": str(tree / "data/prompts.jsonl"),
                        "task": "arithmetic"}
    elsewhere = tree / "elsewhere"
    (elsewhere / "data/pairs").mkdir(parents=True)
    monkeypatch.chdir(elsewhere)
    assert data_identity({"pairs": "data/pairs"}) != data_identity({"pairs": recorded["pairs"]})
    assert absolute_data_paths({"pairs": "sentiment"}) == {"pairs": "sentiment"}  # a shipped name stays a name
