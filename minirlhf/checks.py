"""The argument checks every floor shares: one rule per kind of setting, one message shape.

Each check takes the argument's name and its value and raises a ValueError naming both:

    check_positive("beta", -0.1)                   beta must be > 0, got -0.1
    check_positive("beta", inf)                    beta must be > 0 and finite, got inf
    check_non_negative("rpo_alpha", inf)           rpo_alpha must be >= 0 and finite, got inf
    check_interval("gamma", 1.5, 0.0, 1.0)         gamma must lie in [0.0, 1.0], got 1.5
    check_count("group_size", 1, minimum=2)        group_size must be an integer >= 2, got 1
    check_finite("reward_weights[0]", nan)         reward_weights[0] must be a finite number, got nan
    check_choice("loss_type", "x", ("sigmoid",))   loss_type must be one of: sigmoid; got 'x'
    parse_bool("--debug", "maybe")                 --debug must be true or false (or yes/no, on/off, 1/0), got 'maybe'

A check may say why the rule holds, in brackets before the value: check_count("top_k", -1, 0, why="0 = off") says
top_k must be an integer >= 0 (0 = off), got -1.

A number here is a real number that is not a bool (True is an int in Python, not a β), and a bound is finite: an
inf or NaN hyperparameter would reach every loss and every gradient. A count is an int (a group of 2.5 answers is no
group). The losses, the sampler, the tasks and the course call these on their arguments; the configs call them on
their fields (`trainers.config.require_positive`, ...), named as GRPOConfig.beta.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_finite(value: Any) -> bool:
    return isinstance(value, numbers.Integral) or math.isfinite(value)  # an int is finite, even one beyond float


def _because(why: str) -> str:
    return f" ({why})" if why else ""


def check_positive(name: str, value: Any, why: str = "") -> None:
    """A finite number > 0 (a learning rate, a clip range ε, a KL weight β that must act)."""
    _check_bound(name, value, ">", why)


def check_non_negative(name: str, value: Any, why: str = "") -> None:
    """A finite number >= 0 (a weight that 0 switches off)."""
    _check_bound(name, value, ">=", why)


def _check_bound(name: str, value: Any, relation: str, why: str) -> None:
    if not _is_number(value) or not (value > 0 if relation == ">" else value >= 0):  # NaN fails the comparison
        raise ValueError(f"{name} must be {relation} 0{_because(why)}, got {value!r}")
    if not _is_finite(value):
        raise ValueError(f"{name} must be {relation} 0 and finite{_because(why)}, got {value!r}")


def check_finite(name: str, value: Any, why: str = "") -> None:
    """A finite number of either sign (a reward weight)."""
    if not _is_number(value) or not _is_finite(value):
        raise ValueError(f"{name} must be a finite number{_because(why)}, got {value!r}")


def check_interval(name: str, value: Any, low: float, high: float, high_included: bool = True,
                   low_included: bool = True, why: str = "") -> None:
    """A number in [low, high] (an end left out when `low_included` / `high_included` is false); NaN lies in no
    interval."""
    inside = (_is_number(value) and (low <= value if low_included else low < value)
              and (value <= high if high_included else value < high))
    if not inside:
        interval = f"{'[' if low_included else '('}{low}, {high}{']' if high_included else ')'}"
        raise ValueError(f"{name} must lie in {interval}{_because(why)}, got {value!r}")


def check_count(name: str, value: Any, minimum: int = 1, why: str = "") -> None:
    """An int >= `minimum` (a number of samples, a group size, a number of tokens); a bool or a float is no count."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{_because(why)}, got {value!r}")


def check_choice(name: str, value: Any, choices: Sequence[str], why: str = "") -> None:
    """One of the named `choices` (a string setting such as a loss type)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of: {', '.join(choices)}{_because(why)}; got {value!r}")


BOOL_WORDS = {"true": True, "yes": True, "on": True, "1": True, "false": False, "no": False, "off": False, "0": False}


def parse_bool(name: str, text: str) -> bool:
    """An on/off setting written as text (a flag's value, a task's option): true/false, yes/no, on/off or 1/0."""
    if text.strip().lower() not in BOOL_WORDS:
        raise ValueError(f"{name} must be true or false (or yes/no, on/off, 1/0), got {text!r}")
    return BOOL_WORDS[text.strip().lower()]
