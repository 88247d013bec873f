"""An attack on issue 25's options (recipes, clip-higher, dynamic sampling, overlong handling, RPO) and on the doors
issue 27 left open, run as a new user would. Each finding is fixed at its door and tested here by a generated
(property or fuzz) test of its class: bad values are refused before training starts, naming the field and value."""

from __future__ import annotations

import dataclasses
import math
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirlhf.tasks import Task, WeightedReward
from minirlhf.trainers.dpo import DPOConfig
from minirlhf.trainers.grpo import RECIPES, GRPOConfig, train_grpo
from minirlhf.trainers.online import OVERLONG, with_overlong_penalty
from minirlhf.trainers.ppo import PPOConfig
from minirlhf.trainers.reinforce import ReinforceConfig
from minirlhf.trainers.reward_model import RewardModelConfig
from minirlhf.trainers.sft import SFTConfig

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CONFIGS = (GRPOConfig, ReinforceConfig, PPOConfig, DPOConfig, SFTConfig, RewardModelConfig)
TINY = dict(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=4, eval_every=0, progress=False)


def _float_fields(config_cls: type) -> list[tuple[str, bool]]:
    """(name, is a list) of every float field of a config: `float`, `float | None`, `list[float] | None`."""
    hints = typing.get_type_hints(config_cls)
    found = []
    for f in dataclasses.fields(config_cls):
        args = typing.get_args(hints[f.name]) or (hints[f.name],)
        if float in args:
            found.append((f.name, False))
        elif any(typing.get_origin(a) is list and typing.get_args(a) == (float,) for a in args):
            found.append((f.name, True))
    return found


FLOAT_FIELDS = [(cls, name, is_list) for cls in CONFIGS for name, is_list in _float_fields(cls)]


@FUZZ
@given(st.sampled_from(FLOAT_FIELDS), st.sampled_from([math.nan, math.inf, -math.inf]), st.integers(0, 2))
def test_no_float_field_of_any_config_takes_nan_or_inf(field, value, position):
    """Found: top_p, overlong_weight, reward_weights (online) and DPO's beta and rpo_alpha took inf or NaN, and the
    run failed at its first sample or reward, after run.json and metrics.jsonl were written."""
    config_cls, name, is_list = field
    given_value = [1.0] * position + [value] if is_list else value
    extra = {"reward": ["m:f"] * len(given_value), "prompts": "p.jsonl"} if name == "reward_weights" else {}
    with pytest.raises(ValueError, match=rf"{config_cls.__name__}\.{name}"):
        config_cls(**extra, **{name: given_value})


@FUZZ
@given(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3))
def test_top_p_is_in_0_1_and_top_k_is_not_negative_before_the_first_sample(top_p, top_k):
    valid = 0 < top_p <= 1 and top_k >= 0
    if valid:
        GRPOConfig(top_p=top_p, top_k=top_k)
    else:
        with pytest.raises(ValueError, match=r"GRPOConfig\.top_[pk] must"):
            GRPOConfig(top_p=top_p, top_k=top_k)


@FUZZ
@given(st.integers(1, 9), st.booleans(), st.floats(0, 5), st.integers(0, 3))
def test_an_option_of_a_feature_that_is_off_is_refused_not_ignored(rounds, dynamic, weight, cache):
    """Found: --max-sampling-rounds without --dynamic-sampling, and --overlong-weight without --overlong-cache, were
    silently ignored (as DPO's rpo_alpha and ipo_normalisation already are refused outside their losses)."""
    fields = dict(max_sampling_rounds=rounds, dynamic_sampling=dynamic, overlong_weight=weight, overlong_cache=cache)
    idle = ([] if dynamic or rounds == 4 else ["max_sampling_rounds"]) + ([] if cache or weight == 1.0
                                                                           else ["overlong_weight"])
    if idle:
        with pytest.raises(ValueError, match=rf"GRPOConfig\.({'|'.join(idle)})=.* which is off"):
            GRPOConfig(**fields)
    else:
        GRPOConfig(**fields)


def _reward(name: str):
    def reward(prompts, completions, **columns):
        return [0.0] * len(completions)

    reward.__name__ = name
    return reward


reward_names = st.sampled_from(["exact", "overlong", "length", "format"])


@FUZZ
@given(st.lists(reward_names, min_size=1, max_size=3, unique=True))
def test_a_reward_named_like_the_overlong_penalty_is_refused_naming_both(tiny, names):
    """Found: `--reward f.py:overlong --overlong-cache 2` ended with "reward function names must be unique, got
    ['overlong', 'overlong']", naming neither flag."""
    fns = [_reward(name) for name in names]
    reward = fns[0] if len(fns) == 1 else WeightedReward([(name, 1.0, fn) for name, fn in zip(names, fns)])
    task = Task("t", lambda n, rng: ["1+1="] * n, reward, max_new_tokens=8)
    config = GRPOConfig(overlong_cache=2, max_new_tokens=8)
    if OVERLONG in names:
        with pytest.raises(ValueError, match=r"GRPOConfig\.overlong_cache=2 adds the reward term 'overlong'.*task 't' "
                                             r"already has a reward function named 'overlong'"):
            with_overlong_penalty(task, config, tiny[1])
    else:
        terms = with_overlong_penalty(task, config, tiny[1]).reward_fn.terms
        assert [name for name, _, _ in terms] == [*names, OVERLONG]


# ----------------------------------------------------------------------------- a recipe or preset on resume


@pytest.fixture(scope="module")
def dapo_run(tmp_path_factory):
    """A tiny run started with the dapo recipe, one checkpoint per step."""
    out = tmp_path_factory.mktemp("dapo") / "run"
    train_grpo(None, GRPOConfig(**RECIPES["dapo"], **{**TINY, "steps": 1}, save_every=1, out_dir=str(out)))
    return out


RECIPE_FIELDS = sorted({name for fields in RECIPES.values() for name in fields})


@FUZZ
@given(st.sampled_from(sorted(RECIPES)),
       st.dictionaries(st.sampled_from(RECIPE_FIELDS), st.sampled_from(sorted(RECIPES)), max_size=3))
def test_a_recipe_never_changes_a_resumed_run_silently(monkeypatch, dapo_run, recipe, flags):
    """Found: `--resume DIR --recipe gspo` on a dapo run was silently ignored (the run went on as dapo). Now a recipe
    that disagrees with the resumed run's config.json is refused, naming the fields; flags given still win."""
    from minirlhf import __main__ as cli
    from minirlhf.errors import UserError
    from minirlhf.trainers import grpo

    flags = {name: RECIPES[source].get(name, GRPOConfig.__dataclass_fields__[name].default)
             for name, source in flags.items()}
    argv = ["grpo", "--resume", str(dapo_run), "--steps", "2", "--recipe", recipe]
    for name, value in flags.items():
        argv += [f"--{name.replace('_', '-')}", str(value).lower() if value is None or isinstance(value, bool)
                 else str(value)]
    seen = []
    monkeypatch.setattr(grpo, "train_grpo", lambda data, config: seen.append(config) or (None, None, [{"step": 0}]))
    run = RECIPES["dapo"] | flags  # what the resumed run holds once the flags given changed it
    differ = [name for name, value in RECIPES[recipe].items() if name not in flags and run.get(name) != value]
    if differ:
        with pytest.raises(UserError, match=rf"--recipe {recipe} with --resume .*the run's config.json holds "
                                            rf"{differ[0]}="):
            cli._main(argv)
    else:
        cli._main(argv)
        assert {name: getattr(seen[0], name) for name in run} == run
