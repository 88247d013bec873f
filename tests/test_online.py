"""Online RL on the arithmetic task: reward checks, config checks, constant rewards, and real learning."""

import json
import math

import pytest
import torch

from minirlhf.models import SHIPPED, load_model
from minirlhf.tasks import Task, arithmetic, call_reward
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.run import History


def test_correctness_reward_is_exact():
    prompts = ["17+25="] * 5
    assert arithmetic.correctness_reward(prompts, ["42", " 42 ", "420", "41", "42 is it"]) == [1, 1, 0, 0, 0]


def test_correct_answers_are_per_problem_and_average_to_the_accuracy():
    model, tokenizer = load_model("tiny-sft")  # about 60% right: both verdicts occur
    held_out = arithmetic.problems("test")[:40]
    correct = arithmetic.correct_answers(model, tokenizer, held_out, batch_size=16)  # 3 batches, the last one short
    assert len(correct) == 40 and set(correct) == {0, 1}
    assert arithmetic.accuracy(model, tokenizer, held_out) == sum(correct) / 40
    assert correct[:16] == arithmetic.correct_answers(model, tokenizer, held_out[:16])  # same problem, same verdict


def test_held_out_problems_never_reach_training():
    train = {p.prompt for p in arithmetic.problems("train")}
    test = {p.prompt for p in arithmetic.problems("test")}
    assert not train & test and 800 < len(test) < 1200
    assert {p for p, _ in arithmetic.sft_examples()} <= train
    import random

    assert set(arithmetic.train_prompts(500, random.Random(0))) <= train


def _bad_reward(kind):
    def bad_reward(prompts, completions, **_):
        return {"none": None, "nan": [math.nan] * len(completions), "inf": [math.inf] * len(completions),
                "short": [0.0] * (len(completions) - 1), "item": [None] * len(completions)}[kind]

    return bad_reward


@pytest.mark.parametrize("kind, message", [
    ("none", "returned None"), ("nan", "nan"), ("inf", "inf"), ("short", "returned 3 rewards for 4"),
    ("item", "returned None for completion 0"),
])
def test_bad_reward_functions_are_named_in_the_error(kind, message):
    with pytest.raises(ValueError, match=message) as err:
        call_reward(_bad_reward(kind), ["1+1="] * 4, ["2"] * 4)
    assert "bad_reward" in str(err.value)


@pytest.mark.parametrize("config_cls, field, value", [
    (GRPOConfig, "beta", -0.1), (GRPOConfig, "eps", 0.0), (GRPOConfig, "lr", -1e-3), (GRPOConfig, "group_size", 1),
    (GRPOConfig, "scale", "median"), (GRPOConfig, "aggregation", "max"), (ReinforceConfig, "baseline", "critic"),
    (GRPOConfig, "minibatch_size", 7),
])
def test_invalid_config_values_name_the_field(config_cls, field, value):
    with pytest.raises(ValueError, match=field):
        config_cls(**{field: value})


def test_history_writes_jsonl_as_it_goes(tmp_path):
    seen = []
    history = History(tmp_path / "m.jsonl", callbacks=[lambda h: seen.append(len(h))])
    history.log(0, reward=torch.tensor(0.5))
    history.log(1, reward=0.75, **{"eval/accuracy": 0.2})
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert rows == [{"step": 0, "reward": 0.5}, {"step": 1, "reward": 0.75, "eval/accuracy": 0.2}]
    assert history.column("eval/accuracy") == ([1], [0.2]) and seen == [1, 2]


def test_constant_reward_gives_zero_grpo_advantages_and_no_nan():
    model, tokenizer = load_model("tiny", device="cpu")
    constant = Task("constant", arithmetic.train_prompts, lambda prompts, completions, **_: [1.0] * len(prompts),
                    max_new_tokens=4)
    before = [p.detach().clone() for p in model.parameters()]
    config = GRPOConfig(model="tiny", steps=2, prompts_per_step=4, group_size=4, beta=0.0, progress=False)
    _, _, history = train_grpo(constant, config, model=model, tokenizer=tokenizer)
    steps = [row for row in history if "reward" in row]  # the last row is the final evaluation (eval/kl_ref)
    assert len(steps) == 2 and all(row["zero_std_groups"] == 1.0 for row in steps)
    assert all(math.isfinite(v) for row in history for v in row.values())
    # zero advantages and β = 0: the loss has no gradient, so the policy must not move
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))



@pytest.mark.parametrize("group_size, expected", [(4, [1.0, 1.0]), (1, [])])
def test_reinforce_logs_the_share_of_all_equal_groups(group_size, expected):
    # the arithmetic prompts, every completion rewarded 1: each group of G >= 2 is all-equal; G = 1 has no groups
    constant = Task("constant", arithmetic.train_prompts, lambda prompts, completions, **_: [1.0] * len(prompts),
                    max_new_tokens=4)
    config = ReinforceConfig(model="tiny", steps=2, prompts_per_step=2, group_size=group_size, baseline="reinforce++",
                             eval_kl=False, progress=False)
    history = train_reinforce(constant, config)[2]
    assert [row["zero_std_groups"] for row in history if "zero_std_groups" in row] == expected
    assert len([row for row in history if "reward" in row]) == 2

needs_sft = pytest.mark.skipif(
    not (SHIPPED["tiny-sft"] / "config.json").exists(), reason="run scripts/build_sft_model.py"
)


@pytest.mark.slow
@needs_sft
@pytest.mark.parametrize("method", ["grpo", "rloo"])
def test_short_run_improves_held_out_accuracy(method):
    """A learning test: held-out exact-match accuracy (problems never trained on) rises clearly above SFT's."""
    task = arithmetic.task()
    if method == "grpo":
        config = GRPOConfig(steps=40, eval_every=1000, progress=False)
        _, _, history = train_grpo(task, config)
    else:
        config = ReinforceConfig(steps=40, eval_every=1000, progress=False, baseline="rloo")
        _, _, history = train_reinforce(task, config)
    before, after = history[0]["eval/accuracy"], history[-1]["eval/accuracy"]
    assert after >= before + 0.10, (before, after)


@pytest.mark.slow
@needs_sft
def test_demo_runs_end_to_end_in_quick_mode(tmp_path):
    from minirlhf.course import viz
    from minirlhf.demo import run_demo

    rows = run_demo(tmp_path, quick=True, progress=False)
    assert [r["method"] for r in rows] == ["GRPO", "DPO"]
    viz.plot_demo(tmp_path)  # the figures, drawn by the course from the demo's metrics
    for name in ["summary.md", "summary.json", "grpo_training.png", "dpo_logps.png", "dpo_training.png",
                 "grpo/metrics.jsonl", "dpo/metrics.jsonl"]:
        assert (tmp_path / name).stat().st_size > 0, name
