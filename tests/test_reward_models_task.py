"""The shipped task `reward-models`: RL against saved reward models, one or an ensemble, from the command line.
Its reward is `ensemble_reward` of the members' scores standardised on p_ref's texts; a run records the folders as
absolute paths and resumes on them from another folder; a bad knob is refused before anything trains, naming it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minirlhf.data import load_preference_pairs
from minirlhf.tasks.reward_models import ENSEMBLE_RULES, RewardModel, ensemble_reward, task

TEXTS = (["The film was", "The food was", "Our stay was"], [" wonderful and warm.", " cold.", " fine, I guess."])
TINY = ["--model", "tiny", "--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4",
        "--save-every", "1", "--eval-every", "0", "--progress", "false", "--device", "cpu"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> Path:
    """rm_a and rm_b: the tiny backbone with random heads (two different scorers), saved by RewardModel.save; and
    broken copies of rm_a, each without one of the files a saved reward model needs."""
    root = tmp_path_factory.mktemp("reward_models")
    for name, seed in (("rm_a", 0), ("rm_b", 1)):
        model = RewardModel.from_pretrained_lm("tiny", device="cpu")
        torch.manual_seed(seed)
        torch.nn.init.normal_(model.head.summary.weight)  # the head starts at zero: every score would be 0
        model.save(root / name)
    for name, missing in (("no_head", "reward_head.safetensors"), ("no_weights", "model.safetensors"),
                          ("no_config", "config.json"), ("no_tokenizer", "tokenizer_config.json")):
        shutil.copytree(root / "rm_a", root / name)
        (root / name / missing).unlink()
    (root / "empty").mkdir()
    return root


def p_ref_texts() -> tuple[list[str], list[str]]:
    """The first 128 shipped sentiment test pairs: each prompt twice, with its chosen and its rejected text."""
    pairs = load_preference_pairs("sentiment", "test")[:128]
    return [p.prompt for p in pairs] * 2, [p.chosen for p in pairs] + [p.rejected for p in pairs]


def standardised(folder: Path) -> torch.Tensor:
    """(B,) one member's score of TEXTS, less its mean on p_ref's texts, over its standard deviation there."""
    model = RewardModel.load(folder)
    reference = torch.tensor(model.score(*p_ref_texts()))
    return (torch.tensor(model.score(*TEXTS)) - reference.mean()) / reference.std()


@pytest.mark.parametrize("rule", ENSEMBLE_RULES)
def test_the_reward_is_the_rule_over_the_members_standardised_scores(folders, rule):
    members = torch.stack([standardised(folders / "rm_a"), standardised(folders / "rm_b")])  # (K, B)
    assert not torch.allclose(members[0], members[1])  # two scorers, so that the rules differ
    made = task(models=(str(folders / "rm_a"), str(folders / "rm_b")), rule=rule, lam=0.5)
    reward = torch.tensor(made.reward_fn(*TEXTS))
    torch.testing.assert_close(reward, ensemble_reward(members, rule, 0.5), rtol=1e-4, atol=1e-4)
    assert made.name == "reward-models" and made.evaluate is not None


def test_one_folder_is_that_reward_model_standardised(folders):
    made = task(models=(str(folders / "rm_b"),), rule="mean-var", lam=3.0)  # one member: the rule cannot matter
    torch.testing.assert_close(torch.tensor(made.reward_fn(*TEXTS)), standardised(folders / "rm_b"),
                               rtol=1e-4, atol=1e-4)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-m", "minirlhf", "grpo", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_run_records_the_folders_absolute_and_resumes_on_them_from_elsewhere(folders, tmp_path):
    for name in ("rm_a", "rm_b"):
        shutil.copytree(folders / name, tmp_path / name)
    out = tmp_path / "run"
    first = cli("--task", "reward-models", "--task-option", "models=rm_a,rm_b", "rule=mean-std", *TINY,
                "--out-dir", str(out), cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    config = json.loads((out / "config.json").read_text())
    models = f"models={tmp_path.resolve() / 'rm_a'},{tmp_path.resolve() / 'rm_b'}"
    assert (config["task"], config["task_option"]) == ("reward-models", [models, "rule=mean-std"])

    (tmp_path / "elsewhere").mkdir()  # no rm_a here: the run reads its own folders
    resumed = cli("--resume", str(out), "--steps", "3", cwd=tmp_path / "elsewhere")
    assert resumed.returncode == 0, resumed.stderr
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0, 1, 2]
    assert all(torch.isfinite(torch.tensor(row["reward"])) for row in rows)


FOLDER = "--task-option 'models="  # a folder knob is named by its absolute path: the command line records it so


@pytest.mark.parametrize("options, named", [
    (["models=nowhere"], [FOLDER, "nowhere' is no folder (a RewardModel.save folder, or a reward-model run's"]),
    (["models=empty"], [FOLDER, "empty' holds no saved reward model: its config (config.json) is missing"]),
    (["models=no_config"], [FOLDER, "its config (config.json) is missing"]),
    (["models=no_weights"], [FOLDER, "its weights (model.safetensors or model.safetensors.index.json) is missing"]),
    (["models=no_head"], [FOLDER, "its head (reward_head.safetensors) is missing"]),
    (["models=no_tokenizer"], [FOLDER, "its tokenizer (tokenizer_config.json) is missing"]),
    (["models="], ["--task-option 'models=': RewardModelsConfig.models=('',) holds an empty folder name"]),
    (["models=rm_a,"], [FOLDER, "holds an empty folder name (a comma too many?)"]),
    (["models=rm_a,rm_b,rm_a"], [FOLDER, "rm_a more than once: a member counted twice is not a second opinion"]),
    (["models=rm_a,./rm_a"], [FOLDER, "rm_a more than once"]),
    (["models=rm_a", "rule=max"], ["--task-option 'rule=max': RewardModelsConfig.rule must be one of: mean, min"]),
    (["models=rm_a", "lam=-1"], ["--task-option 'lam=-1': RewardModelsConfig.lam must be >= 0"]),
    (["models=rm_a", "lam=nan"], ["--task-option 'lam=nan': RewardModelsConfig.lam must be >= 0"]),
    (["models=rm_a", "lam=inf"], ["--task-option 'lam=inf': RewardModelsConfig.lam must be >= 0 and finite"]),
    (["models=rm_a", "lam=much"], ["--task-option 'lam=much': the value must be a number"]),
    (["rule=min"], ["--task reward-models --task-option: RewardModelsConfig.models=(): give at least one"]),
    ([], ["--task reward-models --task-option: RewardModelsConfig.models=(): give at least one"]),
    (["folders=rm_a"], ["--task-option 'folders=rm_a' must be NAME=VALUE, NAME one of the reward-models task's"]),
])
def test_a_bad_option_is_refused_naming_it_before_any_model_is_loaded(folders, options, named, monkeypatch, capsys):
    from minirlhf.__main__ import main

    monkeypatch.chdir(folders)
    monkeypatch.setattr("minirlhf.trainers.online.setup_policy", lambda *args: pytest.fail("a model was loaded"))
    with pytest.raises(SystemExit) as exit_:
        main(["grpo", "--task", "reward-models", *(["--task-option", *options] if options else []), "--device",
              "cpu"])
    assert exit_.value.code == 2
    error = capsys.readouterr().err
    assert all(part in error for part in named), error


@pytest.mark.parametrize("method", ["reinforce", "rloo", "ppo"])
def test_every_online_method_trains_against_it(folders, method, tmp_path):
    from minirlhf.__main__ import main

    out = tmp_path / "run"
    main([method, "--task", "reward-models", "--task-option", f"models={folders / 'rm_a'},{folders / 'rm_b'}",
          *TINY, "--steps", "1", *(["--minibatch-size", "4"] if method == "ppo" else []), "--out-dir", str(out)])
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [0] and torch.isfinite(torch.tensor(rows[0]["reward"]))
    assert json.loads((out / "config.json").read_text())["task"] == "reward-models"


def test_a_config_given_in_python_records_the_folders_absolute(folders, monkeypatch):
    from minirlhf.trainers.grpo import GRPOConfig
    from minirlhf.trainers.online import online_task

    monkeypatch.chdir(folders)
    made, config = online_task(None, GRPOConfig(task="reward-models", task_option=["models=rm_a", "rule=mean"]))
    assert config.task_option == [f"models={folders.resolve() / 'rm_a'}", "rule=mean"]
    assert made.options == (f"models={folders.resolve() / 'rm_a'}", "rule=mean")


def test_a_member_with_another_tokenizer_is_refused_naming_its_folder(folders, tmp_path):
    """The ensemble tokenizes every text once, with its first member's tokenizer: a member trained on another
    vocabulary would read other tokens than it learned, and score noise without a word."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from minirlhf.tasks.reward_models import RewardModelsConfig

    other = tmp_path / "rm_other_vocabulary"
    shutil.copytree(folders / "rm_b", other)
    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.train_from_iterator(["a good film", "a bad film"] * 20, trainers.BpeTrainer(vocab_size=300,
                                                                                    special_tokens=["<|endoftext|>"]))
    PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>").save_pretrained(other)
    with pytest.raises(ValueError, match=r"RewardModelsConfig.models: '.*rm_other_vocabulary' has another tokenizer"):
        RewardModelsConfig(models=(str(folders / "rm_a"), str(other)))
    assert RewardModelsConfig(models=(str(folders / "rm_a"), str(folders / "rm_b"))).models  # one vocabulary: kept


def test_a_folder_with_a_comma_is_refused_since_the_recorded_option_cannot_spell_it(folders, tmp_path):
    """The config records its folders as models=F1,F2 (`options`), which a resume splits at each comma."""
    from minirlhf.tasks.reward_models import RewardModelsConfig

    shutil.copytree(folders / "rm_a", tmp_path / "rm,a")
    with pytest.raises(ValueError, match=r"RewardModelsConfig.models: '.*rm,a' has a comma in its path"):
        RewardModelsConfig(models=(str(tmp_path / "rm,a"),))


def test_a_resume_refuses_a_reward_model_retrained_in_place(folders, tmp_path):
    """The run's manifest fingerprints the members' folders, as it does a prompts file: a member saved over since
    the run started would change the reward under the resumed steps without a word."""
    from minirlhf.errors import UserError
    from minirlhf.trainers.run.manifest import check_same_data, data_identity, fingerprints

    shutil.copytree(folders / "rm_a", tmp_path / "rm_a")
    config = {"task": "reward-models", "task_option": [f"models={tmp_path / 'rm_a'},{folders / 'rm_b'}"]}
    recorded = {"data": config, "fingerprints": fingerprints(data_identity(config))}
    check_same_data(recorded, config, "the run")  # nothing changed: it resumes
    shutil.copy(folders / "rm_b" / "reward_head.safetensors", tmp_path / "rm_a")  # rm_a retrained in place
    with pytest.raises(UserError, match=r"the run: data file task_option\[0\]='models=.*rm_a.*changed since the run"):
        check_same_data(recorded, config, "the run")


def test_an_empty_folder_name_is_refused_even_where_the_working_directory_is_a_reward_model(folders, monkeypatch):
    """models=../rm_b, (a comma too many) read from inside rm_a: the empty name must not become rm_a, a member the
    user never named."""
    from minirlhf.tasks.registry import absolute_task_options, task_options

    monkeypatch.chdir(folders / "rm_a")
    for options in (["models=../rm_b,"], absolute_task_options("reward-models", ["models=../rm_b,"])):
        with pytest.raises(ValueError, match="holds an empty folder name"):
            task_options("reward-models", options)


def test_an_untrained_reward_model_is_refused_naming_its_folder(folders, tmp_path):
    """RewardModel.from_pretrained_lm starts with a zero head: saved untrained, it scores every text 0, and
    standardised it would pay every answer 0 (alone: nothing to learn; under min: a cap), without a word."""
    from minirlhf.tasks.reward_models import RewardModelsConfig

    RewardModel.from_pretrained_lm("tiny", device="cpu").save(tmp_path / "untrained")
    with pytest.raises(ValueError, match=r"reward model .*untrained scores all 256 reference texts alike"):
        task(RewardModelsConfig(models=(str(folders / "rm_a"), str(tmp_path / "untrained"))))
