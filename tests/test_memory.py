"""minirlhf.course.memory: the census finds exactly the models a trainer builds (policy, reference iff β > 0, PPO's
value head, a reward model when the reward is learned), with the right bytes and trained flags."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from minirlhf.course import memory
from minirlhf.models import ValueHead, frozen_copy, load_model
from minirlhf.tasks import arithmetic
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce

NO_EVAL = dataclasses.replace(arithmetic.task(), evaluate=None)
ONE_STEP = dict(model="tiny", steps=1, prompts_per_step=2, max_new_tokens=4, progress=False, eval_every=0)


def weight_bytes(module: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in module.parameters())


@pytest.mark.parametrize("beta", [0.0, 0.04])
def test_grpo_census_policy_and_reference_iff_beta(beta):
    census, (model, _, history) = memory.census_during(
        lambda cb: train_grpo(NO_EVAL, GRPOConfig(**ONE_STEP, group_size=2, beta=beta), callbacks=cb))
    expected = ["policy"] + ["reference"] * (beta > 0)
    assert census.roles == expected
    assert census.summary() == f"{len(expected)} ({', '.join(expected)})"
    assert [m["trained"] for m in census.models] == [True] + [False] * (beta > 0)
    assert census.models[0]["bytes"] == weight_bytes(model)  # the returned policy is the census' policy
    assert census.optimizers == 1
    # AdamW: two moments per trained parameter (plus tiny step counters)
    assert 2 * census.models[0]["bytes"] <= census.optimizer_bytes < 2 * census.models[0]["bytes"] + 4096
    assert len(history) >= 1


def test_ppo_census_adds_the_value_head():
    census, _ = memory.census_during(
        lambda cb: train_ppo(NO_EVAL, PPOConfig(**ONE_STEP, minibatch_size=None, beta=0.05), callbacks=cb))
    assert census.roles == ["policy", "reference", "value head"]
    assert [m["trained"] for m in census.models] == [True, False, True]
    head = census.models[2]
    assert head["class"] == "ValueHead" and head["params"] == head["bytes"] // 4  # hidden_size + 1, float32


def test_reinforce_census_without_kl_holds_only_the_policy():
    census, _ = memory.census_during(
        lambda cb: train_reinforce(NO_EVAL, ReinforceConfig(**ONE_STEP, group_size=2, beta=0.0), callbacks=cb))
    assert census.roles == ["policy"]


def test_models_built_before_the_call_are_not_counted():
    outside, _ = load_model("tiny", device="cpu")  # alive during the run, but not created by it
    census, _ = memory.census_during(
        lambda cb: train_grpo(NO_EVAL, GRPOConfig(**ONE_STEP, group_size=2, beta=0.0), callbacks=cb))
    assert census.roles == ["policy"]
    assert outside is not None


def test_census_of_given_models_roles_bytes_and_table():
    policy, _ = load_model("tiny", device="cpu")
    reference = frozen_copy(policy)
    head = ValueHead(policy.config.hidden_size)
    optimizer = torch.optim.AdamW(list(policy.parameters()) + list(head.parameters()), lr=1e-5)
    census = memory.measure([head, reference, policy], [optimizer])
    assert census.roles == ["policy", "reference", "value head"]  # sorted by role
    assert census.weight_bytes == weight_bytes(policy) + weight_bytes(reference) + weight_bytes(head)
    assert census.optimizer_bytes == 0 and census.gradient_bytes == 0  # no step taken yet

    ids = torch.tensor([[1, 2, 3]])
    out = policy(input_ids=ids, output_hidden_states=True)
    (out.logits.logsumexp(-1).mean() + head(out.hidden_states[-1]).mean()).backward()
    optimizer.step()
    census = memory.measure([policy, reference, head], [optimizer])
    trained_bytes = weight_bytes(policy) + weight_bytes(head)
    assert census.gradient_bytes == trained_bytes
    assert 2 * trained_bytes <= census.optimizer_bytes < 2 * trained_bytes + 4096
    assert census.total_bytes == census.weight_bytes + census.gradient_bytes + census.optimizer_bytes

    table = census.table()
    assert table.count("\n") == 2 + 3 + 2  # header, separator, 3 models, gradients, optimiser state, total
    assert "value head (ValueHead, trained)" in table and "reference" in table
    assert census._repr_markdown_() == table
    assert memory.census_mb(census.models) == pytest.approx(census.weight_bytes / 2**20)
    both = memory.census_table({"PPO by hand": census})
    assert "| PPO by hand | 3: " in both and "| 2 |" in both


def test_census_without_optimizers_uses_requires_grad_and_excludes():
    policy, _ = load_model("tiny", device="cpu")
    reference = frozen_copy(policy)
    assert [m["role"] for m in memory.model_census([policy, reference])] == ["policy", "reference"]
    roles = [m["role"] for m in memory.model_census()]  # every model alive in this process
    without = [m["role"] for m in memory.model_census(exclude=[reference])]
    assert roles.count("policy") >= 1 and roles.count("reference") == without.count("reference") + 1


def test_shared_parameters_are_counted_once():
    a = torch.nn.Linear(4, 4)
    b = torch.nn.Sequential(torch.nn.Linear(2, 2))
    b.append(a)  # b contains a: only b is a model
    census = memory.measure(memory.top_level([a, b]))
    assert [m["class"] for m in census.models] == ["Sequential"]
    assert census.models[0]["params"] == 6 + 20
    assert memory.census_summary([]) == "0"


def test_census_during_needs_a_logged_step():
    with pytest.raises(RuntimeError, match="never called"):
        memory.census_during(lambda callbacks: None)
