"""Reward-model ensembles: the combination rules against their equations, their checks, and `RewardEnsemble`
standardising its members and scoring as one reward model (also as the online trainers' reward)."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch import nn

from minirlhf.trainers.reward_model import ENSEMBLE_RULES, RewardEnsemble, ensemble_reward


def test_each_rule_by_hand():
    scores = torch.tensor([[1.0, 0.0], [3.0, 0.0]])  # K = 2 members, B = 2 answers
    # answer 0: mean 2, population variance ((1-2)² + (3-2)²)/2 = 1, std 1, min 1; answer 1: all 0
    assert ensemble_reward(scores, "mean").tolist() == [2.0, 0.0]
    assert ensemble_reward(scores, "min").tolist() == [1.0, 0.0]
    assert ensemble_reward(scores, "mean-var", lam=0.5).tolist() == [1.5, 0.0]
    assert ensemble_reward(torch.tensor([[1.0], [5.0]]), "mean-var", lam=0.5).tolist() == [1.0]  # 3 - 0.5·4
    assert ensemble_reward(torch.tensor([[1.0], [5.0]]), "mean-std", lam=0.5).tolist() == [2.0]  # 3 - 0.5·2


scores_kb = st.integers(1, 5).flatmap(lambda k: st.integers(1, 6).flatmap(lambda b: st.lists(
    st.floats(-10, 10), min_size=k * b, max_size=k * b).map(lambda xs: torch.tensor(xs).view(k, b))))


@given(scores_kb, st.floats(0, 3))
def test_conservative_rules_never_pay_more_than_the_mean(scores, lam):
    mean = ensemble_reward(scores, "mean")
    assert torch.allclose(mean, scores.mean(0))
    for rule in ("min", "mean-var", "mean-std"):
        assert (ensemble_reward(scores, rule, lam) <= mean + 1e-5).all(), rule


@given(st.lists(st.floats(-10, 10), min_size=1, max_size=6), st.floats(0, 3))
def test_one_member_is_its_own_reward_under_every_rule(row, lam):
    scores = torch.tensor([row])
    for rule in ENSEMBLE_RULES:
        assert torch.allclose(ensemble_reward(scores, rule, lam), scores[0]), rule


@pytest.mark.parametrize("call, named", [
    (lambda: ensemble_reward(torch.zeros(2, 3), "max"), "rule"),
    (lambda: ensemble_reward(torch.zeros(2, 3), "min", lam=-1.0), "lam"),
    (lambda: ensemble_reward(torch.zeros(2, 3), "mean-std", lam=math.inf), "lam"),
    (lambda: ensemble_reward(torch.zeros(3), "mean"), "scores"),
    (lambda: ensemble_reward(torch.zeros(0, 3), "mean"), "scores"),
    (lambda: RewardEnsemble([]), "member"),
    (lambda: RewardEnsemble([Scorer(1.0)], rule="median"), "rule"),
])
def test_bad_arguments_are_refused_by_name(call, named):
    with pytest.raises(ValueError, match=re.escape(named)):
        call()


class Scorer(nn.Module):
    """A stand-in reward model: `weight` · (number of words) + `offset`, read through `.score` like a RewardModel."""

    def __init__(self, weight: float, offset: float = 0.0):
        super().__init__()
        self.weight, self.offset = nn.Parameter(torch.tensor(weight)), offset

    def score(self, prompts, completions, tokenizer=None):
        return [float(self.weight) * len(c.split()) + self.offset for c in completions]


PROMPTS = ["The film was"] * 4
TEXTS = [" good.", " very good.", " bad, and long, and slow.", " fine, I suppose, really."]  # 1, 2, 5, 4 words


def test_standardised_members_have_mean_zero_and_spread_one_on_the_reference_texts():
    ensemble = RewardEnsemble([Scorer(1.0), Scorer(-3.0, offset=50.0)], rule="mean").standardise(PROMPTS, TEXTS)
    members = ensemble.member_scores(PROMPTS, TEXTS)  # (2, 4)
    assert torch.allclose(members.mean(1), torch.zeros(2), atol=1e-5)
    assert torch.allclose(members.std(1), torch.ones(2), atol=1e-5)
    assert ensemble.score(PROMPTS, TEXTS) == ensemble_reward(members, "mean").tolist()


def test_a_member_that_sits_higher_does_not_leave_the_minimum_to_the_other():
    # the same scorer shifted by 100: raw, the minimum always follows the lower one; standardised they agree
    low, high = Scorer(1.0), Scorer(1.0, offset=100.0)
    ensemble = RewardEnsemble([low, high], rule="min").standardise(PROMPTS, TEXTS)
    alone = RewardEnsemble([low], rule="min").standardise(PROMPTS, TEXTS)
    assert ensemble.score(PROMPTS, TEXTS) == pytest.approx(alone.score(PROMPTS, TEXTS))


def test_disagreement_costs_under_the_conservative_rules():
    # two members of opposite taste: standardised, they disagree on every answer (none has the mean length)
    ensemble = RewardEnsemble([Scorer(1.0), Scorer(-1.0)], rule="mean").standardise(PROMPTS, TEXTS)
    mean = torch.tensor(ensemble.score(PROMPTS, TEXTS))
    for rule in ("min", "mean-std", "mean-var"):
        ensemble.rule = rule
        penalised = torch.tensor(ensemble.score(PROMPTS, TEXTS))
        assert (penalised < mean).all(), rule


def test_an_ensemble_is_the_reward_of_the_sentiment_task():
    from minirlhf.tasks.sentiment import sentiment_task

    ensemble = RewardEnsemble([Scorer(1.0), Scorer(2.0, offset=1.0)], rule="min").standardise(PROMPTS, TEXTS)
    task = sentiment_task(ensemble)
    assert task.reward_fn(PROMPTS, TEXTS) == ensemble.score(PROMPTS, TEXTS)
    assert "offset" in ensemble.state_dict() and "scale" in ensemble.state_dict()  # a run fingerprints them


@given(scores_kb, st.data(), st.sampled_from([math.nan, math.inf, -math.inf]), st.sampled_from(ENSEMBLE_RULES))
def test_a_non_finite_score_is_refused_naming_where_it_is(scores, data, value, rule):
    member = data.draw(st.integers(0, scores.shape[0] - 1))
    answer = data.draw(st.integers(0, scores.shape[1] - 1))
    scores[member, answer] = value
    with pytest.raises(ValueError, match=f"first from member {member} on answer {answer}"):
        ensemble_reward(scores, rule)


def test_integer_scores_are_refused_by_name():
    with pytest.raises(ValueError, match="scores must hold floats, got dtype torch.int64"):
        ensemble_reward(torch.ones(2, 3, dtype=torch.long), "mean")
