"""What a reward function may hand back: an ordered sequence of numbers, one per completion, and nothing else.

The boundary is `tasks.call_reward`. Generated answers of every shape people return (lists, tuples, numpy arrays
and torch tensors of any shape, dicts, sets, generators, strings, ranges, nested lists, numpy and 0-d tensor
elements, bools) must either come back as exactly those numbers in that order, or be refused naming the function
and the type. A dict's keys or a set's order must never become the rewards.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from minirlhf.errors import is_user_error
from minirlhf.tasks import call_reward

B = 4
PROMPTS, COMPLETIONS = ["1+1="] * B, ["2", "3", "2", " 2"]

floats = st.floats(-1e6, 1e6, allow_nan=False)
numbers = st.one_of(floats, st.integers(-10**6, 10**6), st.booleans())
element = st.one_of(
    numbers,
    floats.map(np.float32), floats.map(np.float64), st.integers(-100, 100).map(np.int64),
    floats.map(np.longdouble), floats.map(Fraction), floats.map(Decimal), st.booleans().map(np.bool_),
    floats.map(complex), floats.map(np.complex128),  # complex: refused, even with no imaginary part
    floats.map(torch.tensor),  # a 0-d tensor
    floats.map(lambda v: torch.tensor([v])),  # a 1-element 1-D tensor: nested, refused
    st.lists(floats, min_size=1, max_size=2),  # a nested list
    st.text(max_size=2), st.none(),
)


def _answers():
    """(what the reward returns, the rewards it stands for when it is valid, else None)."""
    values = st.lists(numbers, min_size=0, max_size=6)
    return st.one_of(
        values.map(lambda v: (list(v), v)),
        values.map(lambda v: (tuple(v), v)),
        values.map(lambda v: (np.array(v, dtype=np.float64), v)),
        values.map(lambda v: (torch.tensor(v, dtype=torch.float64), v)),
        values.map(lambda v: (np.array(v, dtype=np.longdouble), v)),
        values.map(lambda v: (torch.tensor(v, dtype=torch.float64).to_sparse(), v)),
        st.tuples(values, st.lists(st.booleans(), min_size=6, max_size=6)).map(_masked),  # valid when none is masked
        values.map(lambda v: (torch.tensor(v, dtype=torch.float64, device="meta"), None)),  # no values to read
        st.lists(element, min_size=B, max_size=B).map(lambda v: (v, None)),  # mixed elements: judged one by one
        values.map(lambda v: (np.array(v, dtype=np.float64).reshape(-1, 1), None)),  # (B, 1)
        values.map(lambda v: (torch.tensor(v, dtype=torch.float64).reshape(1, -1), None)),  # (1, B)
        floats.map(lambda v: (torch.tensor(v), None)),  # a 0-d tensor: one number for the batch
        floats.map(lambda v: (np.float64(v), None)),
        numbers.map(lambda v: (v, None)),
        values.map(lambda v: ({i: x for i, x in enumerate(v)}, None)),  # keys 0..B-1 would be the rewards
        values.map(lambda v: (set(v), None)),
        values.map(lambda v: (frozenset(v), None)),
        values.map(lambda v: ((x for x in v), None)),  # a generator
        values.map(lambda v: (iter(v), None)),
        st.just((range(B), None)),
        st.text(min_size=B, max_size=B).map(lambda t: (t, None)),
        st.binary(min_size=B, max_size=B).map(lambda t: (t, None)),
    )


def _masked(values_and_mask):
    values, mask = values_and_mask
    return np.ma.array(values, mask=mask[: len(values)], dtype=np.float64), values


def _unreadable(returned) -> bool:
    """An array or tensor of the right shape whose values cannot be read as rewards: masked entries, the meta
    device."""
    if np.ma.isMaskedArray(returned):
        return bool(np.ma.getmaskarray(returned).any())
    return isinstance(returned, torch.Tensor) and returned.is_meta


def _valid_element(x) -> bool:
    if isinstance(x, torch.Tensor):
        return x.ndim == 0
    return isinstance(x, bool | int | float | np.bool_ | Fraction | Decimal) or isinstance(x, np.generic) \
        and np.isrealobj(x) and np.issubdtype(x.dtype, np.number)


def _as_number(x) -> float:
    return float(x.item() if isinstance(x, torch.Tensor) else x)


@settings(max_examples=300, deadline=None)
@given(_answers())
def test_only_an_ordered_sequence_of_numbers_crosses_as_rewards(answer):
    returned, meant = answer

    def my_reward(prompts, completions, **_):
        return returned

    ordered = isinstance(returned, list | tuple) or (
        isinstance(returned, np.ndarray | torch.Tensor) and returned.ndim == 1)
    readable = ordered and not _unreadable(returned)
    elements = list(returned.data if np.ma.isMaskedArray(returned) else returned) if readable else []
    valid = ordered and len(elements) == B and all(_valid_element(x) for x in elements)
    if valid:
        rewards = call_reward(my_reward, PROMPTS, COMPLETIONS)
        assert rewards.tolist() == pytest.approx([_as_number(x) for x in elements], rel=1e-6, abs=1e-6)
        if meant is not None:
            assert rewards.tolist() == pytest.approx([float(x) for x in meant], rel=1e-6, abs=1e-6)
    else:
        with pytest.raises(ValueError) as err:
            call_reward(my_reward, PROMPTS, COMPLETIONS)
        message = str(err.value)
        assert message.startswith("reward function my_reward returned") and is_user_error(err.value)
        if not ordered and returned is not None and not isinstance(returned, int | float | np.generic):
            assert type(returned).__name__ in message  # the type is named


@pytest.mark.parametrize("returned, words", [
    ({0: 1.0, 1: 0.0, 2: 1.0, 3: 0.0}, "returned a dict"),
    ({1.0, 0.0}, "returned a set"),
    ((r for r in [1.0] * B), "returned a generator"),
    ("1010", "returned a str"),
    (torch.ones(B, 1), r"returned a Tensor of shape \(4, 1\)"),
    (np.ones((1, B)), r"returned a ndarray of shape \(1, 4\)"),
    ([[1.0]] * B, r"returned \[1\.0\] \(a list\) for completion 0"),
    ([torch.ones(1)] * B, r"returned tensor\(\[1\.\]\) \(a Tensor\) for completion 0"),
    (np.ma.array([1.0] * B, mask=[0, 1, 0, 1]), r"returned a masked array with completions \[1, 3\] masked"),
    (torch.ones(B, device="meta"), "returned a tensor on the meta device"),
])
def test_a_refused_answer_is_named_with_its_type(returned, words):
    def my_reward(prompts, completions, **_):
        return returned

    with pytest.raises(ValueError, match=f"reward function my_reward {words}"):
        call_reward(my_reward, PROMPTS, COMPLETIONS)


def test_bools_count_as_one_and_zero():
    def exact(prompts, completions, **_):
        return [c.strip() == "2" for c in completions]

    assert call_reward(exact, PROMPTS, COMPLETIONS).tolist() == [1.0, 0.0, 1.0, 1.0]
