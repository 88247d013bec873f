"""The one family of argument checks (`minirlhf.checks`), shared by the losses and the configs: for any value at
all (every float with NaN and ±inf, ints, bools, strings, None), a check passes exactly when the value keeps its
rule, and otherwise raises a ValueError that names the argument and shows the value."""

from __future__ import annotations

import math
import numbers

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from minirlhf import losses
from minirlhf.checks import check_choice, check_interval, check_non_negative, check_positive
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
