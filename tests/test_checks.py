"""The one family of argument checks (`minirlhf.checks`), shared by the losses and the configs: for any value at
all (every float with NaN and ±inf, ints, bools, strings, None), a check passes exactly when the value keeps its
rule, and otherwise raises a ValueError that names the argument and shows the value."""

from __future__ import annotations

import math
import numbers
import re

import pytest
import torch
from hypothesis import assume, given
from hypothesis import strategies as st

from minirlhf import losses
from minirlhf.checks import check_choice, check_interval, check_non_negative, check_positive, parse_bool
from minirlhf.course import bestofn, quiz, stats, toy
from minirlhf.precision import PRECISIONS, resolve_precision
from minirlhf.sampling import DECODERS, sample
from minirlhf.tasks import arithmetic
from minirlhf.tasks.reviews import generate_reviews, review_openings, sentiment_prompts
from minirlhf.tasks.rewards import soft_overlong_punishment
from minirlhf.trainers.grpo import GRPOConfig

ANY_VALUE = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.booleans(), st.text(max_size=5), st.none(),
    st.sampled_from([0, 0.0, -0.0, 1e-300, math.inf, -math.inf, math.nan, "0.1", "sigmoid", True, False]),
)


def _number(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


# check -> (call with the value, the rule it keeps: an oracle written apart from the check)
KINDS = {
    "positive": (lambda v: check_positive("beta", v), lambda v: _number(v) and math.isfinite(v) and v > 0),
    "non_negative": (lambda v: check_non_negative("beta", v), lambda v: _number(v) and math.isfinite(v) and v >= 0),
    "interval": (lambda v: check_interval("beta", v, 0.0, 0.5), lambda v: _number(v) and 0.0 <= v <= 0.5),
    "half_open": (lambda v: check_interval("beta", v, 0, 1, high_included=False), lambda v: _number(v) and 0 <= v < 1),
    "choice": (lambda v: check_choice("beta", v, ("sigmoid", "ipo")), lambda v: v in ("sigmoid", "ipo")),
}


@pytest.mark.parametrize("kind", KINDS)
@given(value=ANY_VALUE)
def test_a_check_passes_exactly_the_values_that_keep_its_rule(kind, value):
    check, keeps = KINDS[kind]
    if keeps(value):
        check(value)
        return
    with pytest.raises(ValueError) as refused:
        check(value)
    message = str(refused.value)
    assert message.startswith("beta must ") and message.endswith(f" got {value!r}")


@pytest.mark.parametrize("value, message", [
    (math.inf, "beta must be > 0 and finite, got inf"),
    (math.nan, "beta must be > 0, got nan"),
    (True, "beta must be > 0, got True"),
    ("0.1", "beta must be > 0, got '0.1'"),
    (0, "beta must be > 0, got 0"),
])
def test_a_positive_hyperparameter_is_a_finite_number(value, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        check_positive("beta", value)
    check_positive("beta", 10**400)  # an int too large for a float is still a finite number


ON, OFF = ("true", "yes", "on", "1"), ("false", "no", "off", "0")


@given(st.one_of(st.text(max_size=6), st.sampled_from(ON + OFF).map(lambda w: f" {w.upper()} ")))
def test_an_on_off_setting_reads_its_words_and_refuses_the_rest_naming_itself(text):
    word = text.strip().lower()
    if word in ON + OFF:
        assert parse_bool("--debug", text) is (word in ON)
    else:
        with pytest.raises(ValueError, match=f"^--debug must be true or false .*, got {re.escape(repr(text))}$"):
            parse_bool("--debug", text)


@given(value=ANY_VALUE)
def test_the_losses_and_the_configs_apply_the_same_rule(value):
    """A loss's β and a config's β are refused together, with the same words (the config's names its class)."""
    try:
        losses.kto_loss(torch.zeros(2), torch.zeros(2), torch.tensor([True, False]), torch.zeros(2), torch.zeros(2),
                        beta=value)
        loss_error = None
    except ValueError as err:
        loss_error = str(err)
    try:
        GRPOConfig(eps=value)
        config_error = None
    except ValueError as err:
        config_error = str(err)
    if isinstance(value, bool) or not _number(value):  # the config's field type check speaks first for these
        assert loss_error is not None and config_error is not None
        return
    assert (loss_error is None) == (config_error is None)
    if loss_error is not None:
        assert config_error == "GRPOConfig." + loss_error.replace("beta", "eps", 1)


def _count(minimum: int, maximum: float = math.inf):
    return lambda v: _number(v) and isinstance(v, numbers.Integral) and minimum <= v <= maximum


_FIVE = [0.1, 0.2, 0.3, 0.2, 0.2]
# Every argument checked through this family outside the losses' tensors and the configs' require_*: where it is
# checked -> (the argument's name in the error, a call with the value, the rule the argument keeps)
CHECKED_ARGUMENTS = {
    "sample.group_size": ("group_size", lambda v: sample(None, None, ["a"], group_size=v), _count(1)),
    "sample.max_new_tokens": ("max_new_tokens", lambda v: sample(None, None, ["a"], max_new_tokens=v), _count(1)),
    "sample.temperature": ("temperature", lambda v: sample(None, None, ["a"], temperature=v), KINDS["positive"][1]),
    "sample.top_k": ("top_k", lambda v: sample(None, None, ["a"], top_k=v), _count(0)),
    "sample.top_p": ("top_p", lambda v: sample(None, None, ["a"], top_p=v), lambda v: _number(v) and 0 < v <= 1),
    "sample.decoder": ("decoder", lambda v: sample(None, None, ["a"], decoder=v), lambda v: v in DECODERS),
    "losses.check_group_size": ("group_size", losses.check_group_size, _count(2)),
    "soft_overlong_punishment.max_completion_len": (
        "max_completion_len", lambda v: soft_overlong_punishment(v, 0), _count(1)),
    "soft_overlong_punishment.soft_punish_cache": (
        "soft_punish_cache", lambda v: soft_overlong_punishment(8, v), _count(0, 8)),
    "generate_reviews.n": ("n", generate_reviews, _count(0)),
    "review_openings.n": ("n", lambda v: review_openings(v, seed=0), _count(0)),
    "sentiment_prompts.split": ("split", sentiment_prompts, lambda v: v in ("train", "test")),
    "arithmetic.problems.split": ("split", arithmetic.problems, lambda v: v in ("train", "test")),
    "resolve_precision.precision": (
        "precision", lambda v: resolve_precision(v, torch.device("cpu")), lambda v: v in PRECISIONS),
    "toy.k3_penalty_optimum.beta": ("beta", lambda v: toy.k3_penalty_optimum(_FIVE, _FIVE, v), KINDS["positive"][1]),
    "toy.group_baseline_noise.G": ("G", lambda v: toy.group_baseline_noise(0.5, v, n_trials=2), _count(2)),
    "toy.score_function_gradients.baseline": (
        "baseline", lambda v: toy.score_function_gradients(_FIVE, _FIVE, 4, baseline=v), lambda v: v in toy.BASELINES),
    "toy.expected_grpo_gradient.scale": (
        "scale", lambda v: toy.expected_grpo_gradient(_FIVE, _FIVE, _FIVE, 2, 0.1, scale=v),
        lambda v: v in ("group", "none")),
    "bestofn.kl_bound.n": ("n", bestofn.kl_bound, _count(1)),
    "bestofn.best_of_n_probs.n": ("n", lambda v: bestofn.best_of_n_probs(torch.ones(2) / 2, torch.arange(2.0), v),
                                  _count(1)),
    "bestofn.expected_best_of_n.n": ("n", lambda v: bestofn.expected_best_of_n(torch.zeros(1, 3), torch.zeros(1, 3), v),
                                     _count(1, 3)),
    "quiz._all_equal_probability.p": (
        "p", lambda v: quiz._all_equal_probability(v, 2), lambda v: _number(v) and 0 <= v <= 1),
    "stats.t_quantile.probability": (
        "probability", lambda v: stats.t_quantile(v, 3), lambda v: _number(v) and 0.5 < v < 1),
    "stats.t_quantile.df": ("df", lambda v: stats.t_quantile(0.9, v), _count(1)),
}
HASHABLE_VALUE = st.one_of(  # stats.t_quantile is cached, so its arguments must be hashable: every value here is
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6), st.booleans(), st.text(max_size=5),
    st.none(), st.sampled_from([0, 0.0, -0.0, -1, 1e-300, math.inf, -math.inf, math.nan, "0.1", "train", True]),
)


@pytest.mark.parametrize("where", CHECKED_ARGUMENTS)
@given(value=HASHABLE_VALUE)
def test_every_checked_argument_refuses_what_breaks_its_rule_naming_itself(where, value):
    """NaN, ±inf, bools, strings, None, zero and negatives, each where its rule refuses it: a ValueError that names
    the argument and shows the value (the rule itself is tested above, once, for every check)."""
    name, call, keeps = CHECKED_ARGUMENTS[where]
    assume(not keeps(value))
    with pytest.raises(ValueError) as refused:
        call(value)
    message = str(refused.value)
    assert message.startswith(f"{name} must ") and message.endswith(f"got {value!r}"), message


@pytest.mark.parametrize("field", ["top_p", "reward_weights", "seed"])
@given(value=st.floats(allow_nan=True, allow_infinity=True) | st.integers(-2**40, 2**40))
def test_the_online_configs_check_their_fields_in_the_same_family(field, value):
    rule = {"top_p": lambda v: 0 < v <= 1, "reward_weights": math.isfinite, "seed": lambda v: 0 <= v < 2**32}[field]
    if field == "seed" and not isinstance(value, int):
        value = int(value) if math.isfinite(value) else -1  # an int field: require_types refuses a float first
    given_value = [value] if field == "reward_weights" else value
    if rule(value):
        GRPOConfig(**{field: given_value})
        return
    named = "GRPOConfig.reward_weights[0]" if field == "reward_weights" else f"GRPOConfig.{field}"
    with pytest.raises(ValueError, match=f"^{re.escape(named)} must .*got {re.escape(repr(value))}$"):
        GRPOConfig(**{field: given_value})
