"""GRPO since R1 on the configs, the loops and the CLI: clip-higher, GSPO, the ratio zoo's policy losses, dynamic
sampling, overlong handling, REINFORCE++, RPO/IPO normalisation, the recipes, per-reward logging and KL to p_ref at
evaluation."""

from __future__ import annotations

import pytest
import torch

import minirlhf.trainers.grpo as grpo_trainer
from minirlhf.losses import POLICY_LOSSES, dpo_loss
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.preference import DPOConfig, preference_loss

TINY = dict(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=4, eval_every=0, progress=False)


def test_grpo_logs_both_clip_sides_at_token_and_sequence_level():
    for level in ("token", "sequence"):
        config = GRPOConfig(eps_high=0.28, importance_sampling_level=level, epochs=2, **TINY)
        history = train_grpo(None, config)[2]
        assert {"clip_frac", "clip_frac_low", "clip_frac_high", "ratio_max"} <= history[-1].keys()
        row = history[-1]
        assert row["ratio_max"] > 0
        assert row["clip_frac_low"] + row["clip_frac_high"] == pytest.approx(row["clip_frac"])


def test_ppo_takes_eps_high_and_logs_both_clip_sides():
    history = train_ppo(None, PPOConfig(eps_high=0.28, epochs=2, minibatch_size=None, **TINY))[2]
    assert {"clip_frac_low", "clip_frac_high", "ratio_max"} <= history[-1].keys()


@pytest.mark.parametrize("config_cls, field, value", [
    (GRPOConfig, "eps_high", 0.0), (GRPOConfig, "importance_sampling_level", "word"), (PPOConfig, "eps_high", -1.0),
])
def test_bad_r1_grpo_fields_name_the_field(config_cls, field, value):
    with pytest.raises(ValueError, match=f"{config_cls.__name__}.{field}"):
        config_cls(**{field: value})


@pytest.mark.parametrize("policy_loss", POLICY_LOSSES)
def test_each_policy_loss_reaches_the_loss_and_logs_where_it_cut(monkeypatch, policy_loss):
    """The config's policy_loss and its parameters reach grpo_loss on every minibatch, and the step logs the clip
    fractions the loss reports (dual-clip its floor's too)."""
    seen = []

    def recording_grpo_loss(*args, **kwargs):
        seen.append({k: kwargs[k] for k in ("policy_loss", "dual_clip_c", "tau_pos", "tau_neg")})
        return grpo_loss(*args, **kwargs)

    grpo_loss = grpo_trainer.grpo_loss
    monkeypatch.setattr(grpo_trainer, "grpo_loss", recording_grpo_loss)
    own = {"dual-clip": {"dual_clip_c": 2.0}, "sapo": {"sapo_tau_pos": 2.0, "sapo_tau_neg": 3.0}}
    fields = own.get(policy_loss, {})
    history = train_grpo(None, GRPOConfig(policy_loss=policy_loss, epochs=2, **fields, **TINY))[2]
    expected = {"policy_loss": policy_loss, "dual_clip_c": fields.get("dual_clip_c", 3.0),
                "tau_pos": fields.get("sapo_tau_pos", 1.0), "tau_neg": fields.get("sapo_tau_neg", 1.05)}
    assert seen and all(call == expected for call in seen)
    row = history[-1]
    assert torch.isfinite(torch.tensor(row["loss"]))
    assert {"clip_frac", "clip_frac_low", "clip_frac_high"} <= row.keys()
    assert ("clip_frac_dual" in row) == (policy_loss == "dual-clip")


@pytest.mark.parametrize("fields, match", [
    ({"policy_loss": "ppo"}, "GRPOConfig.policy_loss"),
    ({"policy_loss": "dual-clip", "dual_clip_c": 1.0}, "GRPOConfig.dual_clip_c must be > 1"),
    ({"policy_loss": "sapo", "sapo_tau_neg": 0.0}, "GRPOConfig.sapo_tau_neg"),
    ({"policy_loss": "gmpo", "importance_sampling_level": "sequence"}, "GRPOConfig.policy_loss='gmpo'"),
    ({"dual_clip_c": 2.0}, "GRPOConfig.dual_clip_c=2.0 is a setting of policy_loss='dual-clip'"),
    ({"policy_loss": "cispo", "sapo_tau_pos": 2.0}, "GRPOConfig.sapo_tau_pos=2.0 is a setting of policy_loss='sapo'"),
])
def test_bad_policy_loss_fields_name_the_field(fields, match):
    with pytest.raises(ValueError, match=match):
        GRPOConfig(**fields)


def test_preference_loss_passes_token_counts_rpo_and_ipo_normalisation():
    g = torch.Generator().manual_seed(0)
    chosen, rejected, ref_chosen, ref_rejected = (-torch.rand(4, generator=g) * 10 for _ in range(4))
    lengths = torch.tensor([3.0, 5.0, 2.0, 7.0]), torch.tensor([4.0, 1.0, 6.0, 2.0])
    for fields in ({"rpo_alpha": 0.5}, {"loss_type": "ipo", "ipo_normalisation": "mean"}):
        config = DPOConfig(**fields)
        got = preference_loss(config, chosen, rejected, ref_chosen, ref_rejected, *lengths)[0]
        plain = preference_loss(DPOConfig(loss_type=config.loss_type), chosen, rejected, ref_chosen, ref_rejected,
                                *lengths)[0]
        want = dpo_loss(chosen, rejected, ref_chosen, ref_rejected, config.beta, config.loss_type,
                        chosen_lengths=lengths[0], rejected_lengths=lengths[1],
                        ipo_normalisation=config.ipo_normalisation, rpo_alpha=config.rpo_alpha)[0]
        assert torch.allclose(got, want) and not torch.allclose(got, plain)


@pytest.mark.parametrize("fields", [{"loss_type": "simpo", "rpo_alpha": 0.5}, {"loss_type": "kto", "rpo_alpha": 1.0},
                                    {"loss_type": "sigmoid", "ipo_normalisation": "mean"},
                                    {"ipo_normalisation": "max"}, {"rpo_alpha": -1.0}])
def test_dpo_options_outside_their_losses_are_refused(fields):
    with pytest.raises(ValueError, match="DPOConfig"):
        DPOConfig(**fields)


def _counting_task(reward):
    from minirlhf.tasks import Task, arithmetic

    return Task("counting", arithmetic.train_prompts, reward, max_new_tokens=4)


def test_dynamic_sampling_at_its_cap_without_informative_groups_skips_the_update():
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny", device="cpu")
    before = [p.detach().clone() for p in model.parameters()]
    constant = _counting_task(lambda prompts, completions, **_: [1.0] * len(prompts))
    config = GRPOConfig(dynamic_sampling=True, max_sampling_rounds=3, beta=0.0, **TINY)
    history = train_grpo(constant, config, model=model, tokenizer=tokenizer)[2]
    rows = [row for row in history if "groups_kept" in row]
    assert [(r["groups_sampled"], r["groups_kept"], r["sampling_rounds"]) for r in rows] == [(6, 0, 3)] * 2
    assert all("loss" not in r for r in rows)  # no update was made
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_dynamic_sampling_keeps_only_informative_groups_and_fills_the_step():
    calls = []

    def every_other_group(prompts, completions, **_):  # groups of the 1st, 3rd, ... call are all equal
        calls.append(len(prompts))
        return [float(i % 2) if len(calls) % 2 == 0 else 0.0 for i in range(len(prompts))]

    config = GRPOConfig(dynamic_sampling=True, max_sampling_rounds=5, beta=0.0, **TINY)
    history = train_grpo(_counting_task(every_other_group), config)[2]
    rows = [row for row in history if "groups_kept" in row]
    assert [(r["groups_sampled"], r["groups_kept"], r["sampling_rounds"]) for r in rows] == [(4, 2, 2)] * 2
    assert all("loss" in r for r in rows)


def test_dynamic_sampling_at_its_cap_trains_on_the_groups_it_has():
    def one_group_informative(prompts, completions, **_):  # only the first group's rewards differ
        return [1.0, 0.0] + [0.0] * (len(prompts) - 2)

    config = GRPOConfig(dynamic_sampling=True, max_sampling_rounds=1, beta=0.0, **TINY)
    history = train_grpo(_counting_task(one_group_informative), config)[2]
    rows = [row for row in history if "groups_kept" in row]
    assert [(r["groups_kept"], r["sampling_rounds"]) for r in rows] == [(1, 1)] * 2 and all("loss" in r for r in rows)


def test_dropping_dead_groups_trains_on_the_informative_ones_without_sampling_more():
    calls = []

    def one_group_informative(prompts, completions, **_):  # only the first group's rewards differ
        calls.append(len(prompts))
        return [1.0, 0.0] + [0.0] * (len(prompts) - 2)

    config = GRPOConfig(drop_dead_groups=True, beta=0.0, **TINY)
    history = train_grpo(_counting_task(one_group_informative), config)[2]
    rows = [row for row in history if "groups_kept" in row]
    assert [r["groups_kept"] for r in rows] == [1, 1] and all("loss" in r for r in rows)
    assert calls == [TINY["prompts_per_step"] * TINY["group_size"]] * TINY["steps"]  # one batch a step, no refill


def test_dropping_dead_groups_when_every_group_is_dead_skips_the_update():
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny", device="cpu")
    before = [p.detach().clone() for p in model.parameters()]
    constant = _counting_task(lambda prompts, completions, **_: [1.0] * len(prompts))
    history = train_grpo(constant, GRPOConfig(drop_dead_groups=True, beta=0.0, **TINY), model=model,
                         tokenizer=tokenizer)[2]
    rows = [row for row in history if "groups_kept" in row]
    assert [r["groups_kept"] for r in rows] == [0, 0] and all("loss" not in r for r in rows)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_dropping_dead_groups_loses_only_the_dilution_of_the_loss():
    """GRPO-drop's loss is GRPO's over the informative groups alone: with token-mean, GRPO's is the same sum over
    more tokens (the dead groups' Â = 0 adds nothing to it), so the two differ by the share of informative tokens."""
    from minirlhf.losses import grpo_advantages, grpo_loss, informative_groups

    g = torch.Generator().manual_seed(0)
    rewards = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0, 1.0])  # groups of 2: mixed, dead, dead, mixed
    logp, old_logp = -torch.rand(8, 3, generator=g), -torch.rand(8, 3, generator=g)
    mask = torch.ones(8, 3)
    advantages = grpo_advantages(rewards, 2)
    kept = informative_groups(rewards, 2).repeat_interleave(2)
    whole = grpo_loss(logp, old_logp, None, advantages, mask, eps=0.2, beta=0.0, aggregation="token-mean")[0]
    dropped = grpo_loss(logp[kept], old_logp[kept], None, advantages[kept], mask[kept], eps=0.2, beta=0.0,
                        aggregation="token-mean")[0]
    assert torch.allclose(whole, dropped * kept.float().mean()) and not torch.allclose(whole, dropped)


def test_drop_dead_groups_with_dynamic_sampling_is_refused():
    with pytest.raises(ValueError, match=r"GRPOConfig\.drop_dead_groups=True with dynamic_sampling=True"):
        GRPOConfig(drop_dead_groups=True, dynamic_sampling=True)


def test_concatenated_experiences_keep_every_rows_logprobs(tiny):
    import random

    from minirlhf.tasks import arithmetic
    from minirlhf.trainers.online import collect, concat_experiences, policy_logprobs, select_groups

    model, tokenizer = tiny
    config = GRPOConfig(prompts_per_step=2, group_size=2, max_new_tokens=6)
    task, rng, g = arithmetic.task(), random.Random(0), torch.Generator().manual_seed(0)
    batches = [collect(model, tokenizer, None, task, config, rng, g) for _ in range(3)]
    batches[1] = select_groups(batches[1], torch.tensor([False, True]), 2)
    joined = concat_experiences(batches, tokenizer.pad_token_id)
    start = 0
    for b in batches:
        rows = torch.arange(start, start + b.rewards.numel())
        got = policy_logprobs(model, joined, rows, 1.0)[0][:, : b.mask.shape[1]]
        want = policy_logprobs(model, b, torch.arange(b.rewards.numel()), 1.0)[0]
        assert torch.allclose(got * b.mask, want * b.mask, atol=1e-5)
        n = b.mask.shape[1]
        assert torch.equal(joined.mask[rows, :n], b.mask) and not joined.mask[rows, n:].any()
        assert torch.equal(joined.rewards[rows], b.rewards)
        start += b.rewards.numel()


def test_mask_truncated_completions_takes_truncated_answers_out_of_the_loss():
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny", device="cpu")
    before = [p.detach().clone() for p in model.parameters()]
    task = _counting_task(lambda prompts, completions, **_: [float(i % 2) for i in range(len(prompts))])
    # a budget of 1 token: every answer is cut off, so no token is left in the loss and p_θ must not move
    config = GRPOConfig(mask_truncated_completions=True, **{**TINY, "max_new_tokens": 1})
    history = train_grpo(task, config, model=model, tokenizer=tokenizer)[2]
    assert all(r["eos_rate"] == 0.0 for r in history if "eos_rate" in r)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def _parsed_config(monkeypatch, argv):
    """The config `python -m minirlhf grpo ARGV` would train with (the training itself replaced)."""
    from minirlhf import __main__ as cli
    from minirlhf.trainers import grpo

    seen = []
    monkeypatch.setattr(grpo, "train_grpo", lambda data, config: seen.append(config) or (None, None, [{"step": 0}]))
    cli.main(["grpo", *argv])
    return seen[0]


@pytest.mark.parametrize("name", ["grpo", "dapo", "dr-grpo", "gspo"])
def test_recipe_sets_its_fields_and_flags_win(monkeypatch, name):
    from minirlhf.trainers.grpo import RECIPES

    config = _parsed_config(monkeypatch, ["--recipe", name, "--eps", "0.1", "--preset", "t4"])
    assert config.eps == 0.1  # the flag given wins over the recipe
    assert all(getattr(config, k) == v for k, v in RECIPES[name].items() if k != "eps")  # and the recipe over t4


def test_recipes_are_listed_in_help_and_dr_grpo_is_scale_none_with_constant_aggregation(monkeypatch, capsys):
    from minirlhf import __main__ as cli
    from minirlhf.trainers.grpo import RECIPES

    assert RECIPES["dr-grpo"] | {"scale": "none", "aggregation": "constant", "beta": 0.0} == RECIPES["dr-grpo"]
    with pytest.raises(SystemExit):
        cli.main(["grpo", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "dapo: --eps 0.2 --eps-high 0.28 --beta 0.0" in shown and "gspo: --eps 0.0003 --eps-high 0.0004" in shown
    with pytest.raises(SystemExit):
        cli.main(["ppo", "--recipe", "dapo"])  # recipes belong to grpo


def test_dapo_recipe_runs_from_the_command_line_and_config_json_records_its_fields(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "minirlhf", "grpo", "--recipe", "dapo", "--steps", "2",
                    "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4", "--eval-every", "0",
                    "--epochs", "2", "--progress", "false", "--out-dir", str(out)], check=True, capture_output=True)
    saved = json.loads((out / "config.json").read_text())
    assert saved["eps_high"] == 0.28 and saved["dynamic_sampling"] and saved["mask_truncated_completions"]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert all({"groups_sampled", "groups_kept", "sampling_rounds"} <= row.keys() for row in rows if "reward" in row)


@pytest.mark.parametrize("baseline", ["reinforce++", "reinforce++-baseline"])
def test_reinforce_plus_plus_trains_with_per_token_advantages(baseline):
    import math

    from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce

    history = train_reinforce(None, ReinforceConfig(baseline=baseline, beta=0.04, **TINY))[2]
    rows = [row for row in history if "loss" in row]
    assert len(rows) == 2 and all(math.isfinite(row["loss"]) and row["advantage_std"] > 0 for row in rows)
    assert all("kl_ref" in row for row in rows)  # β > 0: p_ref is loaded and the k1 KL enters the reward


def test_reinforce_plus_plus_baseline_needs_groups():
    from minirlhf.trainers.reinforce import ReinforceConfig

    with pytest.raises(ValueError, match="ReinforceConfig.group_size"):
        ReinforceConfig(baseline="reinforce++-baseline", group_size=1)
    ReinforceConfig(baseline="reinforce++", group_size=1)  # the plain variant standardises over the batch alone


def test_each_reward_function_is_logged_beside_the_weighted_sum():
    from minirlhf.tasks.custom import weighted_reward

    def one(prompts, completions, **_):
        return [1.0] * len(completions)

    def length(prompts, completions, **_):
        return [float(len(c)) for c in completions]

    history = train_grpo(_counting_task(weighted_reward([one, length], [2.0, -0.5])), GRPOConfig(**TINY))[2]
    rows = [row for row in history if "reward" in row]
    assert len(rows) == 2 and all(row["reward/one"] == 1.0 for row in rows)
    assert all(row["reward"] == pytest.approx(2.0 - 0.5 * row["reward/length"]) for row in rows)


def test_soft_overlong_penalty_composes_with_the_task_reward_from_the_command_line(tmp_path):
    import json
    import subprocess
    import sys

    out = tmp_path / "run"
    subprocess.run([sys.executable, "-m", "minirlhf", "rloo", "--overlong-cache", "2", "--overlong-weight", "0.5",
                    "--steps", "2", "--prompts-per-step", "2", "--group-size", "2", "--max-new-tokens", "4",
                    "--eval-every", "0", "--progress", "false", "--out-dir", str(out)], check=True, capture_output=True)
    assert json.loads((out / "config.json").read_text())["overlong_cache"] == 2  # a resume restores it
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    rows = [row for row in rows if "reward" in row]
    assert rows and all(-1.0 <= row["reward/overlong"] <= 0.0 for row in rows)
    assert all(row["reward"] == pytest.approx(row["reward/correctness_reward"] + 0.5 * row["reward/overlong"],
                                              abs=1e-6) for row in rows)


def test_overlong_cache_beyond_the_budget_is_refused():
    with pytest.raises(ValueError, match=r"GRPOConfig.overlong_cache \(8\) must be at most max_new_tokens \(4\)"):
        GRPOConfig(overlong_cache=8, max_new_tokens=4)
    with pytest.raises(ValueError, match="GRPOConfig.overlong_cache"):
        GRPOConfig(overlong_cache=-1)
    with pytest.raises(ValueError, match=r"overlong_cache \(99\) must be at most the response budget"):
        train_grpo(None, GRPOConfig(overlong_cache=99, **{**TINY, "max_new_tokens": None}))


@pytest.mark.parametrize("method", ["grpo", "ppo"])
def test_kl_to_the_reference_is_measured_at_evaluation_whatever_beta(method):
    config_cls, train = (GRPOConfig, train_grpo) if method == "grpo" else (PPOConfig, train_ppo)
    fields = {**TINY, "eval_every": 1, "lr": 1e-2, "beta": 0.0 if method == "grpo" else 0.05, "minibatch_size": None}
    evals = [row for row in train(None, config_cls(**fields))[2] if "eval/kl_ref" in row]
    assert [row["step"] for row in evals] == [0, 1, 2]
    # p_θ = p_ref at the start only (sampling's cached log-probs and a full forward agree to float precision)
    assert abs(evals[0]["eval/kl_ref"]) < 1e-5 and abs(evals[-1]["eval/kl_ref"]) > 1e-3
    assert "eval/accuracy" in evals[-1]  # beside the task's own held-out metrics


def test_eval_kl_false_makes_no_reference_copy_at_beta_zero(monkeypatch):
    from minirlhf.trainers import online

    copies = []
    monkeypatch.setattr(online, "frozen_copy", lambda model: copies.append(model) or model)
    history = train_grpo(None, GRPOConfig(eval_kl=False, **{**TINY, "eval_every": 1}))[2]
    assert copies == [] and not any("eval/kl_ref" in row for row in history)
    assert any("eval/accuracy" in row for row in history)
