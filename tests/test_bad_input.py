"""Bad input, one case at a time: each is a clear error (or, for the truncation policy, a warning) that names the
problem. docs/door.md's "Error messages" table lists these messages; tests elsewhere cover bad reward functions
(test_online), malformed preference files (test_preference), a CUDA device without CUDA (test_core), prompts
longer than the context when sampling (test_core) and checkpoints of another model (test_checkpoint)."""

from __future__ import annotations

import argparse
import copy
import inspect
import json

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from minirlhf.__main__ import main
from minirlhf.cli import add_config_arguments, config_from_args
from minirlhf.data import PreferencePair, check_pair_lengths, load_preference_pairs
from minirlhf.models import SHIPPED, load_model
from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig
from minirlhf.trainers.reinforce import ReinforceConfig
from minirlhf.trainers.reward_model import train_reward_model
from minirlhf.trainers.sft import SFTConfig, train_sft


@pytest.mark.parametrize("config_cls, field, value, message", [
    (GRPOConfig, "beta", -0.1, "beta must be >= 0"),
    (GRPOConfig, "eps", -0.2, "eps must be > 0"),
    (GRPOConfig, "lr", -1e-4, "lr must be > 0"),
    (DPOConfig, "beta", 0.0, "beta must be > 0"),
    (GRPOConfig, "group_size", 1, "group_size must be an integer >= 2"),
    (GRPOConfig, "minibatch_size", 5, "minibatch_size .5. must divide"),
    (GRPOConfig, "epochs", 1.5, "epochs must be int, got 1.5"),
    (PPOConfig, "epochs", 2.0, "epochs must be int, got 2.0"),
    (SFTConfig, "steps", True, "steps must be int, got True"),
    (GRPOConfig, "lr", "3e-4", "lr must be float, got '3e-4'"),
    (GRPOConfig, "max_new_tokens", 4.0, "max_new_tokens must be int or None"),
    (GRPOConfig, "save_every", -1, "save_every must be >= 0"),
    (GRPOConfig, "save_every", 5, "save_every=5 needs an out_dir"),
    (GRPOConfig, "keep_checkpoints", 0, "keep_checkpoints must be > 0"),
    (ReinforceConfig, "ema_decay", 1.0, r"ema_decay must lie in \[0, 1\)"),
    (GRPOConfig, "lr", float("inf"), "lr must be > 0 and finite, got inf"),
    (GRPOConfig, "beta", float("nan"), "beta must be >= 0, got nan"),
    (DPOConfig, "beta", float("inf"), "beta must be > 0 and finite, got inf"),
])
def test_invalid_config_values_are_named(config_cls, field, value, message):
    with pytest.raises(ValueError, match=f"{config_cls.__name__}.{message}"):
        config_cls(**{field: value})


def test_valid_numbers_of_another_numeric_type_are_accepted():
    assert GRPOConfig(lr=1, beta=0).lr == 1  # an int where a float is declared is fine
    assert DPOConfig(epochs=1.5).epochs == 1.5  # DPO's epochs are a float on purpose: passes over the data


def test_unknown_config_field_in_a_dict_suggests_the_closest_name():
    assert GRPOConfig.from_dict({"beta": 0.1}).beta == 0.1
    with pytest.raises(ValueError, match=r"GRPOConfig has no field 'bta' \(did you mean 'beta'\?\)"):
        GRPOConfig.from_dict(json.loads('{"bta": 0.1}'))


def test_unknown_or_abbreviated_cli_flag_is_an_error(capsys):
    for flag in ("--bta", "--bet"):  # abbreviations are off: --bet must not silently mean --beta
        with pytest.raises(SystemExit):
            main(["grpo", flag, "0.1"])
        assert f"unrecognized arguments: {flag}" in capsys.readouterr().err


def test_cli_sets_optional_fields_to_none_and_bare_bool_flags_to_true():
    config = config_from_args(GRPOConfig, _parse(GRPOConfig, ["--minibatch-size", "none", "--debug"]))
    assert config.minibatch_size is None and config.debug is True
    config = config_from_args(PPOConfig, _parse(PPOConfig, ["--cliprange-value", "None", "--debug", "false"]))
    assert config.cliprange_value is None and config.debug is False
    with pytest.raises(SystemExit):
        _parse(PPOConfig, ["--eps", "none"])  # eps cannot be None: "none" is not a float
    config = config_from_args(GRPOConfig, _parse(GRPOConfig, ["--reward-weights", "2", "--reward-weights", "none"]))
    assert config.reward_weights is None  # a list field that may be None: `none` alone, the last flag wins


def _parse(config_cls, argv):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser, config_cls)
    return parser.parse_args(argv)


def test_prompt_longer_than_the_context_is_an_error_naming_the_pair(tiny):
    _, tokenizer = tiny
    pairs = [PreferencePair("The film", " good", " bad"), PreferencePair("word " * 80, " good", " bad")]
    with pytest.raises(ValueError, match=r"pair 1: the prompt .* has \d+ tokens, which leaves no room .*max_length=64"):
        check_pair_lengths(tokenizer, pairs, max_length=64)


def test_completions_cut_to_the_context_are_reported_once(tiny):
    _, tokenizer = tiny
    pairs = [PreferencePair("The film", " good" * 80, " bad"), PreferencePair("The film", " fine", " bad")]
    with pytest.warns(UserWarning, match=r"1 of 4 completions do not fit in max_length=64 .* cut from the right"):
        check_pair_lengths(tokenizer, pairs, max_length=64)


def test_dpo_checks_lengths_before_training():
    pairs = [PreferencePair("word " * 80, " good", " bad")]
    with pytest.raises(ValueError, match="pair 0: the prompt"):
        train_dpo(pairs, DPOConfig(steps=1, batch_size=1, eval_prompts=0, progress=False))
    with pytest.raises(ValueError, match="pair 0: the prompt"):
        train_reward_model(pairs, None)


def test_empty_data_sets_are_errors(tmp_path):
    with pytest.raises(ValueError, match="examples is empty"):
        train_sft([], SFTConfig(steps=1, progress=False))
    with pytest.raises(ValueError, match="PreferenceData.train is empty"):
        train_dpo([], DPOConfig(steps=1, progress=False))
    (tmp_path / "empty.jsonl").write_text("\n\n")
    with pytest.raises(ValueError, match=r"empty\.jsonl is empty"):
        load_preference_pairs(tmp_path / "empty.jsonl")


def test_bytes_that_are_not_utf8_name_file_and_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    path.write_bytes(b'{"prompt": "a", "chosen": " b", "rejected": " c"}\n\xff\xfe not text\n')
    with pytest.raises(ValueError, match=r"pairs\.jsonl, line 2: not UTF-8 text"):
        load_preference_pairs(path)


def test_tokenizer_without_pad_token_or_without_tokenizer_is_an_error(tiny):
    model, tokenizer = tiny
    no_pad = copy.deepcopy(tokenizer)
    no_pad.pad_token = None
    task = arithmetic.task()
    config = GRPOConfig(steps=1, prompts_per_step=1, group_size=2, progress=False)
    with pytest.raises(ValueError, match="tokenizer has no pad token: set tokenizer.pad_token = tokenizer.eos_token"):
        train_grpo(task, config, model=copy.deepcopy(model), tokenizer=no_pad)
    with pytest.raises(ValueError, match="came without its tokenizer"):
        train_grpo(task, config, model=copy.deepcopy(model))


def test_a_model_folder_named_from_the_home_folder_loads(monkeypatch, tmp_path):
    """`--model=~/runs/a/model` reaches the config with its `~` (the shell expands none after `=`): the folder is
    found in the home folder, not refused as missing."""
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "model").symlink_to(SHIPPED["tiny"], target_is_directory=True)
    model, _ = load_model("~/model", device="cpu")
    assert model.config.name_or_path == str(tmp_path / "model")


def test_model_and_tokenizer_vocabulary_mismatch_is_an_error(tiny):
    _, tokenizer = tiny
    small = GPT2LMHeadModel(GPT2Config(vocab_size=100, n_positions=64, n_embd=16, n_layer=1, n_head=2))
    with pytest.raises(ValueError, match=r"has 100 token embeddings but its tokenizer has 946 tokens"):
        train_sft([("1+1=", "2")], SFTConfig(steps=1, progress=False), model=small, tokenizer=tokenizer)


def test_trust_remote_code_is_off_and_weights_must_be_safetensors(tmp_path):
    """load_model reads weights from safetensors only and never runs code from the model folder unless asked."""
    assert inspect.signature(load_model).parameters["trust_remote_code"].default is False
    model, tokenizer = load_model("tiny", device="cpu")
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # the same weights, as a pickle only
    with pytest.raises(OSError, match="safetensors"):
        load_model(tmp_path, device="cpu")
