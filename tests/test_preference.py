"""Preference learning: loading pairs, the concatenated batch, the reward model and DPO.

Fast tests check the data contract and the exactness of the tricks (one concatenated forward, precomputed
reference); `slow` tests check that short runs actually learn, on the shipped pairs and held-out prompts.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from minirlhf.data import (
    PreferenceData,
    PreferencePair,
    encode_preference_pairs,
    encode_prompt_completion,
    load_preference_pairs,
    save_preference_pairs,
    split_shared_prefix,
)
from minirlhf.logprobs import response_logprobs, sequence_logprobs

GOOD = {"prompt": "The acting was", "chosen": " wonderful.", "rejected": " awful."}


def _write(tmp_path, lines: list[str], name: str = "pairs.jsonl"):
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _rows(*rows: dict) -> list[str]:
    return [json.dumps(r) for r in rows]


# ----------------------------------------------------------------------------- loading and validation


def test_load_standard_jsonl_ignores_blank_lines_and_extra_columns(tmp_path):
    path = _write(tmp_path, _rows(GOOD, GOOD | {"score_chosen": 0.9}) + [""])
    pairs = load_preference_pairs(path)
    assert pairs == [PreferencePair("The acting was", " wonderful.", " awful.")] * 2


def test_shipped_pairs_load_and_are_disjoint_by_prompt():
    from minirlhf.tasks.reviews import sentiment_prompts

    train, test = load_preference_pairs("sentiment"), load_preference_pairs("sentiment", split="test")
    assert len(train) >= 1000 and len(test) >= 200
    assert {p.prompt for p in train} <= set(sentiment_prompts("train"))
    assert {p.prompt for p in test} <= set(sentiment_prompts("test"))


def test_bad_json_names_file_and_line(tmp_path):
    path = _write(tmp_path, _rows(GOOD) + ['{"prompt": "x", "chosen": '])
    with pytest.raises(ValueError, match=r"pairs\.jsonl, line 2: invalid JSON"):
        load_preference_pairs(path)


def test_missing_field_names_file_line_and_field(tmp_path):
    path = _write(tmp_path, _rows(GOOD, GOOD, {"prompt": "The plot was", "chosen": " fun."}))
    with pytest.raises(ValueError, match=r"pairs\.jsonl, line 3: missing field 'rejected'"):
        load_preference_pairs(path)


def test_empty_text_names_the_field(tmp_path):
    path = _write(tmp_path, _rows(GOOD | {"chosen": "   "}))
    with pytest.raises(ValueError, match=r"line 1: field 'chosen' is empty"):
        load_preference_pairs(path)


def test_chosen_equal_to_rejected_is_rejected(tmp_path):
    path = _write(tmp_path, _rows(GOOD, GOOD | {"rejected": GOOD["chosen"]}))
    with pytest.raises(ValueError, match=r"line 2: field 'rejected' is identical to 'chosen'"):
        load_preference_pairs(path)


def test_non_string_field_names_the_field(tmp_path):
    path = _write(tmp_path, _rows(GOOD | {"chosen": [{"role": "assistant", "content": "hi"}]}))
    with pytest.raises(ValueError, match=r"line 1: field 'chosen' must be a string, got list"):
        load_preference_pairs(path)


def test_empty_file_is_a_clear_error(tmp_path):
    for content in ("", "\n\n"):
        path = tmp_path / "empty.jsonl"
        path.write_text(content)
        with pytest.raises(ValueError, match=r"empty\.jsonl is empty"):
            load_preference_pairs(path)


def test_skip_invalid_skips_and_warns_with_the_count(tmp_path):
    lines = _rows(GOOD) + ["not json"] + _rows({"prompt": "x", "chosen": " a"}, GOOD | {"chosen": ""}, GOOD)
    path = _write(tmp_path, lines)
    with pytest.warns(UserWarning, match=r"skipped 3 invalid row\(s\) of 5 in .*pairs\.jsonl"):
        pairs = load_preference_pairs(path, skip_invalid=True)
    assert len(pairs) == 2
    only_bad = _write(tmp_path, ["not json"], "bad.jsonl")
    with warnings.catch_warnings(), pytest.raises(ValueError, match="no valid preference pair"):
        warnings.simplefilter("ignore")
        load_preference_pairs(only_bad, skip_invalid=True)


def test_missing_file_and_unreachable_hub_fail_clearly(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_preference_pairs(tmp_path / "nope.jsonl")
    monkeypatch.setattr("minirlhf.models.hub_reachable", lambda *a, **k: False)
    with pytest.raises(ConnectionError, match="not reachable"):
        load_preference_pairs("Anthropic/hh-rlhf")


def test_a_json_array_of_pairs_names_its_bad_item(tmp_path):
    path = tmp_path / "pairs.json"
    path.write_text(json.dumps([GOOD, GOOD | {"prompt": "The plot was"}]))
    pairs = load_preference_pairs(path)
    assert [p.prompt for p in pairs] == ["The acting was", "The plot was"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([GOOD, GOOD | {"chosen": ""}]))
    with pytest.raises(ValueError, match=r"bad\.json, item 1: field 'chosen' is empty"):
        load_preference_pairs(bad)


def test_hh_style_rows_split_at_the_last_assistant_turn(tmp_path):
    dialogue = "\n\nHuman: Hi\n\nAssistant: Hello!\n\nHuman: Was the film good?\n\nAssistant:"
    row = {"chosen": dialogue + " Yes, it was great.", "rejected": dialogue + " Yes, it was bad."}
    (pair,) = load_preference_pairs(_write(tmp_path, _rows(row)))
    assert pair == PreferencePair(dialogue, " Yes, it was great.", " Yes, it was bad.")


def test_hh_style_plain_text_splits_at_a_word_boundary():
    assert split_shared_prefix("The film was great.", "The film was grim.") == ("The film was", " great.", " grim.")
    assert split_shared_prefix("It was good", "It was good and long") == ("It was", " good", " good and long")
    with pytest.raises(ValueError, match="share no prompt"):
        split_shared_prefix("Great", "Grim")


def test_hh_style_row_without_a_shared_prompt_names_the_line(tmp_path):
    path = _write(tmp_path, _rows({"chosen": "Great fun.", "rejected": "Awful."}))
    with pytest.raises(ValueError, match=r"line 1: field 'chosen'/'rejected' \(HH-style row\)"):
        load_preference_pairs(path)


def test_save_and_load_round_trip(tmp_path):
    pairs = [PreferencePair("A", " b", " c"), PreferencePair("D e", " f\ng", ' "h"')]
    assert load_preference_pairs(save_preference_pairs(pairs, tmp_path / "x.jsonl")) == pairs


# ----------------------------------------------------------------------------- the concatenated batch


PAIRS = [
    PreferencePair("The acting was", " wonderful, and I loved the music.", " awful."),
    PreferencePair("I watched this film and", " it was great.", " the plot was not good at all, sadly."),
    PreferencePair("This movie", " is fun.", " is a waste of time."),
]


def test_encode_preference_pairs_puts_chosen_first_then_rejected(tiny):
    _, tokenizer = tiny
    batch = encode_preference_pairs(tokenizer, PAIRS)
    B = len(PAIRS)
    assert batch["input_ids"].shape[0] == 2 * B
    for i, pair in enumerate(PAIRS):
        for row, completion in ((i, pair.chosen), (B + i, pair.rejected)):
            ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
            assert tokenizer.decode(ids) == pair.prompt + completion + tokenizer.eos_token


def test_concatenated_forward_equals_separate_forwards(tiny):
    model, tokenizer = tiny
    from minirlhf.trainers.dpo import encode_pairs, pair_logps

    with torch.no_grad():
        chosen, rejected = pair_logps(model, encode_pairs(tokenizer, PAIRS, max_length=None, device="cpu"))
        separate = []
        for completions in ([p.chosen for p in PAIRS], [p.rejected for p in PAIRS]):
            batch = encode_prompt_completion(tokenizer, [p.prompt for p in PAIRS], completions)
            separate.append(sequence_logprobs(response_logprobs(model, **batch), batch["response_mask"]))
    torch.testing.assert_close(chosen, separate[0], atol=1e-4, rtol=1e-5)
    torch.testing.assert_close(rejected, separate[1], atol=1e-4, rtol=1e-5)


# ----------------------------------------------------------------------------- reward model


def test_reward_model_reads_the_last_real_token_whatever_the_padding(tiny):
    from minirlhf.trainers.reward_model import RewardModel

    model, tokenizer = tiny
    rm = RewardModel(model.base_model, tokenizer).eval()
    torch.nn.init.normal_(rm.head.summary.weight)  # a non-zero head, so that scores differ
    alone = rm.score(["The acting was"], [" wonderful."])
    padded = rm.score(["The acting was", "I watched this film and"], [" wonderful.", " it was a long, long film."])
    assert alone[0] == pytest.approx(padded[0], abs=1e-4)
    batch = encode_prompt_completion(tokenizer, ["The acting was"], [" wonderful."])
    right = {k: torch.cat([v, torch.zeros_like(v[:, :3])], dim=1) for k, v in batch.items()}  # extra right padding
    right["input_ids"][:, -3:] = tokenizer.pad_token_id
    assert rm(right["input_ids"], right["attention_mask"]).item() == pytest.approx(alone[0], abs=1e-4)


def test_reward_model_save_and_load_round_trip(tiny, tmp_path):
    from minirlhf.trainers.reward_model import HEAD_FILE, RewardModel

    model, tokenizer = tiny
    rm = RewardModel.from_pretrained_lm("tiny", device="cpu").eval()
    torch.nn.init.normal_(rm.head.summary.weight)
    folder = rm.save(tmp_path / "rm")
    assert (folder / HEAD_FILE).is_file() and (folder / "model.safetensors").is_file()
    loaded = RewardModel.load(folder)
    texts = (["The plot was", "This movie"], [" dull.", " is a delight."])
    assert loaded.score(*texts) == pytest.approx(rm.score(*texts), abs=1e-6)
    with pytest.raises(FileNotFoundError, match=HEAD_FILE):
        RewardModel.load(tmp_path)


def test_sentiment_task_rewards_with_the_learned_model_not_vader():
    from minirlhf.tasks.sentiment import sentiment_task

    class FakeRM:
        def score(self, prompts, completions, tokenizer=None):
            return [float(len(c)) for c in completions]

    task = sentiment_task(FakeRM())
    # VADER would score " awful." negative and " great." positive; the fake RM only counts characters
    assert task.reward_fn(["The plot was"] * 2, [" awful.", " great!!"]) == [7.0, 8.0]
    prompts = task.train_prompts(5, __import__("random").Random(0))
    from minirlhf.tasks.reviews import sentiment_prompts

    assert set(prompts) <= set(sentiment_prompts("train"))


def test_evaluate_sentiment_kl_against_itself_is_zero(tiny):
    from minirlhf.models import frozen_copy
    from minirlhf.tasks.sentiment import evaluate_sentiment

    model, tokenizer = tiny
    stats = evaluate_sentiment(model, tokenizer, ref_model=frozen_copy(model), n_prompts=8, samples_per_prompt=2)
    assert -1.0 <= stats["sentiment"] <= 1.0
    assert abs(stats["kl"]) < 1e-3
    assert evaluate_sentiment(model, tokenizer, n_prompts=8, samples_per_prompt=2) == {
        k: v for k, v in stats.items() if k != "kl"
    }  # same seed, same samples


# ----------------------------------------------------------------------------- DPO


def test_precomputed_reference_gives_the_same_losses_as_the_live_one():
    from minirlhf.trainers.dpo import DPOConfig, train_dpo

    pairs = load_preference_pairs("sentiment")[:64]
    runs = {}
    for precompute in (False, True):
        config = DPOConfig(steps=5, batch_size=8, eval_prompts=0, precompute_ref=precompute, progress=False)
        runs[precompute] = train_dpo(PreferenceData(pairs, test=pairs[:16]), config)
    live, pre = runs[False][2], runs[True][2]
    for key in ("loss", "rewards/margin", "logps/chosen", "eval/loss", "eval/rewards/accuracy"):
        assert pre.column(key)[1] == pytest.approx(live.column(key)[1], abs=1e-5), key
    assert live.column("loss")[1][0] == pytest.approx(0.6931, abs=1e-3)  # p_θ = p_ref at step 0: -log σ(0)
    # the two references are the same numbers up to float rounding (batched with different padding), which Adam's
    # normalised steps can amplify a little in weights whose gradient is nearly 0
    for p, q in zip(runs[False][0].parameters(), runs[True][0].parameters()):
        torch.testing.assert_close(p, q, atol=1e-4, rtol=1e-3)


def test_dpo_logs_the_promised_metrics_and_checks_its_config(tiny):
    from minirlhf.tasks.sentiment import evaluate_sentiment
    from minirlhf.trainers.dpo import DPOConfig, train_dpo

    pairs = PreferenceData(load_preference_pairs("sentiment")[:8], evaluate=evaluate_sentiment)
    _, _, history = train_dpo(pairs, DPOConfig(steps=2, batch_size=4, eval_prompts=2, eval_samples=2,
                                               progress=False))
    step = history[1]
    for key in ("loss", "rewards/accuracy", "rewards/margin", "rewards/chosen", "rewards/rejected",
                "logps/chosen", "logps/rejected", "grad_norm"):
        assert key in step, key
    assert {"eval/sentiment", "eval/kl"} <= set(history[-1])
    with pytest.raises(ValueError, match="loss_type"):
        DPOConfig(loss_type="cpo")
    with pytest.raises(ValueError, match="precompute_ref"):
        DPOConfig(loss_type="simpo", precompute_ref=True)
    with pytest.raises(ValueError, match="gamma"):
        DPOConfig(loss_type="simpo", gamma=-0.1)
    with pytest.raises(ValueError, match="label_smoothing"):
        DPOConfig(loss_type="ipo", label_smoothing=0.1)
    with pytest.raises(ValueError, match="epochs"):
        DPOConfig(epochs=0)


def test_cli_runs_dpo_and_reward_model(tmp_path, capsys):
    from minirlhf.__main__ import main
    from minirlhf.trainers.dpo import DPOConfig
    from minirlhf.trainers.reward_model import RewardModelConfig

    assert DPOConfig().pairs == RewardModelConfig().pairs == "sentiment"  # the shipped pairs by default
    data = tmp_path / "pairs"  # a small folder in the shipped layout, to keep the test fast
    for split in ("train", "test"):
        save_preference_pairs(load_preference_pairs("sentiment", split)[:8], data / f"{split}.jsonl")
    main(["dpo", "--pairs", str(data), "--steps", "1", "--batch-size", "4", "--eval-prompts", "2",
          "--eval-samples", "1", "--progress", "false", "--out-dir", str(tmp_path / "dpo")])
    assert "eval/rewards/accuracy" in capsys.readouterr().out
    assert (tmp_path / "dpo" / "model" / "model.safetensors").is_file()
    main(["reward-model", "--pairs", str(data), "--steps", "1", "--batch-size", "4", "--progress", "false",
          "--out-dir", str(tmp_path / "rm")])
    assert "eval/accuracy" in capsys.readouterr().out
    assert (tmp_path / "rm" / "reward_model" / "reward_head.safetensors").is_file()


def test_cli_runs_simpo_orpo_and_kto(tmp_path, capsys):
    from minirlhf.__main__ import main

    data = tmp_path / "pairs"
    for split in ("train", "test"):
        save_preference_pairs(load_preference_pairs("sentiment", split)[:8], data / f"{split}.jsonl")
    for loss_type, key in (("simpo", "rewards/margin"), ("orpo", "rewards/margin"), ("kto", "rewards/desirable")):
        main(["dpo", "--loss-type", loss_type, "--pairs", str(data), "--steps", "2", "--batch-size", "4",
              "--eval-prompts", "0", "--progress", "false", "--out-dir", str(tmp_path / loss_type)])
        assert "eval/rewards/accuracy" in capsys.readouterr().out, loss_type
        rows = [json.loads(line) for line in (tmp_path / loss_type / "metrics.jsonl").read_text().splitlines()]
        assert key in rows[1], loss_type
        assert (tmp_path / loss_type / "model" / "model.safetensors").is_file()


def test_kto_mismatched_partners_have_another_prompt():
    import random

    from minirlhf.data import unpaired_examples
    from minirlhf.trainers.kto import mismatched_partners

    examples = unpaired_examples(load_preference_pairs("sentiment")[:50])
    partners = mismatched_partners(examples, random.Random(0))
    assert all(examples[k].prompt != examples[j].prompt for j, k in enumerate(partners))
    assert len(set(partners)) > len(examples) // 2  # spread over the data, not one completion for all
    with pytest.raises(ValueError, match="two different prompts"):
        mismatched_partners(examples[:2], random.Random(0))


def test_kto_refuses_pairs_of_one_prompt_before_loading_a_model(tmp_path):
    """The check runs before the model is loaded or the out-dir written: a model that does not exist is never
    reached, and the message names the pairs' file."""
    from minirlhf.errors import UserError
    from minirlhf.trainers.kto import KTOConfig, train_kto

    pair = load_preference_pairs("sentiment")[0]
    data = tmp_path / "one-prompt.jsonl"
    save_preference_pairs([pair, pair, pair], data)
    config = KTOConfig(pairs=str(data), model=str(tmp_path / "no-such-model"), out_dir=str(tmp_path / "run"))
    with pytest.raises(UserError, match=r"one-prompt\.jsonl: all 3 training pairs share the prompt"):
        train_kto(None, config)
    assert not (tmp_path / "run").exists()


# ----------------------------------------------------------------------------- learning (slow)
#
# Short runs on the shipped pairs (defaults otherwise), single CPU thread, measured when these were written:
#   reward model, 75 steps:  held-out pair accuracy 0.50 -> 0.88
#   DPO, 25 steps:           held-out implicit-reward accuracy 0.00 -> 0.81;
#                            held-out VADER sentiment 0.085 (p_ref) -> 0.50, KL(p_θ || p_ref) 1.4 nats
# The thresholds sit well below, so that a different machine's float rounding cannot fail them.

RM_STEPS, RM_MIN_ACCURACY = 75, 0.75
DPO_STEPS, DPO_MIN_ACCURACY, DPO_MIN_SENTIMENT_GAIN = 25, 0.65, 0.2


@pytest.mark.slow
def test_reward_model_learns_held_out_preferences():
    from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model

    _, _, history = train_reward_model(config=RewardModelConfig(steps=RM_STEPS, eval_every=RM_STEPS, progress=False))
    _, accuracy = history.column("eval/accuracy")
    assert accuracy[0] == 0.5  # zero head: every pair is a tie
    assert accuracy[-1] >= RM_MIN_ACCURACY, accuracy


@pytest.fixture(scope="module")
def dpo_run():
    from minirlhf.trainers.dpo import DPOConfig, train_dpo

    config = DPOConfig(steps=DPO_STEPS, eval_every=DPO_STEPS, progress=False)
    return train_dpo(config=config)[2]


@pytest.mark.slow
def test_dpo_improves_held_out_implicit_reward_accuracy(dpo_run):
    _, accuracy = dpo_run.column("eval/rewards/accuracy")
    assert accuracy[0] == 0.5  # p_θ = p_ref: every implicit reward is 0, every pair a tie (counted 1/2)
    assert accuracy[-1] >= DPO_MIN_ACCURACY, accuracy


@pytest.mark.slow
def test_dpo_raises_held_out_sentiment_above_the_reference(dpo_run):
    _, sentiment = dpo_run.column("eval/sentiment")
    _, kl = dpo_run.column("eval/kl")
    assert sentiment[-1] >= sentiment[0] + DPO_MIN_SENTIMENT_GAIN, (sentiment, kl)
    assert kl[-1] > 0


def test_the_kto_command_and_its_older_spelling_train_kto_with_its_own_weights(tmp_path, capsys):
    from minirlhf.__main__ import main

    data = tmp_path / "pairs"
    for split in ("train", "test"):
        save_preference_pairs(load_preference_pairs("sentiment", split)[:8], data / f"{split}.jsonl")
    common = ["--pairs", str(data), "--steps", "2", "--batch-size", "4", "--eval-prompts", "0", "--progress", "false"]
    main(["kto", *common, "--desirable-weight", "2", "--out-dir", str(tmp_path / "kto")])
    main(["dpo", "--loss-type", "kto", *common, "--out-dir", str(tmp_path / "alias")])
    main(["dpo", *common, "--loss-type=kto", "--desirable-weight", "3", "--out-dir", str(tmp_path / "weighted")])
    assert capsys.readouterr().out.count("eval/rewards/accuracy") == 3
    names = ("kto", "alias", "weighted")
    for name in names:
        rows = [json.loads(line) for line in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
        assert "rewards/desirable" in rows[1], name
    saved = {name: json.loads((tmp_path / name / "config.json").read_text()) for name in names}
    assert saved["kto"]["desirable_weight"] == 2.0 and saved["alias"]["desirable_weight"] == 1.0
    assert saved["weighted"]["desirable_weight"] == 3.0  # the older spelling takes every flag of the kto command
    assert "loss_type" not in saved["alias"]  # the older spelling runs the KTO trainer, recorded as a KTO run
    with pytest.raises(SystemExit):  # a DPO-only field is no flag of the kto command
        main(["kto", *common, "--rpo-alpha", "0.5"])


def _preference_configs():
    from minirlhf.trainers.dpo import DPOConfig
    from minirlhf.trainers.kto import KTOConfig
    from minirlhf.trainers.preference import ImplicitRewardConfig, PreferenceConfig
    from minirlhf.trainers.reward_model import RewardModelConfig

    return PreferenceConfig, ImplicitRewardConfig, [DPOConfig, KTOConfig, RewardModelConfig]


@pytest.mark.parametrize("name", ["DPOConfig", "KTOConfig", "RewardModelConfig"])
def test_the_pair_methods_share_the_preference_config(name):
    """Every field of PreferenceConfig (pairs, batch, epochs, maximum length, ...) is a field of each pair method's
    config, declared once: in the base, not again in the method (a method may only change its default). DPO and KTO
    share ImplicitRewardConfig's too (β, p_ref, the sampling evaluation)."""
    import dataclasses

    base, implicit, configs = _preference_configs()
    config = next(c for c in configs if c.__name__ == name)
    assert issubclass(config, base)
    shared = {f.name for f in dataclasses.fields(base)}
    assert shared >= {"pairs", "batch_size", "epochs", "max_length"}
    assert shared <= {f.name for f in dataclasses.fields(config)}
    if name != "RewardModelConfig":
        assert issubclass(config, implicit)
        assert {"beta", "precompute_ref", "eval_prompts", "max_new_tokens"} <= set(config.__dataclass_fields__)
    else:
        assert not hasattr(config, "beta")  # no policy, no p_ref: no β
    own = config.__dict__.get("__annotations__", {})
    declared_again = {n for n in own if n in shared and getattr(config, n) == getattr(base, n)}
    assert not declared_again, f"{name} declares {declared_again} again with the base's default"


def test_the_preference_wing_does_not_borrow_the_sentiment_task():
    """The shipped pair set brings its own sampling evaluation and budget; the wing imports no task."""
    from pathlib import Path

    from minirlhf.trainers import preference

    source = Path(preference.__file__).read_text()
    assert "tasks.sentiment" not in source and "MAX_NEW_TOKENS" not in source
    from minirlhf.trainers.dpo import DPOConfig

    assert DPOConfig().max_new_tokens is None  # the pair set's own budget


@pytest.mark.parametrize("started_by", [["kto"], ["dpo", "--loss-type", "kto"]])
def test_the_older_kto_spelling_resumes_a_kto_run(tmp_path, started_by):
    from minirlhf.__main__ import main

    data = tmp_path / "pairs.jsonl"
    save_preference_pairs(load_preference_pairs("sentiment", "train")[:8], data)
    common = ["--pairs", str(data), "--batch-size", "4", "--eval-every", "0", "--progress", "false"]
    main([*started_by, *common, "--steps", "1", "--save-every", "1", "--out-dir", str(tmp_path / "run")])
    main(["dpo", "--loss-type", "kto", *common, "--steps", "2", "--resume", str(tmp_path / "run")])
    rows = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["step"] for row in rows] == [0, 1]  # steps count from 0: the resume ran the second


def test_the_older_kto_spelling_is_read_from_the_last_loss_type_in_any_spelling():
    """`dpo ... --loss-type kto ...` becomes the kto command with the --loss-type flags removed, wherever they stand and
    however they are written; the last one decides, as argparse would; any other command or value is left alone."""
    import random

    from minirlhf.__main__ import _older_spelling

    rng = random.Random(0)
    others = ["--beta", "0.2", "--steps", "3", "--desirable-weight", "2", "--out-dir", "runs/x"]
    for _ in range(300):
        values = [rng.choice(["kto", "sigmoid", "ipo", "simpo"]) for _ in range(rng.randint(1, 3))]
        flags = [["--loss-type", v] if rng.random() < 0.5 else [f"--loss-type={v}"] for v in values]
        rest, cut = [], rng.sample(range(len(others) // 2 + 1), len(flags))
        pairs = [others[i:i + 2] for i in range(0, len(others), 2)]
        for position in range(len(pairs) + 1):
            if position in cut:
                rest += flags[cut.index(position)]
            rest += pairs[position] if position < len(pairs) else []
        last = values[cut.index(max(cut))]
        command, kept = _older_spelling("dpo", rest)
        if last == "kto":
            assert command == "kto" and kept == others, rest
        else:
            assert (command, kept) == ("dpo", rest), rest
        assert _older_spelling("kto", rest) == ("kto", rest)
    assert _older_spelling("dpo", ["--steps", "2", "--loss-type"]) == ("dpo", ["--steps", "2", "--loss-type"])
